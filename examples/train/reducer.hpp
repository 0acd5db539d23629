// Bucketed gradient averaging that overlaps backward, like DDP's Reducer: a hook on each
// parameter copies its gradient into a flat bucket as soon as autograd produces it; when a
// bucket is full its async all-reduce starts (in bucket order, identical on every rank) while
// backward continues. finish() waits and writes the averages into .grad before the step.
// As in DDP the first bucket is kept small so communication starts early. `extra` values
// ride along in the first bucket (summed, not averaged): the per-step stop vote costs no
// extra collective. With micro-batches each parameter gets one gradient per micro-batch: the
// bucket sums them and starts its all-reduce after the last one, during the last backward.
#pragma once

#include <torch/torch.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "group.hpp"
#include "shm_allreduce.hpp"

namespace ddprun::train {

class GradReducer {
 public:
  GradReducer(const std::vector<torch::Tensor>& params, GroupPtr pg, std::int64_t first_cap_bytes,
              std::int64_t cap_bytes, std::int64_t extra);

  std::vector<std::int64_t> bucket_numels() const;
  bool all_cpu_float() const;
  // From now on buckets are summed through shared memory (same node), in the hook itself.
  void use_shm(std::unique_ptr<ShmAllreduce> shm) { shm_ = std::move(shm); }

  // How many gradients each parameter gets in this step (its micro-batches); call before backward.
  void expect_grads(std::int64_t per_param) { per_param_ = per_param; }

  // Values to sum across the group along with this step's gradients; call before backward.
  void set_extra(const std::vector<double>& v);
  // Their sums, valid after finish().
  const std::vector<double>& extra_sums() const { return extra_sums_; }

  // Waits for every bucket and makes each .grad a view of its averaged bucket.
  void finish();

 private:
  struct Slot {
    std::size_t param;
    std::int64_t offset;
    std::int64_t numel;
    std::int64_t seen = 0;  // gradients received in this step
  };
  struct Bucket {
    std::vector<Slot> slots;
    std::int64_t numel = 0;
    std::int64_t bytes = 0;
    torch::Tensor flat;
    std::size_t pending = 0;
    c10::intrusive_ptr<c10d::Work> work;
  };

  void plan_buckets(std::int64_t first_cap_bytes, std::int64_t cap_bytes);
  void allocate_and_hook();
  void on_grad(std::size_t bi, std::size_t si, const torch::Tensor& g);

  GroupPtr pg_;
  std::vector<torch::Tensor> params_;
  std::vector<Bucket> buckets_;
  std::size_t next_ = 0;
  std::int64_t extra_ = 0;
  std::int64_t per_param_ = 1;
  std::vector<double> extra_sums_;
  std::unique_ptr<ShmAllreduce> shm_;
};

}  // namespace ddprun::train
