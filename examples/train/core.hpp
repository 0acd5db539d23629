// Torch-free parts of ddprun-train: errors, environment, sampler, IDX files, atomic writes.
// Kept separate so they build under the strict warning set and are unit-tested.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace ddprun::train {

// The trainer's one error type; what() is a one-line message for the user.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The first line of s: c10 errors carry a stack trace after it.
std::string first_line(const std::string& s);

// Exit codes. A graceful preemption stop exits 128 + signal number (143 for SIGTERM,
// 140 for SIGUSR2), like a shell reports a signal death: the job is not "done", so
// Slurm's afterok dependencies do not fire and requeue scripts can tell it apart from 0.
inline constexpr int kExitOk = 0;
inline constexpr int kExitError = 1;
inline constexpr int kExitUsage = 2;
int preempt_exit_code(int signo);

// Where this process sits in the job. Defaults describe a single process.
struct DistEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::string master_addr;
  int master_port = 0;
  int mp_rank = 0;  // model-parallel slice this process belongs to
  int mp_size = 1;
  int dp_rank = 0;  // position inside its data-parallel group
  int dp_size = 1;
  // TORCHELASTIC_USE_AGENT_STORE=True (ddprun's default, torchrun 2.x's): the launcher serves the store on
  // MASTER_PORT and every rank is a client; else rank 0 hosts it.
  bool agent_store = false;
};

using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;
DistEnv parse_dist_env(const EnvLookup& env);
EnvLookup process_env();  // getenv
DistEnv parse_dist_env_from_process();

// The global batch must give every data-parallel rank at least one sample; throws otherwise.
// It need not divide: see rank_batch.
void check_global_batch(std::int64_t global_batch, int dp_size);

// The global batch's split over the DP ranks, for messages: "16", or "22/21" when the first
// global_batch % dp_size ranks take one sample more.
std::string per_rank_batch_text(std::int64_t global_batch, int dp_size);

// The epoch's sample order: a permutation of 0..n-1 seeded by seed + epoch (identical on every
// rank and at every world size), or 0..n-1 without shuffle.
std::vector<std::int64_t> epoch_permutation(std::int64_t n, std::uint64_t seed, std::int64_t epoch,
                                            bool shuffle);

// Global batches per epoch: ceil(n / global_batch); the last one may be short.
std::int64_t batches_per_epoch(std::int64_t n, std::int64_t global_batch);

// Global batch b is positions [b * global_batch, ...) of the epoch's permutation, whatever the
// DP size; DP rank r takes every dp_size-th of them from the r-th on. No padding: when the batch
// does not divide, the first ranks take one sample more (a rank may get none of a short last
// batch). batch_len is the whole global batch's size, for the loss weight.
struct RankBatch {
  std::vector<std::int64_t> indices;
  std::int64_t batch_len = 0;
};
RankBatch rank_batch(const std::vector<std::int64_t>& perm, std::int64_t global_batch, std::int64_t b,
                     int dp_size, int dp_rank);

// Factor on a rank's mean loss so that averaging the DP ranks' gradients gives the mean over the
// whole global batch: rank_len * dp_size / batch_len (1 when the split is even).
double rank_loss_weight(std::int64_t rank_len, std::int64_t batch_len, int dp_size);

// Checkpoint formats this trainer reads. 1 lacks the world and DP size it was written at;
// 2 records them (and the samples of the epoch done) so a resume can say what changed; 3 adds
// the model's layer count and the pipeline stages, with one optimizer state per stage.
inline constexpr std::int64_t kCheckpointFormat = 3;
inline constexpr std::int64_t kOldestCheckpointFormat = 1;
// Throws, naming `what`, for a format outside [kOldestCheckpointFormat, kCheckpointFormat].
void check_checkpoint_format(std::int64_t format, const std::string& what);

// The line a resume logs when the world or DP size differs from the checkpoint's (empty when
// the same, or unknown: 0 from a format-1 checkpoint). `samples` is how far into epoch `epoch`
// (0-based) the run was; the global batch is kept, so that position holds at any DP size.
std::string world_change_line(int old_world, int old_dp, int world, int dp, std::int64_t global_batch,
                              std::int64_t epoch, std::int64_t samples);

// A resume must use the pipeline split it was written with: every stage's optimizer state belongs
// to its own layers. Throws, naming `what` and both stage counts, when they differ.
void check_checkpoint_stages(int written_stages, int stages, const std::string& what);

// The models are chains of layers (Linear, then ReLU but after the last). Their widths, input first:
//   toy: 32, then 32 per hidden layer, 10       (default 2 layers: 32-32-10)
//   mlp: 784, then 256, 128, 128, ..., 10       (default 3 layers: 784-256-128-10)
//   ae:  784, then 128 per hidden layer, 784    (default 4 layers: 784-128-128-128-784)
// `layers` 0 means the model's default. Throws on an unknown model or layers < 0.
int default_layers(const std::string& model);
std::vector<std::int64_t> layer_widths(const std::string& model, int layers);

// Pipeline parallelism: DDPRUN_MP_SIZE processes split the layers into that many consecutive
// stages, as evenly as they go (as PyTorch's pipeline split does): the first layers % stages stages
// hold one layer more (3 layers in 2 stages: 2 + 1). Stage s holds layers [first, last). Throws a
// one-line error when there are more stages than layers.
struct StageLayers {
  int first = 0;
  int last = 0;
};
StageLayers stage_layers(int layers, int stages, int stage, const std::string& model);

// The split for the start-up line: "2 layers" when the stages are equal, else each stage's count,
// "3 + 3 + 2 layers".
std::string stage_split_text(int layers, int stages);

// One rank's share of a step split into micro-batches: min(m, len) parts (at least one, of zero
// samples for an empty share), the first len % parts one sample larger.
std::vector<std::int64_t> micro_batch_sizes(std::int64_t len, int m);

// The idle share of a GPipe schedule with equal stages: (P - 1) / (M + P - 1).
double bubble_fraction(int stages, int micro_batches);

// An IDX array (the MNIST file format), unsigned bytes only.
struct IdxArray {
  std::vector<std::int64_t> dims;
  std::vector<std::uint8_t> data;
};

// Parses IDX bytes; `what` names the source in errors. Throws Error on a bad magic,
// dimension count, or a size that does not match the header.
IdxArray parse_idx(const std::vector<std::uint8_t>& bytes, const std::string& what);

// Reads an IDX file, gzipped or plain, and parses it.
IdxArray read_idx_file(const std::string& path);

// Finds <dir>/<stem>.gz or <dir>/<stem>; throws Error naming both when neither exists.
std::string find_idx_file(const std::string& dir, const std::string& stem);

// Writes bytes to path atomically: temp file in the same directory, fsync, rename,
// fsync of the directory. A crash at any point leaves either the old or the new file.
// `before_rename` (tests only) runs after the temp file is durable.
void write_file_atomic(const std::string& path, const std::vector<char>& bytes,
                       const std::function<void(const std::string& tmp)>& before_rename = {});

// Removes temp files left by an interrupted write_file_atomic for path.
void remove_stale_temps(const std::string& path);

std::optional<std::vector<char>> read_file_if_exists(const std::string& path);

// ddprun's hang detection (--hang-timeout): touching the file named by DDPRUN_HEARTBEAT_FILE says
// "still making progress" without printing. One utimensat per call, nothing written; a no-op when
// the variable is unset or empty, and a failed touch is ignored (training goes on).
class Heartbeat {
 public:
  explicit Heartbeat(const EnvLookup& env);
  void touch() const;
  bool enabled() const { return !path_.empty(); }

 private:
  std::string path_;
};

// Tests only: when the variable env_var holds a number of milliseconds, prints
// "ddprun-train: test hook: <what>" on stderr and sleeps that long; otherwise does nothing.
void pause_for_test(const char* env_var, const std::string& what);

}  // namespace ddprun::train
