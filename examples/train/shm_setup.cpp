#include "shm_setup.hpp"

#include <fmt/core.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <random>
#include <string>

#include "core.hpp"
#include "signals.hpp"

namespace ddprun::train {
namespace {

using Ms = std::chrono::milliseconds;

// Creates (DP rank 0) or opens the segment; a failure is recorded in why, not thrown, so that
// the rank can still report it to the others.
std::unique_ptr<ShmAllreduce> attach(const std::string& name, const DistEnv& env, const GradReducer& reducer,
                                     Ms timeout, std::string& why) {
  try {
    return std::make_unique<ShmAllreduce>(name, env.dp_rank == 0, env.dp_size, env.dp_rank,
                                          reducer.bucket_numels(), timeout);
  } catch (const Error& e) {
    why = e.what();
    return nullptr;
  }
}

// DP rank 0 creates the segment and publishes its name (empty: it could not); the others open it.
std::unique_ptr<ShmAllreduce> create_or_open(Dist& d, const std::string& prefix, const GradReducer& reducer,
                                             Ms timeout, std::string& why) {
  const DistEnv& env = d.env;
  if (env.dp_rank == 0) {
    // Created, sized and initialised before anyone learns its name.
    std::random_device rd;
    const std::string name =
        fmt::format("/ddprun-train-{}-{}-{}-{:08x}", ::getuid(), env.master_port, env.mp_rank, rd());
    remove_on_early_stop(name);  // a stop signal from here until the unlink must not leave it
    auto shm = attach(name, env, reducer, timeout, why);
    store_set_text(*d.store, prefix + "name", shm ? name : std::string());
    return shm;
  }
  const std::string name = store_get_text(*d.store, prefix + "name");
  if (name.empty()) {
    why = "rank 0 could not create the segment";
    return nullptr;
  }
  return attach(name, env, reducer, timeout, why);
}

// Each rank posts "1" or why it could not attach, then reads everyone's; why keeps the first
// failure (its own first).
void agree_attached(Dist& d, const std::string& prefix, bool attached, std::string& why) {
  const DistEnv& env = d.env;
  store_set_text(*d.store, prefix + "ok/" + std::to_string(env.dp_rank), attached ? "1" : why);
  for (int r = 0; r < env.dp_size; ++r) {
    const std::string v = store_get_text(*d.store, prefix + "ok/" + std::to_string(r));
    if (v != "1" && why.empty()) why = fmt::format("rank {}: {}", r, v);
  }
}

// The attached segment, or null with why set (one line) when any rank could not attach.
std::unique_ptr<ShmAllreduce> handshake(Dist& d, const GradReducer& reducer, const Options& o,
                                        std::string& why) {
  const std::string prefix = fmt::format("ddprun_train/shm/{}/", d.env.mp_rank);
  const auto timeout = Ms(std::int64_t{o.timeout_s} * 1000);
  std::unique_ptr<ShmAllreduce> shm;
  try {
    shm = create_or_open(d, prefix, reducer, timeout, why);
    agree_attached(d, prefix, shm != nullptr, why);
  } catch (const std::exception& e) {
    if (why.empty()) why = e.what();
  }
  why = first_line(why);  // c10d errors carry a stack trace
  return why.empty() ? std::move(shm) : nullptr;
}

}  // namespace

void setup_shm_allreduce(Dist& d, GradReducer& reducer, const Options& o) {
  const DistEnv& env = d.env;
  if (o.allreduce == "gloo" || !reducer.all_cpu_float()) {
    if (o.allreduce == "shm") {
      throw Error("--allreduce shm needs float32 CPU gradients");
    }
    return;
  }
  std::string why;
  auto shm = handshake(d, reducer, o, why);
  if (!why.empty()) {
    if (o.allreduce == "shm") {
      throw Error("--allreduce shm: " + why);
    }
    if (env.rank == 0) {
      fmt::print(stderr, "ddprun-train: gradients go through gloo (shared memory unavailable: {})\n", why);
    }
    return;
  }
  // Every rank has attached (all "ok" keys were there): the name is no longer needed, and
  // nothing is left in /dev/shm whatever happens next.
  shm->unlink_name();
  remove_on_early_stop("");
  reducer.use_shm(std::move(shm));
  if (env.dp_rank == 0) {
    fmt::print(stderr, "ddprun-train: gradients: shared-memory all-reduce across {} ranks on this node\n",
               env.dp_size);
  }
}

}  // namespace ddprun::train
