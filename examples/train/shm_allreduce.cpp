#include "shm_allreduce.hpp"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <ctime>
#include <fstream>

#include "core.hpp"

namespace ddprun::train {
namespace {

constexpr std::uint64_t kMagic = 0x6464707273686d31ULL;  // "ddprshm1"
constexpr int kSpins = 2000;                             // before sleeping on the futex
constexpr std::size_t kAlign = 64;

std::size_t round_up(std::size_t v, std::size_t a) {
  return (v + a - 1) / a * a;
}

std::string errno_text() {
  return std::strerror(errno);
}

// Shared (not private) futex: the word lives in a mapping shared between processes.
void futex_wait(std::atomic<std::uint32_t>* word, std::uint32_t expected, int timeout_ms) {
  timespec ts{timeout_ms / 1000, static_cast<long>(timeout_ms % 1000) * 1'000'000L};
  ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void futex_wake_all(std::atomic<std::uint32_t>* word) {
  ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

// Gone, or a zombie its parent has not reaped yet: either way it will never arrive.
bool alive(pid_t pid) {
  if (::kill(pid, 0) != 0 && errno == ESRCH) return false;
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(f, stat)) return true;  // no /proc: trust kill()
  const auto close = stat.rfind(')');
  if (close == std::string::npos || close + 2 >= stat.size()) return true;
  const char state = stat[close + 2];
  return state != 'Z' && state != 'X';
}

}  // namespace

struct ShmAllreduce::Header {
  std::uint64_t magic;
  std::uint32_t world;
  std::uint32_t pad;
  alignas(64) std::atomic<std::uint32_t> arrived;
  alignas(64) std::atomic<std::uint32_t> generation;
  alignas(64) std::int32_t pids[1];  // world entries
};

std::pair<std::int64_t, std::int64_t> shm_share(std::int64_t n, int world, int rank) {
  const std::int64_t w = world, r = rank;
  const std::int64_t base = n / w, extra = n % w;
  const std::int64_t begin = r * base + std::min(r, extra);
  return {begin, begin + base + (r < extra ? 1 : 0)};
}

std::size_t ShmAllreduce::segment_bytes(int world, const std::vector<std::int64_t>& numels) {
  std::size_t slot = 0;
  for (auto n : numels) slot += round_up(static_cast<std::size_t>(n) * sizeof(float), kAlign);
  const std::size_t head =
      round_up(offsetof(Header, pids) + sizeof(std::int32_t) * static_cast<std::size_t>(world), 4096);
  return head + slot * static_cast<std::size_t>(world + 1);
}

ShmAllreduce::ShmAllreduce(const std::string& name, bool create, int world, int rank,
                           const std::vector<std::int64_t>& bucket_numels, std::chrono::milliseconds timeout)
    : name_(name), owner_(create), world_(world), rank_(rank), numels_(bucket_numels), timeout_(timeout) {
  for (auto n : numels_) {
    offsets_.push_back(slot_floats_);
    slot_floats_ += static_cast<std::int64_t>(round_up(static_cast<std::size_t>(n) * sizeof(float), kAlign) /
                                              sizeof(float));
  }
  bytes_ = segment_bytes(world, numels_);
  data_offset_ =
      bytes_ - static_cast<std::size_t>(slot_floats_) * sizeof(float) * static_cast<std::size_t>(world + 1);
  const int fd = ::shm_open(name.c_str(), create ? (O_RDWR | O_CREAT | O_EXCL) : O_RDWR, 0600);
  if (fd < 0) {
    throw Error("shared-memory all-reduce: cannot " + std::string(create ? "create" : "open") + " /dev/shm" +
                name + ": " + errno_text());
  }
  // posix_fallocate, not ftruncate alone: a full /dev/shm must fail here, not SIGBUS later.
  if (create) {
    const int rc = ::posix_fallocate(fd, 0, static_cast<off_t>(bytes_));
    if (rc != 0) {
      ::close(fd);
      ::shm_unlink(name.c_str());
      throw Error("shared-memory all-reduce: cannot reserve " + std::to_string(bytes_) +
                  " bytes in /dev/shm: " + std::strerror(rc));
    }
  }
  base_ = ::mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int map_errno = errno;
  ::close(fd);
  if (base_ == MAP_FAILED) {
    base_ = nullptr;
    if (create) ::shm_unlink(name.c_str());
    throw Error("shared-memory all-reduce: cannot map /dev/shm" + name + ": " + std::strerror(map_errno));
  }
  Header* h = header();
  if (create) {
    h->world = static_cast<std::uint32_t>(world);
    h->arrived.store(0);
    h->generation.store(0);
    std::atomic_thread_fence(std::memory_order_release);
    h->magic = kMagic;
  } else if (h->magic != kMagic || h->world != static_cast<std::uint32_t>(world)) {
    ::munmap(base_, bytes_);
    base_ = nullptr;
    throw Error("shared-memory all-reduce: /dev/shm" + name + " is not this group's segment");
  }
  h->pids[rank] = static_cast<std::int32_t>(::getpid());
}

ShmAllreduce::~ShmAllreduce() {
  if (base_ != nullptr) ::munmap(base_, bytes_);
  if (owner_) ::shm_unlink(name_.c_str());  // harmless when already unlinked
}

void ShmAllreduce::unlink_name() {
  if (owner_) ::shm_unlink(name_.c_str());
  owner_ = false;
}

ShmAllreduce::Header* ShmAllreduce::header() const {
  return static_cast<Header*>(base_);
}

float* ShmAllreduce::slot(int r, std::size_t bucket) const {
  auto* data = reinterpret_cast<float*>(static_cast<char*>(base_) + data_offset_);
  return data + static_cast<std::int64_t>(r) * slot_floats_ + offsets_[bucket];
}

float* ShmAllreduce::result(std::size_t bucket) const {
  return slot(world_, bucket);
}

void ShmAllreduce::check_peers() const {
  const Header* h = header();
  for (int r = 0; r < world_; ++r) {
    const pid_t pid = h->pids[r];
    if (r != rank_ && pid > 0 && !alive(pid)) {
      throw Error("shared-memory all-reduce: rank " + std::to_string(r) + " (pid " + std::to_string(pid) +
                  ") exited while the group waited for it");
    }
  }
}

void ShmAllreduce::barrier() {
  Header* h = header();
  const std::uint32_t gen = h->generation.load(std::memory_order_acquire);
  if (h->arrived.fetch_add(1, std::memory_order_acq_rel) + 1 == static_cast<std::uint32_t>(world_)) {
    h->arrived.store(0, std::memory_order_relaxed);
    h->generation.fetch_add(1, std::memory_order_acq_rel);
    futex_wake_all(&h->generation);
    return;
  }
  for (int i = 0; i < kSpins; ++i) {
    if (h->generation.load(std::memory_order_acquire) != gen) return;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  while (h->generation.load(std::memory_order_acquire) == gen) {
    futex_wait(&h->generation, gen, 100);
    if (h->generation.load(std::memory_order_acquire) != gen) return;
    check_peers();
    if (std::chrono::steady_clock::now() > deadline) {
      throw Error("shared-memory all-reduce: timed out after " + std::to_string(timeout_.count() / 1000) +
                  " s waiting for the other ranks");
    }
  }
}

void ShmAllreduce::allreduce_sum(std::size_t bucket, float* data, std::int64_t n) {
  if (bucket >= numels_.size() || n != numels_[bucket]) {
    throw Error("shared-memory all-reduce: bucket " + std::to_string(bucket) +
                " does not match the layout it was set up with");
  }
  std::memcpy(slot(rank_, bucket), data, static_cast<std::size_t>(n) * sizeof(float));
  barrier();  // every contribution is in place
  const auto [lo, hi] = shm_share(n, world_, rank_);
  float* out = result(bucket);
  // Rank order, the same on every rank: the sum does not depend on who reduced which part.
  std::memcpy(out + lo, slot(0, bucket) + lo, static_cast<std::size_t>(hi - lo) * sizeof(float));
  for (int r = 1; r < world_; ++r) {
    const float* in = slot(r, bucket);
    for (std::int64_t i = lo; i < hi; ++i) out[i] += in[i];
  }
  barrier();  // every part is reduced
  std::memcpy(data, out, static_cast<std::size_t>(n) * sizeof(float));
  // No third barrier: a rank can only overwrite this bucket's slots or result after the next
  // step's first barrier, which the slowest rank reaches only after its copy above.
}

}  // namespace ddprun::train
