// Unit tests for the torch-free parts of ddprun-train.
#include <catch2/catch.hpp>

#include "support/temp_dir.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <set>

#include "core.hpp"
#include "shm_allreduce.hpp"
#include "signals.hpp"

namespace fs = std::filesystem;
using namespace ddprun::train;

namespace {

EnvLookup env_of(std::map<std::string, std::string> m) {
  return [m](const std::string& k) -> std::optional<std::string> {
    auto it = m.find(k);
    if (it == m.end()) {
      return std::nullopt;
    }
    return it->second;
  };
}

std::vector<std::uint8_t> idx_bytes(std::vector<std::uint32_t> dims, std::size_t payload) {
  std::vector<std::uint8_t> b{0, 0, 0x08, static_cast<std::uint8_t>(dims.size())};
  for (auto d : dims) {
    b.push_back(static_cast<std::uint8_t>(d >> 24U));
    b.push_back(static_cast<std::uint8_t>(d >> 16U));
    b.push_back(static_cast<std::uint8_t>(d >> 8U));
    b.push_back(static_cast<std::uint8_t>(d));
  }
  for (std::size_t i = 0; i < payload; ++i) {
    b.push_back(static_cast<std::uint8_t>(i % 251));
  }
  return b;
}

using ddprun::test::TempDir;

}  // namespace

TEST_CASE("dist env defaults to a single process") {
  const auto d = parse_dist_env(env_of({}));
  CHECK(d.rank == 0);
  CHECK(d.world_size == 1);
  CHECK(d.dp_size == 1);
  CHECK(d.mp_size == 1);
}

TEST_CASE("dist env reads torchrun variables and derives the DP group") {
  const auto d = parse_dist_env(env_of({{"RANK", "3"},
                                        {"WORLD_SIZE", "4"},
                                        {"LOCAL_RANK", "1"},
                                        {"MASTER_ADDR", "node1"},
                                        {"MASTER_PORT", "29500"}}));
  CHECK(d.rank == 3);
  CHECK(d.local_rank == 1);
  CHECK(d.dp_rank == 3);
  CHECK(d.dp_size == 4);
  CHECK(d.master_addr == "node1");
  CHECK(d.master_port == 29500);
  CHECK_FALSE(d.agent_store);  // rank 0 hosts the store
}

TEST_CASE("dist env: TORCHELASTIC_USE_AGENT_STORE=True makes every rank a client of the launcher's store") {
  auto with = [](const std::string& v) {
    return parse_dist_env(env_of({{"RANK", "0"},
                                  {"WORLD_SIZE", "2"},
                                  {"MASTER_ADDR", "h"},
                                  {"MASTER_PORT", "1"},
                                  {"TORCHELASTIC_USE_AGENT_STORE", v}}));
  };
  CHECK(with("True").agent_store);
  CHECK_FALSE(with("False").agent_store);
  CHECK_FALSE(with("true").agent_store);  // torch compares with "True" exactly
}

TEST_CASE("dist env takes the model-parallel grid from DDPRUN_ variables") {
  const auto d = parse_dist_env(env_of({{"RANK", "3"},
                                        {"WORLD_SIZE", "4"},
                                        {"MASTER_ADDR", "h"},
                                        {"MASTER_PORT", "1"},
                                        {"DDPRUN_MP_SIZE", "2"},
                                        {"DDPRUN_MP_RANK", "1"},
                                        {"DDPRUN_DP_SIZE", "2"},
                                        {"DDPRUN_DP_RANK", "1"}}));
  CHECK(d.mp_rank == 1);
  CHECK(d.dp_rank == 1);
  CHECK(d.dp_size == 2);
}

TEST_CASE("dist env rejects inconsistent values with a message naming the variable") {
  CHECK_THROWS_WITH(parse_dist_env(env_of(
                        {{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}})),
                    Catch::Contains("RANK=2"));
  CHECK_THROWS_WITH(parse_dist_env(env_of({{"RANK", "x"}})), Catch::Contains("RANK='x'"));
  CHECK_THROWS_WITH(parse_dist_env(env_of({{"WORLD_SIZE", "2"}, {"MASTER_PORT", "1"}})),
                    Catch::Contains("MASTER_ADDR"));
  CHECK_THROWS_WITH(
      parse_dist_env(
          env_of({{"WORLD_SIZE", "4"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}, {"DDPRUN_MP_SIZE", "3"}})),
      Catch::Contains("DDPRUN_MP_SIZE"));
  // Rank 0 writes the checkpoint a pipeline's first stage gathers: it must be that stage.
  CHECK_THROWS_WITH(parse_dist_env(env_of({{"RANK", "0"},
                                           {"WORLD_SIZE", "2"},
                                           {"MASTER_ADDR", "h"},
                                           {"MASTER_PORT", "1"},
                                           {"DDPRUN_MP_SIZE", "2"},
                                           {"DDPRUN_MP_RANK", "1"},
                                           {"DDPRUN_DP_RANK", "0"}})),
                    Catch::Contains("rank 0 must be model-parallel rank 0"));
}

TEST_CASE("the global batch must give every DP rank a sample but need not divide") {
  CHECK_NOTHROW(check_global_batch(64, 3));
  CHECK_NOTHROW(check_global_batch(3, 3));
  CHECK_THROWS_WITH(check_global_batch(2, 3), Catch::Contains("smaller than the data-parallel size 3"));
  CHECK_THROWS(check_global_batch(0, 1));
  CHECK(per_rank_batch_text(64, 4) == "16");
  CHECK(per_rank_batch_text(64, 3) == "22/21");
}

namespace {
// All ranks' shares of global batch b, concatenated in rank order.
std::vector<std::vector<std::int64_t>> shares(const std::vector<std::int64_t>& perm, std::int64_t g,
                                              std::int64_t b, int dp) {
  std::vector<std::vector<std::int64_t>> out;
  for (int r = 0; r < dp; ++r) {
    out.push_back(rank_batch(perm, g, b, dp, r).indices);
  }
  return out;
}
}  // namespace

TEST_CASE("a global batch is the same samples at every DP size, split without padding") {
  const auto perm = epoch_permutation(100, 5, 0, true);
  const std::int64_t g = 16;
  for (int dp : {1, 2, 3, 4, 5}) {
    CAPTURE(dp);
    for (std::int64_t b = 0; b < batches_per_epoch(100, g); ++b) {
      CAPTURE(b);
      std::multiset<std::int64_t> got;
      std::size_t biggest = 0, smallest = SIZE_MAX;
      for (const auto& s : shares(perm, g, b, dp)) {
        got.insert(s.begin(), s.end());
        biggest = std::max(biggest, s.size());
        smallest = std::min(smallest, s.size());
      }
      const auto begin = perm.begin() + b * g;
      const auto end = perm.begin() + std::min<std::int64_t>(100, (b + 1) * g);
      CHECK(got == std::multiset<std::int64_t>(begin, end));
      CHECK(biggest - smallest <= 1);
      CHECK(rank_batch(perm, g, b, dp, 0).batch_len == end - begin);
    }
  }
}

TEST_CASE("rank r takes every dp-th sample of the batch, the first ranks the remainder") {
  const auto perm = epoch_permutation(10, 0, 0, false);
  CHECK(rank_batch(perm, 4, 0, 2, 1).indices == std::vector<std::int64_t>{1, 3});
  CHECK(rank_batch(perm, 5, 1, 3, 0).indices == std::vector<std::int64_t>{5, 8});
  CHECK(rank_batch(perm, 5, 1, 3, 2).indices == std::vector<std::int64_t>{7});
  // Short last batch of 2 samples over 3 ranks: rank 2 gets none.
  CHECK(rank_batch(perm, 4, 2, 3, 1).indices == std::vector<std::int64_t>{9});
  CHECK(rank_batch(perm, 4, 2, 3, 2).indices.empty());
  CHECK(rank_batch(perm, 4, 2, 3, 2).batch_len == 2);
  CHECK_THROWS(rank_batch(perm, 4, 3, 3, 0));
  CHECK_THROWS(rank_batch(perm, 4, 0, 3, 3));
}

TEST_CASE("loss weights make the DP mean of gradients the mean over the global batch") {
  CHECK(rank_loss_weight(16, 64, 4) == 1.0);
  CHECK(rank_loss_weight(0, 2, 3) == 0.0);
  // Per-sample "gradients" v[i] = i * i: each rank averages its share, weights it, and the
  // all-reduce averages over the ranks. That must be the plain mean over the batch.
  const auto perm = epoch_permutation(70, 1, 0, true);
  for (int dp : {1, 3, 4}) {
    for (std::int64_t b : {0, 1}) {  // batch 1 is the short one (6 of 64)
      CAPTURE(dp, b);
      double all_ranks = 0, whole = 0;
      std::int64_t len = 0;
      for (int r = 0; r < dp; ++r) {
        const auto rb = rank_batch(perm, 64, b, dp, r);
        double sum = 0;
        for (auto i : rb.indices) {
          sum += static_cast<double>(i * i);
        }
        const auto n = static_cast<std::int64_t>(rb.indices.size());
        const double mean = n == 0 ? 0.0 : sum / static_cast<double>(n);
        all_ranks += mean * rank_loss_weight(n, rb.batch_len, dp) / dp;
        whole += sum;
        len = rb.batch_len;
      }
      CHECK(all_ranks == Approx(whole / static_cast<double>(len)));
    }
  }
}

TEST_CASE("the epoch's order depends on seed + epoch only") {
  CHECK(epoch_permutation(50, 3, 1, true) == epoch_permutation(50, 3, 1, true));
  CHECK(epoch_permutation(50, 3, 1, true) != epoch_permutation(50, 3, 2, true));
  CHECK(epoch_permutation(50, 3, 1, true) != epoch_permutation(50, 4, 1, true));
  const auto p = epoch_permutation(50, 3, 1, true);
  CHECK(std::set<std::int64_t>(p.begin(), p.end()).size() == 50);
  CHECK(epoch_permutation(3, 3, 1, false) == std::vector<std::int64_t>{0, 1, 2});
  CHECK_THROWS(epoch_permutation(0, 0, 0, true));
}

TEST_CASE("batches per epoch rounds up") {
  CHECK(batches_per_epoch(100, 32) == 4);
  CHECK(batches_per_epoch(96, 32) == 3);
}

TEST_CASE("checkpoint formats 1 to 3 are read, others refused naming the file") {
  CHECK_NOTHROW(check_checkpoint_format(1, "f"));
  CHECK_NOTHROW(check_checkpoint_format(2, "f"));
  CHECK_NOTHROW(check_checkpoint_format(3, "f"));
  CHECK_THROWS_WITH(
      check_checkpoint_format(4, "ck/latest.pt"),
      Catch::Contains("ck/latest.pt has checkpoint format 4") && Catch::Contains("formats 1 to 3"));
  CHECK_THROWS(check_checkpoint_format(0, "f"));
}

TEST_CASE("a checkpoint resumes only with the pipeline split that wrote it, and says so") {
  CHECK_NOTHROW(check_checkpoint_stages(1, 1, "f"));
  CHECK_NOTHROW(check_checkpoint_stages(4, 4, "f"));
  CHECK_THROWS_WITH(check_checkpoint_stages(2, 1, "ck/latest.pt"),
                    Catch::Contains("ck/latest.pt was written by a pipeline of 2 stages") &&
                        Catch::Contains("this run has 1 stage (DDPRUN_MP_SIZE=1)") &&
                        Catch::Contains("resume with --procs-per-replica 2"));
  CHECK_THROWS_WITH(check_checkpoint_stages(1, 4, "f"),
                    Catch::Contains("pipeline of 1 stage (") && Catch::Contains("this run has 4 stages"));
}

TEST_CASE("the models' layer widths, at the default depths and deeper") {
  using W = std::vector<std::int64_t>;
  CHECK(layer_widths("toy", 0) == W{32, 32, 10});
  CHECK(layer_widths("mlp", 0) == W{784, 256, 128, 10});
  CHECK(layer_widths("ae", 0) == W{784, 128, 128, 128, 784});
  CHECK(layer_widths("toy", 4) == W{32, 32, 32, 32, 10});
  CHECK(layer_widths("mlp", 4) == W{784, 256, 128, 128, 10});
  CHECK(layer_widths("mlp", 2) == W{784, 256, 10});
  CHECK(layer_widths("mlp", 1) == W{784, 10});
  CHECK(layer_widths("ae", 2) == W{784, 128, 784});
  CHECK(default_layers("mlp") == 3);
  CHECK_THROWS_WITH(layer_widths("resnet", 0), Catch::Contains("unknown model 'resnet'"));
  CHECK_THROWS_WITH(layer_widths("mlp", -1), Catch::Contains("--layers -1"));
}

TEST_CASE("pipeline stages split the layers into consecutive ranges as evenly as they go, the first longer") {
  struct Case {
    int layers, stages, stage, first, last;
  };
  for (const auto& c : std::vector<Case>{{3, 1, 0, 0, 3},
                                         {4, 2, 0, 0, 2},
                                         {4, 2, 1, 2, 4},
                                         {8, 4, 3, 6, 8},
                                         {3, 3, 1, 1, 2},
                                         {6, 6, 5, 5, 6},
                                         {3, 2, 0, 0, 2},  // the default MLP in 2 stages: 2 + 1
                                         {3, 2, 1, 2, 3},
                                         {8, 3, 0, 0, 3},  // 3 + 3 + 2
                                         {8, 3, 1, 3, 6},
                                         {8, 3, 2, 6, 8},
                                         {5, 4, 3, 4, 5}}) {
    CAPTURE(c.layers, c.stages, c.stage);
    const auto r = stage_layers(c.layers, c.stages, c.stage, "toy");
    CHECK(r.first == c.first);
    CHECK(r.last == c.last);
  }
  // Every split covers every layer once, in order, no stage empty, no two differing by more than one.
  for (int layers = 1; layers <= 12; ++layers) {
    for (int stages = 1; stages <= layers; ++stages) {
      int next = 0;
      for (int s = 0; s < stages; ++s) {
        const auto r = stage_layers(layers, stages, s, "toy");
        CAPTURE(layers, stages, s);
        CHECK(r.first == next);
        CHECK(r.last - r.first >= layers / stages);
        CHECK(r.last - r.first <= layers / stages + 1);
        next = r.last;
      }
      CHECK(next == layers);
    }
  }
  CHECK_THROWS_WITH(
      stage_layers(4, 8, 0, "toy"),
      "DDPRUN_MP_SIZE=8 (ddprun --procs-per-replica 8) is more than the 4 layers of --model toy: "
      "every pipeline stage needs a layer; use --procs-per-replica 4 or fewer, or --layers N with N "
      "at least 8");
  CHECK_THROWS(stage_layers(4, 2, 2, "toy"));
  CHECK(stage_split_text(4, 2) == "2 layers");
  CHECK(stage_split_text(3, 3) == "1 layer");
  CHECK(stage_split_text(3, 2) == "2 + 1 layers");
  CHECK(stage_split_text(8, 3) == "3 + 3 + 2 layers");
}

TEST_CASE("micro-batches split a rank's share in order, the first ones larger, never more than its samples") {
  using V = std::vector<std::int64_t>;
  CHECK(micro_batch_sizes(32, 1) == V{32});
  CHECK(micro_batch_sizes(32, 4) == V{8, 8, 8, 8});
  CHECK(micro_batch_sizes(32, 3) == V{11, 11, 10});
  CHECK(micro_batch_sizes(2, 4) == V{1, 1});
  CHECK(micro_batch_sizes(0, 4) == V{0});  // an empty share still runs one (empty) pass
  CHECK_THROWS(micro_batch_sizes(4, 0));
}

TEST_CASE("the GPipe bubble is (P - 1) / (M + P - 1)") {
  CHECK(bubble_fraction(1, 1) == 0.0);
  CHECK(bubble_fraction(2, 1) == Approx(0.5));
  CHECK(bubble_fraction(4, 1) == Approx(0.75));
  CHECK(bubble_fraction(2, 4) == Approx(0.2));
  CHECK(bubble_fraction(4, 8) == Approx(3.0 / 11.0));
}

TEST_CASE("a resume at another world size says what changed, the same or an unknown world nothing") {
  CHECK(world_change_line(4, 4, 3, 3, 64, 1, 1280) ==
        "resumed at world size 3 (was 4): dp 3 (was 4), global batch 64 kept, per-rank batch 22/21 "
        "(was 16), learning rate unchanged; epoch 2 goes on after its first 1280 samples");
  CHECK(world_change_line(4, 4, 4, 4, 64, 1, 1280).empty());
  CHECK(world_change_line(0, 0, 3, 3, 64, 1, 1280).empty());     // format 1: unknown
  CHECK_FALSE(world_change_line(4, 2, 4, 1, 64, 0, 0).empty());  // MP regrouped, DP changed
}

TEST_CASE("IDX parser accepts a valid array") {
  const auto a = parse_idx(idx_bytes({3, 2, 2}, 12), "x");
  CHECK(a.dims == std::vector<std::int64_t>{3, 2, 2});
  CHECK(a.data.size() == 12);
  CHECK(a.data[5] == 5);
}

TEST_CASE("IDX parser rejects bad magic, type, and sizes naming the source") {
  auto b = idx_bytes({3}, 3);
  b[0] = 1;
  CHECK_THROWS_WITH(parse_idx(b, "f.idx"), Catch::Contains("f.idx") && Catch::Contains("magic"));
  b = idx_bytes({3}, 3);
  b[2] = 0x0D;
  CHECK_THROWS_WITH(parse_idx(b, "f.idx"), Catch::Contains("unsigned byte"));
  CHECK_THROWS_WITH(parse_idx(idx_bytes({3, 4}, 11), "f.idx"), Catch::Contains("truncated"));
  CHECK_THROWS_WITH(parse_idx(idx_bytes({3}, 4), "f.idx"), Catch::Contains("header says 3"));
  CHECK_THROWS_WITH(parse_idx({0, 0}, "f.idx"), Catch::Contains("not an IDX file"));
}

TEST_CASE("IDX files are read gzipped or plain, and corrupt gzip is reported") {
  TempDir t;
  const auto bytes = idx_bytes({4, 3}, 12);
  {
    gzFile f = gzopen((t.path() / "a-idx.gz").c_str(), "wb");
    REQUIRE(f != nullptr);
    gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
    gzclose(f);
  }
  {
    std::ofstream out(t.path() / "b-idx", std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }
  CHECK(find_idx_file(t.path().string(), "a-idx") == (t.path() / "a-idx.gz").string());
  CHECK(find_idx_file(t.path().string(), "b-idx") == (t.path() / "b-idx").string());
  CHECK(read_idx_file((t.path() / "a-idx.gz").string()).dims == std::vector<std::int64_t>{4, 3});
  CHECK(read_idx_file((t.path() / "b-idx").string()).data.size() == 12);
  CHECK_THROWS_WITH(find_idx_file(t.path().string(), "missing"), Catch::Contains("missing.gz"));

  // Truncate the gzip stream in the middle.
  const auto gz = t.path() / "a-idx.gz";
  const auto full = fs::file_size(gz);
  fs::resize_file(gz, full - 6);
  CHECK_THROWS_WITH(read_idx_file(gz.string()), Catch::Contains(gz.string()));
}

TEST_CASE("atomic write replaces the file and leaves no temp behind") {
  TempDir t;
  const auto p = (t.path() / "latest.pt").string();
  write_file_atomic(p, {'o', 'l', 'd'});
  std::string seen_tmp;
  write_file_atomic(p, {'n', 'e', 'w', '!'}, [&](const std::string& tmp) {
    seen_tmp = tmp;
    // Before the rename, the old content is still what readers see.
    CHECK(read_file_if_exists(p) == std::vector<char>{'o', 'l', 'd'});
    CHECK(fs::exists(tmp));
  });
  CHECK(read_file_if_exists(p) == std::vector<char>{'n', 'e', 'w', '!'});
  CHECK_FALSE(fs::exists(seen_tmp));
  CHECK(fs::path(seen_tmp).parent_path() == t.path());
}

TEST_CASE("stale temps are removed and missing files read as empty optional") {
  TempDir t;
  const auto p = (t.path() / "latest.pt").string();
  std::ofstream(t.path() / ".latest.pt.tmp.1234") << "partial";
  std::ofstream(t.path() / "keep.txt") << "x";
  remove_stale_temps(p);
  CHECK_FALSE(fs::exists(t.path() / ".latest.pt.tmp.1234"));
  CHECK(fs::exists(t.path() / "keep.txt"));
  CHECK_FALSE(read_file_if_exists(p).has_value());
  CHECK_THROWS_WITH(write_file_atomic((t.path() / "no" / "dir.pt").string(), {'x'}),
                    Catch::Contains("cannot create"));
}

TEST_CASE("preemption exit code is 128 + signal") {
  CHECK(preempt_exit_code(15) == 143);
  CHECK(preempt_exit_code(12) == 140);
}

namespace {

// Runs body in a child process with stderr silenced; returns its wait status.
int in_child(const std::function<void()>& body) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    std::FILE* null = std::fopen("/dev/null", "w");
    if (null != nullptr) ::dup2(::fileno(null), STDERR_FILENO);
    body();
    ::_exit(0);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return status;
}

}  // namespace

TEST_CASE("a stop signal during set-up exits at once with 128 + signal, removing the segment") {
  const std::string name = "/ddprun-unit-stop-" + std::to_string(::getpid());
  const fs::path file = fs::path("/dev/shm") / name.substr(1);
  if (!fs::is_directory("/dev/shm")) return;
  const int status = in_child([&] {
    install_stop_handlers();
    std::ofstream(file) << "segment";
    remove_on_early_stop(name);
    ::raise(SIGUSR2);
    ::_exit(99);  // not reached
  });
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 140);
  CHECK_FALSE(fs::exists(file));
  fs::remove(file);
}

TEST_CASE("once deferred, a stop signal is only recorded and the first one wins") {
  const int status = in_child([] {
    install_stop_handlers();
    defer_stop_signals();
    ::raise(SIGTERM);
    ::raise(SIGUSR2);
    ::_exit(stop_signal_received() == SIGTERM && await_stop_signal(std::chrono::milliseconds(1)) == SIGTERM
                ? 0
                : 1);
  });
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

// ------------------------------------------------------------ shared-memory all-reduce

TEST_CASE("shm all-reduce: shares cover a bucket exactly, in rank order", "[shm]") {
  for (std::int64_t n : {0, 1, 2, 7, 64, 1001}) {
    for (int w : {1, 2, 3, 8}) {
      std::int64_t next = 0;
      for (int r = 0; r < w; ++r) {
        const auto [lo, hi] = shm_share(n, w, r);
        CHECK(lo == next);
        CHECK(hi >= lo);
        CHECK(hi - lo <= n / w + 1);
        next = hi;
      }
      CHECK(next == n);
    }
  }
}

namespace {

// Runs `body(rank)` in `world` forked processes; returns their exit statuses.
std::vector<int> run_ranks(int world, const std::function<int(int)>& body) {
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      int rc = 3;
      try {
        rc = body(r);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", r, e.what());
        rc = 4;
      }
      ::_exit(rc);
    }
    pids.push_back(pid);
  }
  std::vector<int> st;
  for (pid_t p : pids) {
    int s = 0;
    ::waitpid(p, &s, 0);
    st.push_back(WIFEXITED(s) ? WEXITSTATUS(s) : 128 + WTERMSIG(s));
  }
  return st;
}

std::string shm_name(const char* tag) {
  return "/ddprun-train-test-" + std::to_string(::getpid()) + "-" + tag;
}

}  // namespace

TEST_CASE("shm all-reduce: every rank gets the sum, step after step", "[shm]") {
  const std::vector<std::int64_t> buckets{5, 1000, 7};
  for (int world : {2, 3}) {
    const std::string name = shm_name(world == 2 ? "sum2" : "sum3");
    // Rank 0 creates before the others fork, as the trainer creates before publishing the name.
    auto owner = std::make_unique<ShmAllreduce>(name, true, world, 0, buckets, std::chrono::seconds(30));
    const auto st = run_ranks(world, [&](int rank) {
      std::unique_ptr<ShmAllreduce> mine;
      ShmAllreduce* s = owner.get();
      if (rank != 0) {
        mine = std::make_unique<ShmAllreduce>(name, false, world, rank, buckets, std::chrono::seconds(30));
        s = mine.get();
      }
      s->barrier();  // everyone attached
      for (int step = 0; step < 200; ++step) {
        for (std::size_t b = 0; b < buckets.size(); ++b) {
          std::vector<float> v(static_cast<std::size_t>(buckets[b]));
          for (std::size_t i = 0; i < v.size(); ++i) {
            v[i] = static_cast<float>((rank + 1) * 1000 + step + static_cast<int>(i % 13));
          }
          s->allreduce_sum(b, v.data(), buckets[b]);
          for (std::size_t i = 0; i < v.size(); ++i) {
            float want = 0;
            for (int r = 0; r < world; ++r) {
              want += static_cast<float>((r + 1) * 1000 + step + static_cast<int>(i % 13));
            }
            if (v[i] != want) return 1;
          }
        }
      }
      return 0;
    });
    owner->unlink_name();
    CHECK(st == std::vector<int>(static_cast<std::size_t>(world), 0));
  }
}

TEST_CASE("shm all-reduce: a rank that dies is an error for the others, not a hang", "[shm]") {
  const std::string name = shm_name("death");
  const std::vector<std::int64_t> buckets{16};
  auto owner = std::make_unique<ShmAllreduce>(name, true, 2, 0, buckets, std::chrono::seconds(60));
  const auto start = std::chrono::steady_clock::now();
  const auto st = run_ranks(2, [&](int rank) {
    if (rank == 1) {
      ShmAllreduce s(name, false, 2, 1, buckets, std::chrono::seconds(60));
      s.barrier();
      ::_exit(9);  // dies before its first all-reduce
    }
    owner->barrier();
    std::vector<float> v(16, 1.0f);
    try {
      owner->allreduce_sum(0, v.data(), 16);
    } catch (const Error& e) {
      return std::string(e.what()).find("rank 1") != std::string::npos ? 0 : 5;
    }
    return 6;
  });
  owner->unlink_name();
  CHECK(st == std::vector<int>{0, 9});
  // Well inside the 60 s timeout: the death was noticed, not waited out.
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(30));
}

TEST_CASE("shm all-reduce: a missing or foreign segment is a clear error", "[shm]") {
  const std::vector<std::int64_t> buckets{4};
  CHECK_THROWS_WITH(ShmAllreduce(shm_name("absent"), false, 2, 1, buckets, std::chrono::seconds(1)),
                    Catch::Contains("cannot open"));
  const std::string name = shm_name("foreign");
  ShmAllreduce three(name, true, 3, 0, buckets, std::chrono::seconds(1));
  CHECK_THROWS_WITH(ShmAllreduce(name, false, 2, 1, buckets, std::chrono::seconds(1)),
                    Catch::Contains("not this group's segment"));
}

TEST_CASE("heartbeat: a touch moves the file's mtime, unset is a no-op", "[heartbeat]") {
  TempDir dir;
  const std::string path = (dir.path() / "heartbeat").string();
  std::ofstream(path).put('x');
  const struct timespec old_times[2] = {{1000, 0}, {1000, 0}};
  REQUIRE(::utimensat(AT_FDCWD, path.c_str(), old_times, 0) == 0);
  const Heartbeat hb(env_of({{"DDPRUN_HEARTBEAT_FILE", path}}));
  CHECK(hb.enabled());
  hb.touch();
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  CHECK(st.st_mtim.tv_sec > 1000);  // moved from the old time to now
  CHECK(st.st_size == 1);           // nothing rewritten
  const Heartbeat off(env_of({}));
  CHECK_FALSE(off.enabled());
  off.touch();  // nothing to touch, nothing thrown
}
