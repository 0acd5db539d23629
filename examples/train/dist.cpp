#include "dist.hpp"

#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef DDPRUN_TRAIN_HAVE_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <chrono>
#include <cstdint>
#include <cstdlib>

namespace ddprun::train {
namespace {

using StorePtr = c10::intrusive_ptr<c10d::Store>;

bool is_loopback(const std::string& addr) {
  return addr == "localhost" || addr.rfind("127.", 0) == 0 || addr == "::1";
}

GroupPtr make_gloo(const StorePtr& store, int rank, int size, const std::string& master,
                   std::chrono::milliseconds timeout) {
  auto opts = c10d::ProcessGroupGloo::Options::create(timeout);
  if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname && *ifname) {
    opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
  } else if (is_loopback(master)) {
    opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  } else {
    opts->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
  }
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, opts);
}

// The backend is a compile-time choice: fail before joining anyone when it is not built in.
void check_backend(const Options& o) {
  if (o.backend == "nccl") {
#ifndef DDPRUN_TRAIN_HAVE_NCCL
    throw Error(
        "--backend nccl is unavailable: this ddprun-train was built against a CPU-only libtorch; "
        "use --backend gloo or rebuild against a CUDA libtorch");
#endif
  } else if (o.backend != "gloo") {
    throw Error("unknown --backend '" + o.backend + "' (use gloo or nccl)");
  }
}

// The launcher's store (TORCHELASTIC_USE_AGENT_STORE=True), or rank 0 hosts it; everyone waits until
// all ranks have joined it.
StorePtr make_store(const DistEnv& env, std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions so;
  so.port = static_cast<std::uint16_t>(env.master_port);
  so.isServer = env.rank == 0 && !env.agent_store;
  so.numWorkers = static_cast<std::size_t>(env.world_size);
  so.waitWorkers = true;
  so.timeout = timeout;
  return c10::make_intrusive<c10d::TCPStore>(env.master_addr, so);
}

#ifdef DDPRUN_TRAIN_HAVE_NCCL
void make_nccl_groups(Dist& d, const Options& o, const StorePtr& world_store, const StorePtr& dp_store,
                      const StorePtr& pipe_store, std::chrono::milliseconds timeout) {
  const DistEnv& env = d.env;
  if (!torch::cuda::is_available()) {
    throw Error("--backend nccl needs a CUDA device, but none is visible");
  }
  // NCCL tensors must sit on this rank's GPU: the device the model's head is placed on.
  const auto n = static_cast<int>(torch::cuda::device_count());
  d.comm_dev =
      torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(o.model_parallel ? 0 : env.local_rank % n));
  auto nopts = c10d::ProcessGroupNCCL::Options::create();
  nopts->timeout = timeout;
  d.world = c10::make_intrusive<c10d::ProcessGroupNCCL>(world_store, env.rank, env.world_size, nopts);
  d.dp =
      env.mp_size == 1
          ? d.world
          : GroupPtr(c10::make_intrusive<c10d::ProcessGroupNCCL>(dp_store, env.dp_rank, env.dp_size, nopts));
  if (env.mp_size > 1) {
    d.pipe = c10::make_intrusive<c10d::ProcessGroupNCCL>(pipe_store, env.mp_rank, env.mp_size, nopts);
  }
}
#endif

}  // namespace

void store_set_text(c10d::Store& store, const std::string& key, const std::string& text) {
  store.set(key, std::vector<std::uint8_t>(text.begin(), text.end()));
}

std::string store_get_text(c10d::Store& store, const std::string& key) {
  const std::vector<std::uint8_t> v = store.get(key);
  return {v.begin(), v.end()};
}

Dist init_dist(const DistEnv& env, const Options& o) {
  Dist d;
  d.env = env;
  check_backend(o);
  d.collective = env.world_size > 1 || o.backend == "nccl";
  if (!d.active()) {
    return d;
  }
  const auto timeout = std::chrono::milliseconds(std::int64_t{o.timeout_s} * 1000);
  // One process needs no TCP store (and may run without MASTER_ADDR).
  d.store = env.world_size > 1 ? make_store(env, timeout) : StorePtr(c10::make_intrusive<c10d::HashStore>());
  auto world_store = c10::make_intrusive<c10d::PrefixStore>("ddprun_train/world", d.store);
  auto dp_store =
      c10::make_intrusive<c10d::PrefixStore>("ddprun_train/dp" + std::to_string(env.mp_rank), d.store);
  // Activations and their gradients pass between the stages of one replica (the same DP rank).
  auto pipe_store =
      c10::make_intrusive<c10d::PrefixStore>("ddprun_train/pipe" + std::to_string(env.dp_rank), d.store);
#ifdef DDPRUN_TRAIN_HAVE_NCCL
  if (o.backend == "nccl") {
    make_nccl_groups(d, o, world_store, dp_store, pipe_store, timeout);
    return d;
  }
#endif
  d.world = make_gloo(world_store, env.rank, env.world_size, env.master_addr, timeout);
  // Gradients are averaged only among the replicas' copies of the same stage.
  d.dp = env.mp_size == 1 ? d.world : make_gloo(dp_store, env.dp_rank, env.dp_size, env.master_addr, timeout);
  if (env.mp_size > 1) {
    d.pipe = make_gloo(pipe_store, env.mp_rank, env.mp_size, env.master_addr, timeout);
  }
  return d;
}

void broadcast_params(Dist& d, const std::vector<torch::Tensor>& params) {
  if (!d.active()) {
    return;
  }
  torch::NoGradGuard ng;
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  std::vector<std::vector<at::Tensor>> keep;
  for (const auto& p : params) {
    keep.push_back({p.data()});
  }
  for (auto& t : keep) {
    c10d::BroadcastOptions bo;
    bo.rootRank = 0;
    works.push_back(d.world->broadcast(t, bo));
  }
  for (auto& w : works) {
    w->wait();
  }
}

StopVote::StopVote(Dist& d, int local_signal) : d_(d), local_(local_signal) {
  if (!d_.active()) {
    return;
  }
  t_.push_back(torch::full({1}, static_cast<double>(local_signal), torch::TensorOptions(d_.comm_dev)));
  c10d::AllreduceOptions ao;
  ao.reduceOp = c10d::ReduceOp::MAX;
  work_ = d_.world->allreduce(t_, ao);
}

int StopVote::result() {
  if (!work_) {
    return local_;
  }
  work_->wait();
  return static_cast<int>(t_[0].item<double>());
}

std::vector<double> world_sum(Dist& d, std::vector<double> v) {
  if (!d.active()) {
    return v;
  }
  std::vector<at::Tensor> t{torch::tensor(v, torch::TensorOptions().dtype(torch::kFloat64)).to(d.comm_dev)};
  d.world->allreduce(t)->wait();
  auto c = t[0].cpu();
  for (std::size_t i = 0; i < v.size(); ++i) {
    v[i] = c[static_cast<std::int64_t>(i)].item<double>();
  }
  return v;
}

// A stop vote nobody can lose: returns once every rank has cast it.
void world_barrier(Dist& d) {
  if (d.active()) {
    StopVote(d, 0).result();
  }
}

}  // namespace ddprun::train
