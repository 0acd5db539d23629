#include "reducer.hpp"

#include <algorithm>

#include "core.hpp"

namespace ddprun::train {

GradReducer::GradReducer(const std::vector<torch::Tensor>& params, GroupPtr pg, std::int64_t first_cap_bytes,
                         std::int64_t cap_bytes, std::int64_t extra)
    : pg_(std::move(pg)), params_(params), extra_(extra) {
  plan_buckets(first_cap_bytes, cap_bytes);
  allocate_and_hook();
}

// Reverse registration order approximates the order gradients become ready. A bucket holds
// one device and dtype, and is closed when the next parameter would overflow its cap.
void GradReducer::plan_buckets(std::int64_t first_cap_bytes, std::int64_t cap_bytes) {
  for (std::size_t k = params_.size(); k-- > 0;) {
    const auto& p = params_[k];
    const std::int64_t bytes = p.numel() * static_cast<std::int64_t>(p.element_size());
    const bool fresh = buckets_.empty();
    bool split = fresh;
    if (!fresh) {
      auto& b = buckets_.back();
      const auto& first = params_[b.slots.front().param];
      split = first.device() != p.device() || first.scalar_type() != p.scalar_type() ||
              (b.bytes + bytes > (buckets_.size() == 1 ? first_cap_bytes : cap_bytes));
    }
    if (split) {
      buckets_.emplace_back();
    }
    auto& b = buckets_.back();
    b.slots.push_back(Slot{k, b.numel, p.numel()});
    b.numel += p.numel();
    b.bytes += bytes;
  }
}

void GradReducer::allocate_and_hook() {
  for (std::size_t bi = 0; bi < buckets_.size(); ++bi) {
    auto& b = buckets_[bi];
    const auto& p0 = params_[b.slots.front().param];
    b.flat = torch::zeros({b.numel + (bi == 0 ? extra_ : 0)}, p0.options());
    b.pending = b.slots.size();
    for (std::size_t si = 0; si < b.slots.size(); ++si) {
      params_[b.slots[si].param].register_hook(
          [this, bi, si](const torch::Tensor& g) { on_grad(bi, si, g); });
    }
  }
}

std::vector<std::int64_t> GradReducer::bucket_numels() const {
  std::vector<std::int64_t> v;
  for (const auto& b : buckets_) v.push_back(b.flat.numel());
  return v;
}

bool GradReducer::all_cpu_float() const {
  return std::all_of(buckets_.begin(), buckets_.end(), [](const Bucket& b) {
    return b.flat.device().is_cpu() && b.flat.scalar_type() == torch::kFloat32;
  });
}

void GradReducer::set_extra(const std::vector<double>& v) {
  auto& b = buckets_.front();
  for (std::int64_t i = 0; i < extra_; ++i) {
    b.flat[b.numel + i].fill_(v[static_cast<std::size_t>(i)]);
  }
}

void GradReducer::finish() {
  if (next_ != buckets_.size()) {
    throw Error("a parameter received no gradient in backward; every parameter must be used");
  }
  const double scale = 1.0 / static_cast<double>(pg_->getSize());
  for (auto& b : buckets_) {
    if (b.work) {
      b.work->wait();
      b.work.reset();
    }
    if (&b == &buckets_.front() && extra_ > 0) {
      auto tail = b.flat.narrow(0, b.numel, extra_).to(torch::kCPU, torch::kFloat64);
      extra_sums_.assign(tail.data_ptr<double>(), tail.data_ptr<double>() + extra_);
    }
    b.flat.mul_(scale);
    for (auto& s : b.slots) {
      // .grad becomes a view of the bucket: no copy. Safe because clear_grads() drops it
      // before the next backward, so autograd never accumulates into a bucket in flight.
      auto& p = params_[s.param];
      p.mutable_grad() = b.flat.narrow(0, s.offset, s.numel).view(p.sizes());
      s.seen = 0;
    }
    b.pending = b.slots.size();
  }
  next_ = 0;
}

void GradReducer::on_grad(std::size_t bi, std::size_t si, const torch::Tensor& g) {
  auto& b = buckets_[bi];
  auto& s = b.slots[si];
  if (s.seen == per_param_) {
    throw Error("a parameter received more gradients in one step than it has micro-batches; not supported");
  }
  auto slot = b.flat.narrow(0, s.offset, s.numel);
  if (s.seen++ == 0) {
    slot.copy_(g.reshape({-1}));
  } else {
    slot.add_(g.reshape({-1}));
  }
  if (s.seen == per_param_ && --b.pending == 0) {
    // Launch strictly in bucket order so every rank issues the same collective sequence.
    while (next_ < buckets_.size() && buckets_[next_].pending == 0) {
      auto& flat = buckets_[next_].flat;
      if (shm_) {
        shm_->allreduce_sum(next_, flat.data_ptr<float>(), flat.numel());
      } else {
        std::vector<at::Tensor> t{flat};
        buckets_[next_].work = pg_->allreduce(t);
      }
      ++next_;
    }
  }
}

}  // namespace ddprun::train
