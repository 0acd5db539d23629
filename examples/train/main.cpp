// ddprun-train: a data-parallel libtorch trainer (PyTorch DDP semantics, in C++).
// See docs/trainer.md for usage, checkpoint and preemption semantics.
#include <unistd.h>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef DDPRUN_TRAIN_HAVE_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <fmt/core.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "checkpoint.hpp"
#include "core.hpp"
#include "data.hpp"
#include "dist.hpp"
#include "model.hpp"
#include "options.hpp"
#include "reducer.hpp"
#include "shm_allreduce.hpp"
#include "shm_setup.hpp"
#include "signals.hpp"

namespace ddprun::train {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// ---------------------------------------------------------------- training

struct EvalResult {
  double loss = 0;
  double accuracy = -1;
};

EvalResult evaluate(Net& net, const Data& data, const Options& o, bool classifier) {
  torch::NoGradGuard ng;
  net->eval();
  EvalResult r;
  double loss_sum = 0;
  std::int64_t correct = 0;
  const std::int64_t n = data.test_x.size(0);
  for (std::int64_t i = 0; i < n; i += 1000) {
    const auto len = std::min<std::int64_t>(1000, n - i);
    auto x = data.test_x.narrow(0, i, len);
    auto y = data.test_y.narrow(0, i, len);
    auto out = net->forward(x);
    loss_sum += compute_loss(o.model, out, x, y).item<double>() * static_cast<double>(len);
    if (classifier) {
      correct += out.argmax(1).cpu().eq(y).sum().item<std::int64_t>();
    }
  }
  net->train();
  r.loss = loss_sum / static_cast<double>(n);
  if (classifier) {
    r.accuracy = static_cast<double>(correct) / static_cast<double>(n);
  }
  return r;
}

void dump_params(Net& net, const std::string& path) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& kv : net->named_parameters()) {
    auto t = kv.value().detach().cpu().to(torch::kFloat64).contiguous().view({-1});
    std::vector<double> v(t.data_ptr<double>(), t.data_ptr<double>() + t.numel());
    j[kv.key()] = v;
  }
  std::ofstream out(path);
  out << j.dump() << "\n";
  if (!out) {
    throw Error("cannot write --dump-params file " + path);
  }
}

// CPU time of the whole process (all threads): a load-independent cost measure for bench/.
double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

void append_metrics(const std::string& path, const nlohmann::json& rec) {
  std::ofstream out(path, std::ios::app);
  out << rec.dump() << "\n";
  if (!out) {
    throw Error("cannot append to --metrics-file " + path);
  }
}

int run(Options o) {
  install_stop_handlers();
  const DistEnv env = parse_dist_env_from_process();
  if (o.data.empty()) {
    o.data = o.model == "toy" ? "toy" : "fashion-mnist";
  }
  if (o.optimizer.empty()) {
    o.optimizer = o.model == "toy" ? "sgd" : "adam";
  }
  if ((o.model == "toy") != (o.data == "toy")) {
    throw Error("--model " + o.model + " does not fit --data " + o.data +
                " (toy model uses toy data; mlp and ae use fashion-mnist)");
  }
  if (o.resume && o.checkpoint_dir.empty()) {
    throw Error("--resume needs --checkpoint-dir");
  }
  if (o.bucket_cap_kb <= 0 || o.first_bucket_kb <= 0) {
    throw Error("--bucket-cap-kb and --first-bucket-kb must be positive");
  }
  const std::int64_t local_batch = per_rank_batch(o.batch_size, env.dp_size);
  int threads = o.threads;
  if (threads <= 0) {
    if (const char* omp = std::getenv("OMP_NUM_THREADS"); omp && *omp) {
      threads = std::atoi(omp);
    }
  }
  if (threads > 0) {
    torch::set_num_threads(threads);
  }
  const bool lead = env.rank == 0;
  auto log = [&](const std::string& msg) {
    if (lead) {
      fmt::print("{}\n", msg);
      std::fflush(stdout);
    }
  };

  // Data before the process group: a bad --data-dir fails fast on every rank.
  const bool classifier = o.model == "mlp";
  Data data = o.data == "toy" ? make_toy_data(o.seed, o.toy_samples) : load_fashion_mnist(o.data_dir);

  Dist dist = init_dist(env, o);

  torch::manual_seed(o.seed);
  Net net(o.model);
  torch::Device head_dev = torch::kCPU, tail_dev = torch::kCPU;
  if (torch::cuda::is_available()) {
    const auto n = static_cast<int>(torch::cuda::device_count());
    if (o.model_parallel) {
      head_dev = torch::Device(torch::kCUDA, 0);
      tail_dev = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(std::min(1, n - 1)));
    } else {
      head_dev = tail_dev = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(env.local_rank % n));
    }
  } else if (o.model_parallel) {
    log("model-parallel: no CUDA devices, head and tail both stay on the CPU");
  }
  net->place(head_dev, tail_dev);
  auto opt = make_optimizer(net, o);

  Position pos;
  if (!o.checkpoint_dir.empty()) {
    if (auto bytes = fetch_checkpoint(dist, o)) {
      pos = load_checkpoint(*bytes, net, *opt, o, checkpoint_path(o));
      log(fmt::format("resumed from {} at epoch {} batch {} (step {})", checkpoint_path(o), pos.epoch + 1,
                      pos.batch, pos.step));
    } else if (o.resume) {
      log("no checkpoint in " + o.checkpoint_dir + ", starting from scratch");
    }
  }
  broadcast_params(dist, net->parameters());

  std::unique_ptr<GradReducer> reducer;
  if (dist.active() && env.dp_size > 1) {
    reducer = std::make_unique<GradReducer>(net->parameters(), dist.dp, o.first_bucket_kb * 1024,
                                            o.bucket_cap_kb * 1024, env.mp_size == 1 ? 2 : 0);
    setup_shm_allreduce(dist, *reducer, o);
  }
  // The stop vote must span the world; the gradient all-reduce does only when DP == world.
  const bool vote_in_grads = reducer && env.mp_size == 1;
  log(
      fmt::format("ddprun-train: model {} data {} world {} (dp {} x mp {}) global batch {} "
                  "per-rank batch {} optimizer {} threads {}",
                  o.model, o.data, env.world_size, env.dp_size, env.mp_size, o.batch_size, local_batch,
                  o.optimizer, torch::get_num_threads()));

  const std::int64_t n_train = data.train_x.size(0);
  int stop_signal = 0;
  bool hit_max_steps = false;
  net->train();
  for (std::int64_t epoch = pos.epoch; epoch < o.epochs; ++epoch) {
    const auto shard = shard_indices(n_train, env.dp_size, env.dp_rank, o.seed, epoch, true);
    const auto shard_len = static_cast<std::int64_t>(shard.size());
    auto idx = torch::tensor(std::vector<std::int64_t>(shard.begin(), shard.end()), torch::kInt64);
    const std::int64_t nb = batches_per_epoch(shard_len, local_batch);
    double loss_sum = 0;
    double samples = 0;
    const auto t0 = Clock::now();
    const double cpu0 = process_cpu_seconds();
    for (std::int64_t b = pos.batch; b < nb; ++b) {
      const auto begin = b * local_batch;
      const auto len = std::min(local_batch, shard_len - begin);
      std::optional<StopVote> vote;
      if (vote_in_grads) {
        reducer->set_extra(stop_flags(stop_signal_received()));
      } else {
        vote.emplace(dist, stop_signal_received());
      }
      auto bidx = idx.narrow(0, begin, len);
      auto x = data.train_x.index_select(0, bidx);
      auto y = data.train_y.index_select(0, bidx);
      clear_grads(net);
      auto out = net->forward(x);
      auto loss = compute_loss(o.model, out, x, y);
      loss.backward();
      if (reducer) {
        reducer->finish();
      }
      opt->step();
      loss_sum += loss.item<double>() * static_cast<double>(len);
      samples += static_cast<double>(len);
      pos = Position{epoch, b + 1, pos.step + 1};
      stop_signal = vote ? vote->result() : stop_from_flags(reducer->extra_sums());
      hit_max_steps = o.max_steps > 0 && pos.step >= o.max_steps;
      if (o.checkpoint_every > 0 && pos.step % o.checkpoint_every == 0 && stop_signal == 0 &&
          !hit_max_steps) {
        save_checkpoint(env, o, net, *opt, pos);
      }
      if (stop_signal != 0 || hit_max_steps) {
        break;
      }
    }
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    const double cpu_secs = process_cpu_seconds() - cpu0;
    if (stop_signal != 0 || hit_max_steps) {
      break;
    }
    const auto tot = dp_sum(dist, {loss_sum, samples, cpu_secs});
    pos = Position{epoch + 1, 0, pos.step};
    const double train_loss = tot[1] > 0 ? tot[0] / tot[1] : 0.0;
    // Every MP slice trains an identical replica, so global samples/s counts one slice.
    const double sps = secs > 0 ? tot[1] / secs : 0.0;
    if (lead) {
      const auto ev = evaluate(net, data, o, classifier);
      nlohmann::json rec = {{"epoch", epoch + 1},    {"step", pos.step},       {"loss", train_loss},
                            {"test_loss", ev.loss},  {"samples_per_sec", sps}, {"world_size", env.world_size},
                            {"epoch_seconds", secs}, {"cpu_seconds", tot[2]}};
      std::string acc;
      if (classifier) {
        rec["test_accuracy"] = ev.accuracy;
        acc = fmt::format(" test_accuracy {:.4f}", ev.accuracy);
      }
      log(fmt::format("epoch {}/{}: loss {:.4f} test_loss {:.4f}{} samples/s {:.0f}", epoch + 1, o.epochs,
                      train_loss, ev.loss, acc, sps));
      if (!o.metrics_file.empty()) {
        append_metrics(o.metrics_file, rec);
      }
    }
    save_checkpoint(env, o, net, *opt, pos);
    if (o.max_steps > 0 && pos.step >= o.max_steps) {
      hit_max_steps = true;
      break;
    }
  }

  if (stop_signal != 0 || hit_max_steps) {
    save_checkpoint(env, o, net, *opt, pos);
  }
  if (lead && !o.dump_params.empty()) {
    dump_params(net, o.dump_params);
  }
  // Nobody leaves before rank 0's checkpoint is durable.
  world_barrier(dist);
  if (stop_signal != 0) {
    log(fmt::format(
        "stopped by signal {} after step {} (epoch {} batch {}); checkpoint {}", stop_signal, pos.step,
        pos.epoch + 1, pos.batch,
        o.checkpoint_dir.empty() ? std::string("not written (no --checkpoint-dir)") : checkpoint_path(o)));
    return preempt_exit_code(stop_signal);
  }
  if (hit_max_steps) {
    log(fmt::format("stopped at --max-steps {}", o.max_steps));
  }
  return kExitOk;
}

}  // namespace
}  // namespace ddprun::train

int main(int argc, char** argv) {
  using namespace ddprun::train;
  Options o;
  CLI::App app{"ddprun-train: data-parallel libtorch trainer (see docs/trainer.md)"};
  // A repeated option takes its last value, so wrappers can append overrides.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--model", o.model, "toy | mlp | ae")
      ->check(CLI::IsMember({"toy", "mlp", "ae"}))
      ->capture_default_str();
  app.add_option("--data", o.data, "toy | fashion-mnist (default: follows --model)")
      ->check(CLI::IsMember({"toy", "fashion-mnist"}));
  app.add_option("--data-dir", o.data_dir, "directory with MNIST-format IDX files (.gz or plain)")
      ->capture_default_str();
  app.add_option("--epochs", o.epochs, "number of epochs")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--batch-size", o.batch_size, "global batch size (split across DP ranks)")
      ->capture_default_str();
  app.add_option("--lr", o.lr, "learning rate (default: 1e-3 for adam, 0.05 for sgd)");
  app.add_option("--optimizer", o.optimizer, "sgd | adam (default: adam, sgd for toy)")
      ->check(CLI::IsMember({"sgd", "adam"}));
  app.add_option("--momentum", o.momentum, "SGD momentum")->capture_default_str();
  app.add_option("--seed", o.seed, "seed for init, shuffling and toy data")->capture_default_str();
  app.add_option("--threads", o.threads, "intra-op threads (default: OMP_NUM_THREADS, else all)");
  app.add_option("--backend", o.backend, "gloo | nccl")->capture_default_str();
  app.add_option("--allreduce", o.allreduce,
                 "gradient all-reduce: auto (shared memory when the data-parallel group shares a "
                 "node, else the backend) | shm | gloo")
      ->check(CLI::IsMember({"auto", "shm", "gloo"}))
      ->capture_default_str();
  app.add_option("--checkpoint-dir", o.checkpoint_dir, "where rank 0 writes latest.pt");
  app.add_flag("--resume", o.resume, "continue from the checkpoint in --checkpoint-dir if any");
  app.add_option("--checkpoint-every", o.checkpoint_every, "also checkpoint every N steps (0: off)")
      ->capture_default_str();
  app.add_option("--metrics-file", o.metrics_file, "JSON lines, one per epoch (rank 0)");
  app.add_option("--max-steps", o.max_steps, "stop after N optimizer steps in total (0: off)")
      ->capture_default_str();
  app.add_option("--dump-params", o.dump_params, "rank 0 writes final parameters as JSON");
  app.add_flag("--model-parallel", o.model_parallel, "head and tail on the process's two devices");
  app.add_option("--bucket-cap-kb", o.bucket_cap_kb, "gradient bucket size")->capture_default_str();
  app.add_option("--first-bucket-kb", o.first_bucket_kb, "size of the first gradient bucket")
      ->capture_default_str();
  app.add_option("--timeout", o.timeout_s, "seconds a collective may wait for peers")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--toy-samples", o.toy_samples, "size of the synthetic toy training set")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // CLI11 writes help and usage errors to streams; pass them on through fmt.
    std::ostringstream out;
    std::ostringstream err;
    const int rc = app.exit(e, out, err);
    fmt::print("{}", out.str());
    fmt::print(stderr, "{}", err.str());
    return rc == 0 ? 0 : kExitUsage;
  }
  const char* rank = std::getenv("RANK");
  const std::string who = rank ? std::string("ddprun-train[rank ") + rank + "]" : "ddprun-train";
  try {
    const int rc = run(o);
    std::fflush(stdout);
    return rc;
  } catch (const ddprun::train::Error& e) {
    fmt::print(stderr, "{}: error: {}\n", who, e.what());
  } catch (const c10::Error& e) {
    fmt::print(stderr, "{}: error: {}\n", who, first_line(e.what_without_backtrace()));
  } catch (const std::exception& e) {
    fmt::print(stderr, "{}: error: {}\n", who, first_line(e.what()));
  }
  return kExitError;
}
