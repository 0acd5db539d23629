#include "core.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <thread>

namespace ddprun::train {
namespace fs = std::filesystem;

std::string first_line(const std::string& s) {
  const auto nl = s.find('\n');
  return nl == std::string::npos ? s : s.substr(0, nl);
}

int preempt_exit_code(int signo) {
  return 128 + signo;
}

namespace {

int parse_int_var(const EnvLookup& env, const std::string& name, int fallback, int lo, int hi) {
  const auto v = env(name);
  if (!v || v->empty()) {
    return fallback;
  }
  int out = 0;
  const char* first = v->data();
  const char* last = first + v->size();
  const auto [ptr, ec] = std::from_chars(first, last, out);
  if (ec != std::errc{} || ptr != last) {
    throw Error(name + "='" + *v + "' is not an integer; set it to a whole number");
  }
  if (out < lo || out > hi) {
    throw Error(name + "=" + *v + " is out of range [" + std::to_string(lo) + ", " + std::to_string(hi) +
                "]");
  }
  return out;
}

std::string errno_text(int err) {
  return std::strerror(err);
}

}  // namespace

DistEnv parse_dist_env(const EnvLookup& env) {
  DistEnv d;
  constexpr int kMax = 1 << 24;
  d.world_size = parse_int_var(env, "WORLD_SIZE", 1, 1, kMax);
  d.rank = parse_int_var(env, "RANK", 0, 0, kMax);
  if (d.rank >= d.world_size) {
    throw Error("RANK=" + std::to_string(d.rank) +
                " must be below WORLD_SIZE=" + std::to_string(d.world_size));
  }
  d.local_rank = parse_int_var(env, "LOCAL_RANK", 0, 0, kMax);
  d.master_addr = env("MASTER_ADDR").value_or("");
  d.master_port = parse_int_var(env, "MASTER_PORT", 0, 0, 65535);
  d.agent_store = env("TORCHELASTIC_USE_AGENT_STORE") == "True";  // torch's exact test
  if (d.world_size > 1) {
    if (d.master_addr.empty()) {
      throw Error("MASTER_ADDR is not set but WORLD_SIZE=" + std::to_string(d.world_size) +
                  "; launch with ddprun (or torchrun) or set MASTER_ADDR/MASTER_PORT");
    }
    if (d.master_port == 0) {
      throw Error("MASTER_PORT is not set but WORLD_SIZE=" + std::to_string(d.world_size) +
                  "; launch with ddprun (or torchrun) or set MASTER_PORT");
    }
  }
  // Model-parallel grid: unset means every process is one data-parallel replica.
  d.mp_size = parse_int_var(env, "DDPRUN_MP_SIZE", 1, 1, kMax);
  d.mp_rank = parse_int_var(env, "DDPRUN_MP_RANK", 0, 0, kMax);
  d.dp_size = parse_int_var(env, "DDPRUN_DP_SIZE", d.world_size / d.mp_size, 1, kMax);
  d.dp_rank = parse_int_var(env, "DDPRUN_DP_RANK", d.mp_size == 1 ? d.rank : d.rank / d.mp_size, 0, kMax);
  if (d.mp_size * d.dp_size != d.world_size) {
    throw Error("DDPRUN_MP_SIZE=" + std::to_string(d.mp_size) + " x DDPRUN_DP_SIZE=" +
                std::to_string(d.dp_size) + " must equal WORLD_SIZE=" + std::to_string(d.world_size));
  }
  if (d.mp_rank >= d.mp_size) {
    throw Error("DDPRUN_MP_RANK=" + std::to_string(d.mp_rank) +
                " must be below DDPRUN_MP_SIZE=" + std::to_string(d.mp_size));
  }
  if (d.dp_rank >= d.dp_size) {
    throw Error("DDPRUN_DP_RANK=" + std::to_string(d.dp_rank) +
                " must be below DDPRUN_DP_SIZE=" + std::to_string(d.dp_size));
  }
  // Rank 0 prints, evaluates and writes the files: it must hold the first stage of the first replica.
  if (d.rank == 0 && (d.mp_rank != 0 || d.dp_rank != 0)) {
    throw Error("RANK=0 has DDPRUN_MP_RANK=" + std::to_string(d.mp_rank) + " and DDPRUN_DP_RANK=" +
                std::to_string(d.dp_rank) + "; rank 0 must be model-parallel rank 0 of data-parallel rank 0");
  }
  return d;
}

EnvLookup process_env() {
  return [](const std::string& name) -> std::optional<std::string> {
    if (const char* v = std::getenv(name.c_str())) {
      return std::string(v);
    }
    return std::nullopt;
  };
}

DistEnv parse_dist_env_from_process() {
  return parse_dist_env(process_env());
}

void check_global_batch(std::int64_t global_batch, int dp_size) {
  if (global_batch <= 0) {
    throw Error("--batch-size must be positive, got " + std::to_string(global_batch));
  }
  if (global_batch < dp_size) {
    throw Error("--batch-size " + std::to_string(global_batch) +
                " (global) is smaller than the data-parallel size " + std::to_string(dp_size) +
                "; every rank needs at least one sample per batch");
  }
}

std::string per_rank_batch_text(std::int64_t global_batch, int dp_size) {
  const std::int64_t base = global_batch / dp_size;
  if (global_batch % dp_size == 0) {
    return std::to_string(base);
  }
  return std::to_string(base + 1) + "/" + std::to_string(base);
}

std::vector<std::int64_t> epoch_permutation(std::int64_t n, std::uint64_t seed, std::int64_t epoch,
                                            bool shuffle) {
  if (n <= 0) {
    throw Error("epoch_permutation: no samples (n=" + std::to_string(n) + ")");
  }
  std::vector<std::int64_t> perm(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    perm[static_cast<std::size_t>(i)] = i;
  }
  if (shuffle) {
    // Own Fisher-Yates over mt19937_64: std::shuffle's algorithm is unspecified, and every
    // rank (and every build) must produce the same order.
    std::mt19937_64 rng(seed + static_cast<std::uint64_t>(epoch));
    for (std::size_t i = perm.size() - 1; i > 0; --i) {
      const std::size_t j = static_cast<std::size_t>(rng() % (i + 1));
      std::swap(perm[i], perm[j]);
    }
  }
  return perm;
}

std::int64_t batches_per_epoch(std::int64_t n, std::int64_t global_batch) {
  return (n + global_batch - 1) / global_batch;
}

RankBatch rank_batch(const std::vector<std::int64_t>& perm, std::int64_t global_batch, std::int64_t b,
                     int dp_size, int dp_rank) {
  const auto n = static_cast<std::int64_t>(perm.size());
  if (global_batch <= 0 || dp_size <= 0 || dp_rank < 0 || dp_rank >= dp_size || b < 0 ||
      b * global_batch >= n) {
    throw Error("rank_batch: bad arguments batch=" + std::to_string(b) +
                " global_batch=" + std::to_string(global_batch) + " dp=" + std::to_string(dp_size) +
                " rank=" + std::to_string(dp_rank) + " n=" + std::to_string(n));
  }
  const std::int64_t begin = b * global_batch;
  const std::int64_t end = std::min(n, begin + global_batch);
  RankBatch out;
  out.batch_len = end - begin;
  for (std::int64_t i = begin + dp_rank; i < end; i += dp_size) {
    out.indices.push_back(perm[static_cast<std::size_t>(i)]);
  }
  return out;
}

double rank_loss_weight(std::int64_t rank_len, std::int64_t batch_len, int dp_size) {
  return static_cast<double>(rank_len) * static_cast<double>(dp_size) / static_cast<double>(batch_len);
}

void check_checkpoint_format(std::int64_t format, const std::string& what) {
  if (format < kOldestCheckpointFormat || format > kCheckpointFormat) {
    throw Error(what + " has checkpoint format " + std::to_string(format) +
                "; this ddprun-train reads formats " + std::to_string(kOldestCheckpointFormat) + " to " +
                std::to_string(kCheckpointFormat) +
                " (resume with the trainer that wrote it, or use another --checkpoint-dir)");
  }
}

std::string world_change_line(int old_world, int old_dp, int world, int dp, std::int64_t global_batch,
                              std::int64_t epoch, std::int64_t samples) {
  if (old_world <= 0 || old_dp <= 0 || (old_world == world && old_dp == dp)) {
    return {};
  }
  return "resumed at world size " + std::to_string(world) + " (was " + std::to_string(old_world) + "): dp " +
         std::to_string(dp) + " (was " + std::to_string(old_dp) + "), global batch " +
         std::to_string(global_batch) + " kept, per-rank batch " + per_rank_batch_text(global_batch, dp) +
         " (was " + per_rank_batch_text(global_batch, old_dp) + "), learning rate unchanged; epoch " +
         std::to_string(epoch + 1) + " goes on after its first " + std::to_string(samples) + " samples";
}

void check_checkpoint_stages(int written_stages, int stages, const std::string& what) {
  if (written_stages == stages) {
    return;
  }
  const auto count = [](int p) { return std::to_string(p) + (p == 1 ? " stage" : " stages"); };
  throw Error(
      what + " was written by a pipeline of " + count(written_stages) + " (ddprun --procs-per-replica " +
      std::to_string(written_stages) + "), but this run has " + count(stages) +
      " (DDPRUN_MP_SIZE=" + std::to_string(stages) +
      "); each stage's optimizer state belongs to its own layers, so resume with --procs-per-replica " +
      std::to_string(written_stages) + ", or start afresh in another --checkpoint-dir");
}

int default_layers(const std::string& model) {
  if (model == "toy") {
    return 2;
  }
  if (model == "mlp") {
    return 3;
  }
  if (model == "ae") {
    return 4;
  }
  throw Error("unknown model '" + model + "'");
}

std::vector<std::int64_t> layer_widths(const std::string& model, int layers) {
  const int n = layers == 0 ? default_layers(model) : layers;
  if (n < 1) {
    throw Error("--layers " + std::to_string(layers) + " must be at least 1");
  }
  default_layers(model);  // rejects an unknown model
  const std::int64_t in = model == "toy" ? 32 : 784;
  const std::int64_t out = model == "toy" ? 10 : (model == "ae" ? 784 : 10);
  std::vector<std::int64_t> w{in};
  for (int i = 0; i + 1 < n; ++i) {
    if (model == "mlp") {
      w.push_back(i == 0 ? 256 : 128);
    } else {
      w.push_back(model == "toy" ? 32 : 128);
    }
  }
  w.push_back(out);
  return w;
}

StageLayers stage_layers(int layers, int stages, int stage, const std::string& model) {
  if (stages < 1 || stage < 0 || stage >= stages) {
    throw Error("stage_layers: stage " + std::to_string(stage) + " of " + std::to_string(stages));
  }
  if (stages > layers) {
    throw Error("DDPRUN_MP_SIZE=" + std::to_string(stages) + " (ddprun --procs-per-replica " +
                std::to_string(stages) + ") is more than the " + std::to_string(layers) +
                " layers of --model " + model +
                ": every pipeline stage needs a layer; use --procs-per-replica " + std::to_string(layers) +
                " or fewer, or --layers N with N at least " + std::to_string(stages));
  }
  const int per = layers / stages;
  const int longer = layers % stages;  // the first stages, one layer more each
  const int first = stage * per + std::min(stage, longer);
  return StageLayers{first, first + per + (stage < longer ? 1 : 0)};
}

std::string stage_split_text(int layers, int stages) {
  if (layers % stages == 0) {
    return std::to_string(layers / stages) + " layer" + (layers / stages == 1 ? "" : "s");
  }
  std::string out;
  for (int s = 0; s < stages; ++s) {
    const StageLayers r = stage_layers(layers, stages, s, "");
    out += (s == 0 ? "" : " + ") + std::to_string(r.last - r.first);
  }
  return out + " layers";
}

std::vector<std::int64_t> micro_batch_sizes(std::int64_t len, int m) {
  if (m < 1 || len < 0) {
    throw Error("micro_batch_sizes: " + std::to_string(len) + " samples in " + std::to_string(m) + " parts");
  }
  const std::int64_t parts = std::max<std::int64_t>(1, std::min<std::int64_t>(m, len));
  std::vector<std::int64_t> out(static_cast<std::size_t>(parts), len / parts);
  for (std::int64_t i = 0; i < len % parts; ++i) {
    ++out[static_cast<std::size_t>(i)];
  }
  return out;
}

double bubble_fraction(int stages, int micro_batches) {
  return static_cast<double>(stages - 1) / static_cast<double>(micro_batches + stages - 1);
}

IdxArray parse_idx(const std::vector<std::uint8_t>& bytes, const std::string& what) {
  if (bytes.size() < 4) {
    throw Error(what + ": not an IDX file (only " + std::to_string(bytes.size()) + " bytes)");
  }
  if (bytes[0] != 0 || bytes[1] != 0) {
    throw Error(what + ": not an IDX file (bad magic number)");
  }
  if (bytes[2] != 0x08) {
    throw Error(what + ": IDX element type " + std::to_string(bytes[2]) + " is not unsigned byte (0x08)");
  }
  const std::size_t ndims = bytes[3];
  if (ndims == 0 || ndims > 4) {
    throw Error(what + ": IDX file has " + std::to_string(ndims) + " dimensions, expected 1 to 4");
  }
  const std::size_t header = 4 + 4 * ndims;
  if (bytes.size() < header) {
    throw Error(what + ": truncated IDX header");
  }
  IdxArray out;
  std::uint64_t count = 1;
  for (std::size_t d = 0; d < ndims; ++d) {
    const std::size_t o = 4 + 4 * d;
    const std::uint32_t v = (std::uint32_t{bytes[o]} << 24U) | (std::uint32_t{bytes[o + 1]} << 16U) |
                            (std::uint32_t{bytes[o + 2]} << 8U) | std::uint32_t{bytes[o + 3]};
    if (v == 0) {
      throw Error(what + ": IDX dimension " + std::to_string(d) + " is zero");
    }
    out.dims.push_back(static_cast<std::int64_t>(v));
    count *= v;
    if (count > (std::uint64_t{1} << 34U)) {
      throw Error(what + ": IDX dimensions are implausibly large");
    }
  }
  if (bytes.size() - header != count) {
    throw Error(what + ": IDX payload is " + std::to_string(bytes.size() - header) +
                " bytes but the header says " + std::to_string(count) + " (truncated or corrupt file)");
  }
  out.data.assign(bytes.begin() + static_cast<std::ptrdiff_t>(header), bytes.end());
  return out;
}

IdxArray read_idx_file(const std::string& path) {
  // gzread reads plain files transparently, so one path serves both.
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) {
    throw Error(path + ": cannot open (" + errno_text(errno) + ")");
  }
  std::vector<std::uint8_t> bytes;
  std::vector<std::uint8_t> chunk(1U << 20U);
  for (;;) {
    const int got = gzread(f, chunk.data(), static_cast<unsigned>(chunk.size()));
    if (got < 0) {
      int zerr = 0;
      const std::string msg = gzerror(f, &zerr);
      gzclose(f);
      throw Error(path + ": corrupt gzip data (" + msg + ")");
    }
    if (got == 0) {
      break;
    }
    bytes.insert(bytes.end(), chunk.begin(), chunk.begin() + got);
  }
  int zerr = 0;
  const std::string msg = gzerror(f, &zerr);
  gzclose(f);
  if (zerr != Z_OK && zerr != Z_STREAM_END) {
    throw Error(path + ": corrupt gzip data (" + msg + ")");
  }
  return parse_idx(bytes, path);
}

std::string find_idx_file(const std::string& dir, const std::string& stem) {
  const fs::path base = fs::path(dir) / stem;
  const fs::path gz = fs::path(dir) / (stem + ".gz");
  std::error_code ec;
  if (fs::is_regular_file(gz, ec)) {
    return gz.string();
  }
  if (fs::is_regular_file(base, ec)) {
    return base.string();
  }
  throw Error("missing data file " + gz.string() + " (or " + base.string() +
              "); install dataset-fashion-mnist or point --data-dir at MNIST-format IDX files");
}

void write_file_atomic(const std::string& path, const std::vector<char>& bytes,
                       const std::function<void(const std::string& tmp)>& before_rename) {
  const fs::path target(path);
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  const fs::path tmp = dir / ("." + target.filename().string() + ".tmp." + std::to_string(::getpid()));
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    throw Error("cannot create " + tmp.string() + ": " + errno_text(errno));
  }
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      const int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      throw Error("cannot write " + tmp.string() + ": " + errno_text(err));
    }
    done += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw Error("cannot flush " + tmp.string() + ": " + errno_text(err));
  }
  if (before_rename) {
    before_rename(tmp.string());
  }
  if (::rename(tmp.c_str(), target.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw Error("cannot rename " + tmp.string() + " to " + target.string() + ": " + errno_text(err));
  }
  // Make the rename itself durable.
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

void remove_stale_temps(const std::string& path) {
  const fs::path target(path);
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  const std::string prefix = "." + target.filename().string() + ".tmp.";
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (entry.path().filename().string().rfind(prefix, 0) == 0) {
      fs::remove(entry.path(), ec);
    }
  }
}

std::optional<std::vector<char>> read_file_if_exists(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::error_code ec;
    if (!fs::exists(path, ec)) {
      return std::nullopt;
    }
    throw Error("cannot read " + path + ": " + errno_text(errno));
  }
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) {
    throw Error("cannot read " + path);
  }
  return bytes;
}

Heartbeat::Heartbeat(const EnvLookup& env) : path_(env("DDPRUN_HEARTBEAT_FILE").value_or("")) {}

void Heartbeat::touch() const {
  if (!path_.empty()) (void)::utimensat(AT_FDCWD, path_.c_str(), nullptr, 0);
}

void pause_for_test(const char* env_var, const std::string& what) {
  const char* ms = std::getenv(env_var);
  if (ms == nullptr || *ms == '\0') {
    return;
  }
  std::fprintf(stderr, "ddprun-train: test hook: %s\n", what.c_str());
  std::fflush(stderr);
  std::this_thread::sleep_for(std::chrono::milliseconds(std::strtol(ms, nullptr, 10)));
}

}  // namespace ddprun::train
