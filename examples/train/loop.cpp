#include "loop.hpp"

#include <fmt/core.h>
#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint.hpp"
#include "core.hpp"
#include "data.hpp"
#include "dist.hpp"
#include "model.hpp"
#include "pipeline.hpp"
#include "reducer.hpp"
#include "report.hpp"
#include "shm_setup.hpp"
#include "signals.hpp"

namespace ddprun::train {
namespace {

using Clock = std::chrono::steady_clock;

// Everything one run holds. Members are declared in set-up order, so they are destroyed in
// reverse: the reducer (hooks, shared memory) before the model and the process groups.
struct Trainer {
  Options o;
  DistEnv env;
  bool lead = false;  // rank 0: prints, evaluates, writes files
  bool classifier = false;
  Data data;
  Dist dist;
  Net net{nullptr};
  std::unique_ptr<Pipe> pipe;         // this rank's stage of the model (all of it with MP 1)
  std::vector<torch::Tensor> params;  // the stage's parameters: trained, reduced, optimized here
  std::unique_ptr<torch::optim::Optimizer> opt;
  Position pos;
  std::unique_ptr<GradReducer> reducer;
  bool vote_in_grads = false;  // the stop vote rides in the first gradient bucket
  int stop_signal = 0;
  bool hit_max_steps = false;
  Heartbeat heartbeat{process_env()};  // touched every step (ddprun --hang-timeout)

  bool stopping() const { return stop_signal != 0 || hit_max_steps; }

  // Rank 0 only; flushed at once so that logs and tests see the line while training goes on.
  void log(const std::string& msg) const {
    if (lead) {
      fmt::print("{}\n", msg);
      std::fflush(stdout);
    }
  }
};

// One epoch's sums on this rank (loss and samples: on the last pipeline stage only).
struct Tally {
  double loss_sum = 0;
  double samples = 0;
};

// CPU time of the whole process (all threads): a load-independent cost measure for bench/.
double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// Fills in the defaults that follow the model, and rejects combinations the CLI cannot.
void resolve_options(Options& o) {
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
  if (o.micro_batches < 1) {
    throw Error("--micro-batches must be at least 1");
  }
}

// --threads, else OMP_NUM_THREADS, else torch's default.
void set_threads(const Options& o) {
  int threads = o.threads;
  if (threads <= 0) {
    if (const char* omp = std::getenv("OMP_NUM_THREADS"); omp && *omp) {
      threads = std::atoi(omp);
    }
  }
  if (threads > 0) {
    torch::set_num_threads(threads);
  }
}

// Plain DP: this rank's GPU (or the CPU). Model parallel: the process's first two GPUs.
void place_model(Trainer& t) {
  torch::Device head_dev = torch::kCPU, tail_dev = torch::kCPU;
  if (torch::cuda::is_available()) {
    const auto n = static_cast<int>(torch::cuda::device_count());
    if (t.o.model_parallel) {
      head_dev = torch::Device(torch::kCUDA, 0);
      tail_dev = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(std::min(1, n - 1)));
    } else {
      head_dev = tail_dev = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(t.env.local_rank % n));
    }
    // Where the model runs is what a GPU run is checked for (scripts/gpu-check.sh).
    t.log(fmt::format("ddprun-train: backend {}, head on {}, tail on {}", t.o.backend, head_dev.str(),
                      tail_dev.str()));
  } else if (t.o.model_parallel) {
    t.log("model-parallel: no CUDA devices, head and tail both stay on the CPU");
  }
  t.net->place(head_dev, tail_dev);
}

void restore_checkpoint(Trainer& t) {
  if (t.o.checkpoint_dir.empty()) {
    return;
  }
  if (auto bytes = fetch_checkpoint(t.dist, t.o)) {
    const auto r = load_checkpoint(*bytes, t.net, *t.opt, *t.pipe, t.o, checkpoint_path(t.o));
    t.pos = r.pos;
    t.log(fmt::format("resumed from {} at epoch {} batch {} (step {})", checkpoint_path(t.o), t.pos.epoch + 1,
                      t.pos.batch, t.pos.step));
    // An elastic restart may come back with fewer (or more) ranks: say what that changes.
    if (const auto line = world_change_line(r.world_size, r.dp_size, t.env.world_size, t.env.dp_size,
                                            t.o.batch_size, t.pos.epoch, r.samples);
        !line.empty()) {
      t.log(line);
    }
  } else if (t.o.resume) {
    t.log("no checkpoint in " + t.o.checkpoint_dir + ", starting from scratch");
  }
}

void make_reducer(Trainer& t) {
  if (t.dist.active() && t.env.dp_size > 1) {
    t.reducer = std::make_unique<GradReducer>(t.params, t.dist.dp, t.o.first_bucket_kb * 1024,
                                              t.o.bucket_cap_kb * 1024, t.env.mp_size == 1 ? 2 : 0);
    setup_shm_allreduce(t.dist, *t.reducer, t.o);
  }
  // The stop vote must span the world; the gradient all-reduce does only when DP == world.
  t.vote_in_grads = t.reducer && t.env.mp_size == 1;
}

void set_up(Trainer& t, Options o) {
  t.env = parse_dist_env_from_process();
  resolve_options(o);
  t.o = std::move(o);
  check_global_batch(t.o.batch_size, t.env.dp_size);
  set_threads(t.o);
  t.lead = t.env.rank == 0;
  // Data before the process group: a bad --data-dir fails fast on every rank.
  t.classifier = t.o.model == "mlp";
  t.data = t.o.data == "toy" ? make_toy_data(t.o.seed, t.o.toy_samples) : load_fashion_mnist(t.o.data_dir);
  // A pipeline split that does not fit the model fails here too, before anyone joins.
  const int layers = static_cast<int>(layer_widths(t.o.model, t.o.layers).size()) - 1;
  stage_layers(layers, t.env.mp_size, t.env.mp_rank, t.o.model);
  t.dist = init_dist(t.env, t.o);
  torch::manual_seed(t.o.seed);
  t.net = Net(t.o.model, t.o.layers);
  place_model(t);
  t.pipe = std::make_unique<Pipe>(t.dist, t.net, t.o.model);
  t.params = t.net->layer_parameters(t.pipe->first_layer(), t.pipe->last_layer());
  t.opt = make_optimizer(t.params, t.o);
  restore_checkpoint(t);
  broadcast_params(t.dist, t.net->parameters());
  make_reducer(t);
  t.log(fmt::format(
      "ddprun-train: model {} ({} layers) data {} world {} (dp {} x mp {}) global batch {} "
      "per-rank batch {} optimizer {} threads {}",
      t.o.model, layers, t.o.data, t.env.world_size, t.env.dp_size, t.env.mp_size, t.o.batch_size,
      per_rank_batch_text(t.o.batch_size, t.env.dp_size), t.o.optimizer, torch::get_num_threads()));
  if (t.env.mp_size > 1) {
    t.log(
        fmt::format("pipeline: {} stages of {}, {} micro-batches per step and replica (GPipe; ideal "
                    "bubble {:.0f}% of a step)",
                    t.env.mp_size, stage_split_text(layers, t.env.mp_size), t.o.micro_batches,
                    100 * bubble_fraction(t.env.mp_size, t.o.micro_batches)));
  }
  pause_for_test("DDPRUN_TRAIN_TEST_PAUSE_AFTER_SETUP_MS", "set up, pausing before the first step");
}

// One optimizer step on this rank's share rb of global batch b, then the stop vote's outcome and
// any --checkpoint-every save.
void train_step(Trainer& t, const RankBatch& rb, std::int64_t epoch, std::int64_t b, Tally& tally) {
  std::optional<StopVote> vote;
  if (t.vote_in_grads) {
    t.reducer->set_extra(stop_flags(stop_signal_received()));
  } else {
    vote.emplace(t.dist, stop_signal_received());
  }
  const auto bidx = torch::tensor(rb.indices, torch::kInt64);
  auto x = t.data.train_x.index_select(0, bidx);
  auto y = t.data.train_y.index_select(0, bidx);
  clear_grads(t.params);
  // The loss is weighted so that the DP average of the gradients is the mean over the whole global
  // batch even when the ranks' shares differ. A rank with no sample of a short last batch still
  // runs backward (zero gradients), so every rank joins the all-reduce.
  const auto len = static_cast<std::int64_t>(rb.indices.size());
  const auto micro = micro_batch_sizes(len, t.o.micro_batches);
  if (t.reducer) {
    t.reducer->expect_grads(static_cast<std::int64_t>(micro.size()));
  }
  const double weight = len == 0 ? 0.0 : rank_loss_weight(len, rb.batch_len, t.env.dp_size);
  const double loss = pipeline_step(*t.pipe, t.net, t.o.model, x, y, micro, weight);
  if (t.reducer) {
    t.reducer->finish();
  }
  t.opt->step();
  t.heartbeat.touch();
  if (t.pipe->is_last()) {
    // The weighted loss times batch_len / dp is this rank's sum of sample losses.
    tally.loss_sum += loss * static_cast<double>(rb.batch_len) / t.env.dp_size;
    tally.samples += static_cast<double>(len);
  }
  t.pos = Position{epoch, b + 1, t.pos.step + 1};
  t.stop_signal = vote ? vote->result() : stop_from_flags(t.reducer->extra_sums());
  t.hit_max_steps = t.o.max_steps > 0 && t.pos.step >= t.o.max_steps;
  if (t.o.checkpoint_every > 0 && t.pos.step % t.o.checkpoint_every == 0 && !t.stopping()) {
    save_checkpoint(t.env, t.o, t.net, *t.opt, *t.pipe, t.pos);
  }
}

// Rank 0: prints the epoch line and appends the metrics record. `tot` holds the job's sums of
// loss and samples (counted by the last stages), CPU seconds and pipeline wait seconds.
void report_epoch(Trainer& t, std::int64_t epoch, const std::vector<double>& tot, double secs,
                  const EvalResult& ev) {
  const double train_loss = tot[1] > 0 ? tot[0] / tot[1] : 0.0;
  const double sps = secs > 0 ? tot[1] / secs : 0.0;
  nlohmann::json rec = {{"epoch", epoch + 1},    {"step", t.pos.step},     {"loss", train_loss},
                        {"test_loss", ev.loss},  {"samples_per_sec", sps}, {"world_size", t.env.world_size},
                        {"epoch_seconds", secs}, {"cpu_seconds", tot[2]}};
  if (t.env.mp_size > 1) {
    // The share of the ranks' training time spent waiting for a neighbouring stage: the bubble, measured.
    rec["stages"] = t.env.mp_size;
    rec["micro_batches"] = t.o.micro_batches;
    rec["pipeline_wait_fraction"] = secs > 0 ? tot[3] / (secs * t.env.world_size) : 0.0;
  }
  std::string acc;
  if (t.classifier) {
    rec["test_accuracy"] = ev.accuracy;
    acc = fmt::format(" test_accuracy {:.4f}", ev.accuracy);
  }
  t.log(fmt::format("epoch {}/{}: loss {:.4f} test_loss {:.4f}{} samples/s {:.0f}", epoch + 1, t.o.epochs,
                    train_loss, ev.loss, acc, sps));
  if (!t.o.metrics_file.empty()) {
    append_metrics(t.o.metrics_file, rec);
  }
}

// Runs epoch `epoch` from t.pos.batch on. Returns false when training ends inside it (stop
// vote or --max-steps); a completed epoch is reported and checkpointed.
bool run_epoch(Trainer& t, std::int64_t epoch) {
  const std::int64_t n = t.data.train_x.size(0);
  const auto perm = epoch_permutation(n, t.o.seed, epoch, true);
  const std::int64_t nb = batches_per_epoch(n, t.o.batch_size);
  Tally tally;
  const auto t0 = Clock::now();
  const double cpu0 = process_cpu_seconds();
  const double wait0 = t.pipe->wait_seconds();
  for (std::int64_t b = t.pos.batch; b < nb && !t.stopping(); ++b) {
    train_step(t, rank_batch(perm, t.o.batch_size, b, t.env.dp_size, t.env.dp_rank), epoch, b, tally);
  }
  if (t.stopping()) {
    return false;
  }
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  const double cpu_secs = process_cpu_seconds() - cpu0;
  const double wait_secs = t.pipe->wait_seconds() - wait0;
  const auto tot = world_sum(t.dist, {tally.loss_sum, tally.samples, cpu_secs, wait_secs});
  t.pos = Position{epoch + 1, 0, t.pos.step};
  // One replica evaluates: rank 0 alone, or every stage of rank 0's pipeline.
  if (t.env.mp_size > 1 ? t.env.dp_rank == 0 : t.lead) {
    const auto ev = evaluate(*t.pipe, t.net, t.data, t.o, t.classifier);
    if (t.lead) {
      report_epoch(t, epoch, tot, secs, ev);
    }
  }
  save_checkpoint(t.env, t.o, t.net, *t.opt, *t.pipe, t.pos);
  t.hit_max_steps = t.o.max_steps > 0 && t.pos.step >= t.o.max_steps;
  return !t.hit_max_steps;
}

// Final checkpoint and parameters, then everyone waits for them; returns the exit code.
int finish(Trainer& t) {
  if (t.stopping()) {
    save_checkpoint(t.env, t.o, t.net, *t.opt, *t.pipe, t.pos);
  }
  if (!t.o.dump_params.empty() && t.env.dp_rank == 0) {
    gather_layers(*t.pipe, t.net);  // rank 0 dumps the whole model
    if (t.lead) {
      dump_params(t.net, t.o.dump_params);
    }
  }
  // Nobody leaves before rank 0's checkpoint is durable.
  world_barrier(t.dist);
  if (t.stop_signal != 0) {
    t.log(fmt::format("stopped by signal {} after step {} (epoch {} batch {}); checkpoint {}", t.stop_signal,
                      t.pos.step, t.pos.epoch + 1, t.pos.batch,
                      t.o.checkpoint_dir.empty() ? std::string("not written (no --checkpoint-dir)")
                                                 : checkpoint_path(t.o)));
    return preempt_exit_code(t.stop_signal);
  }
  if (t.hit_max_steps) {
    t.log(fmt::format("stopped at --max-steps {}", t.o.max_steps));
  }
  return kExitOk;
}

// Every epoch from the checkpoint's on, until one ends training.
void train_epochs(Trainer& t) {
  t.net->train();
  for (std::int64_t epoch = t.pos.epoch; epoch < t.o.epochs; ++epoch) {
    if (!run_epoch(t, epoch)) {
      break;
    }
  }
}

// The first step failed while a stop signal came: a rank that was still setting up has left
// at once on it (signals.hpp), and this one saw it go. Nothing was trained, so it stops too.
int report_stop_before_first_step(int signo, const std::exception& e) {
  const int rc = preempt_exit_code(signo);
  fmt::print(stderr,
             "ddprun-train: stopped by signal {} before the first step (a rank that was still setting up "
             "left: {}); exit {}, checkpoint unchanged\n",
             signo, first_line(e.what()), rc);
  std::fflush(stderr);
  return rc;
}

}  // namespace

int run(Options o) {
  install_stop_handlers();  // until the first step a stop signal ends the process at once
  Trainer t;
  set_up(t, std::move(o));
  defer_stop_signals();  // from here on the ranks vote, stop after the same step and checkpoint
  // Test hook (0 ms: a notice): a test signals a rank only once it is past its set-up.
  pause_for_test("DDPRUN_TRAIN_TEST_PAUSE_AFTER_DEFER_MS", "stop signals deferred, the first step is next");
  const std::int64_t first_step = t.pos.step;
  try {
    train_epochs(t);
  } catch (const std::exception& e) {
    // Failing in the first step, wait a little for a stop signal: the ranks of a job get
    // theirs at slightly different times. Without one it is an error.
    const int signo = t.pos.step == first_step ? await_stop_signal(std::chrono::seconds(2)) : 0;
    if (signo == 0) {
      throw;
    }
    return report_stop_before_first_step(signo, e);
  }
  return finish(t);
}

}  // namespace ddprun::train
