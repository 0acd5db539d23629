// Same-node gradient all-reduce through shared memory, for data-parallel groups whose ranks all
// run on one node (the common CPU case: ddprun --nproc-per-node K). Gloo over loopback TCP copies
// every gradient byte through the kernel several times; here each rank writes its bucket once,
// reduces its 1/W share of it from every rank's copy, and reads the result back.
//
// Torch-free: it works on float arrays, so it builds under the strict warnings and is unit-tested
// with real processes. Synchronisation is a sense-reversing barrier on a futex in the segment;
// a waiting rank checks that its peers are still alive, so a dead rank is an error, not a hang.
#pragma once

#include <sys/types.h>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ddprun::train {

// [begin, end) of the part of an n-element bucket that `rank` of `world` reduces; the parts
// cover the bucket exactly, in rank order, sizes differing by at most one.
std::pair<std::int64_t, std::int64_t> shm_share(std::int64_t n, int world, int rank);

class ShmAllreduce {
 public:
  // Bytes of shared memory a group of `world` needs for buckets of these sizes (floats).
  static std::size_t segment_bytes(int world, const std::vector<std::int64_t>& bucket_numels);

  // Rank 0 creates the segment (unique name from `nonce`); the others attach to it. Throws Error
  // when the segment cannot be created, sized or opened (e.g. /dev/shm full, other IPC namespace).
  ShmAllreduce(const std::string& name, bool create, int world, int rank,
               const std::vector<std::int64_t>& bucket_numels, std::chrono::milliseconds timeout);
  ~ShmAllreduce();
  ShmAllreduce(const ShmAllreduce&) = delete;
  ShmAllreduce& operator=(const ShmAllreduce&) = delete;

  // Removes the name (the mapping stays); call once every rank has attached.
  void unlink_name();

  // Sums bucket `bucket` (n floats at data) across the group, in place. Every rank calls it for
  // the same buckets in the same order. Throws Error when a peer dies or the timeout passes.
  void allreduce_sum(std::size_t bucket, float* data, std::int64_t n);

  // Waits until every rank arrived (the segment's barrier), same failure rules.
  void barrier();

 private:
  struct Header;
  Header* header() const;
  float* slot(int r, std::size_t bucket) const;
  float* result(std::size_t bucket) const;
  void check_peers() const;

  std::string name_;
  bool owner_ = false;
  int world_ = 1;
  int rank_ = 0;
  std::vector<std::int64_t> numels_;
  std::vector<std::int64_t> offsets_;  // floats from the start of a slot, per bucket
  std::int64_t slot_floats_ = 0;
  std::size_t bytes_ = 0;
  std::size_t data_offset_ = 0;
  void* base_ = nullptr;
  std::chrono::milliseconds timeout_;
};

}  // namespace ddprun::train
