#include "checkpoint.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/version.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <sstream>

namespace ddprun::train {
namespace {

namespace fs = std::filesystem;

std::vector<char> archive_bytes(torch::serialize::OutputArchive& ar) {
  std::ostringstream os;
  ar.save_to(os);
  const auto s = os.str();
  return std::vector<char>(s.begin(), s.end());
}

// opt_bytes: with a pipeline, every stage's optimizer archive in stage order.
std::vector<char> serialize_checkpoint(Net& net, torch::optim::Optimizer& opt,
                                       const std::vector<std::vector<char>>& opt_bytes, const Position& pos,
                                       const Options& o, const DistEnv& env) {
  torch::serialize::OutputArchive ar;
  torch::serialize::OutputArchive model_ar;
  net->save(model_ar);
  ar.write("model", model_ar);
  if (env.mp_size == 1) {
    torch::serialize::OutputArchive opt_ar;
    opt.save(opt_ar);
    ar.write("optimizer", opt_ar);
  } else {
    for (std::size_t s = 0; s < opt_bytes.size(); ++s) {
      const auto& b = opt_bytes[s];
      ar.write("stage_optimizer_" + std::to_string(s),
               torch::from_blob(const_cast<char*>(b.data()), {static_cast<std::int64_t>(b.size())},
                                torch::kUInt8));
    }
  }
  ar.write("format", torch::tensor(kCheckpointFormat));
  ar.write("epoch", torch::tensor(pos.epoch));
  ar.write("batch", torch::tensor(pos.batch));
  ar.write("step", torch::tensor(pos.step));
  // Format 2: who wrote it. The batch index counts global batches, so it holds at any DP size.
  ar.write("samples", torch::tensor(pos.batch * o.batch_size));
  ar.write("world_size", torch::tensor(static_cast<std::int64_t>(env.world_size)));
  ar.write("dp_size", torch::tensor(static_cast<std::int64_t>(env.dp_size)));
  // Format 3: the model's depth and the pipeline split.
  ar.write("layers", torch::tensor(static_cast<std::int64_t>(net->num_layers())));
  ar.write("stages", torch::tensor(static_cast<std::int64_t>(env.mp_size)));
  ar.write("global_batch", torch::tensor(o.batch_size));
  ar.write("model_kind", c10::IValue(o.model));
  ar.write("rng", at::detail::getDefaultCPUGenerator().get_state());
  return archive_bytes(ar);
}

// read() into a defined tensor resizes it in place; always read into a fresh one.
std::int64_t read_int(torch::serialize::InputArchive& ar, const char* key) {
  torch::Tensor t;
  ar.read(key, t);
  return t.item<std::int64_t>();
}

// The format must be known, and the model kind and depth, the global batch and the pipeline
// split match this run, before anything is loaded. Returns the format.
std::int64_t check_compatible(torch::serialize::InputArchive& ar, const Net& net, const Pipe& pipe,
                              const Options& o, const std::string& what) {
  const auto format = read_int(ar, "format");
  check_checkpoint_format(format, what);
  c10::IValue kind;
  ar.read("model_kind", kind);
  if (kind.toStringRef() != o.model) {
    throw Error(what + " holds model '" + kind.toStringRef() + "', not --model " + o.model +
                "; use another --checkpoint-dir");
  }
  // Formats 1 and 2 knew only the default depths and one stage.
  const auto layers = format >= 3 ? read_int(ar, "layers") : default_layers(o.model);
  if (layers != net->num_layers()) {
    throw Error(what + " holds a " + std::to_string(layers) + "-layer " + o.model + ", not --layers " +
                std::to_string(net->num_layers()) + "; resume with --layers " + std::to_string(layers));
  }
  check_checkpoint_stages(format >= 3 ? static_cast<int>(read_int(ar, "stages")) : 1, pipe.stages(), what);
  const auto global_batch = read_int(ar, "global_batch");
  if (global_batch != o.batch_size) {
    throw Error(what + " was trained with --batch-size " + std::to_string(global_batch) +
                "; resume with the same global batch");
  }
  return format;
}

// libtorch 1.x keys the optimizer's per-parameter state by hexadecimal addresses ("0x55..."), which
// libtorch 2.x reads as decimal: every key becomes 0, and the state lands on the wrong parameters (a momentum
// buffer of another shape, found by the trainer tests against torch 2.11). Refuse such a checkpoint instead
// of training on it.
void check_optimizer_keys([[maybe_unused]] torch::serialize::InputArchive& opt_ar,
                          [[maybe_unused]] const std::string& what) {
#if TORCH_VERSION_MAJOR >= 2
  torch::serialize::InputArchive state;
  opt_ar.read("state", state);
  for (const auto& key : state.keys()) {
    if (key.rfind("0x", 0) == 0) {
      throw Error(
          what +
          " was written by a ddprun-train built with libtorch 1.x, whose optimizer state libtorch 2.x "
          "cannot read back; resume it with that build, or start afresh in another --checkpoint-dir");
    }
  }
#endif
}

// Format 1 did not record the writer's world: left unknown (0).
Resumed read_position(torch::serialize::InputArchive& ar, std::int64_t format) {
  Resumed r;
  r.pos.epoch = read_int(ar, "epoch");
  r.pos.batch = read_int(ar, "batch");
  r.pos.step = read_int(ar, "step");
  if (format >= 2) {
    r.samples = read_int(ar, "samples");
    r.world_size = static_cast<int>(read_int(ar, "world_size"));
    r.dp_size = static_cast<int>(read_int(ar, "dp_size"));
  }
  return r;
}

// Test hook: pause after the temp file is durable, before the rename.
constexpr const char* kPauseBeforeRename = "DDPRUN_TRAIN_TEST_PAUSE_BEFORE_RENAME_MS";
std::function<void(const std::string&)> test_pause_hook() {
  if (const char* ms = std::getenv(kPauseBeforeRename); ms == nullptr || *ms == '\0') {
    return {};
  }
  return [](const std::string& tmp) {
    pause_for_test(kPauseBeforeRename, "wrote " + tmp + ", pausing before rename");
  };
}

// One store value: a presence byte, then the file.
std::vector<std::uint8_t> pack_for_store(const std::optional<std::vector<char>>& bytes) {
  std::vector<std::uint8_t> v(1 + (bytes ? bytes->size() : 0));
  v[0] = bytes ? 1 : 0;
  if (bytes) {
    std::copy(bytes->begin(), bytes->end(), v.begin() + 1);
  }
  return v;
}

}  // namespace

std::string checkpoint_path(const Options& o) {
  return (fs::path(o.checkpoint_dir) / "latest.pt").string();
}

Resumed load_checkpoint(const std::vector<char>& bytes, Net& net, torch::optim::Optimizer& opt,
                        const Pipe& pipe, const Options& o, const std::string& what) {
  try {
    torch::serialize::InputArchive ar;
    ar.load_from(bytes.data(), bytes.size());
    const auto format = check_compatible(ar, net, pipe, o, what);
    torch::serialize::InputArchive model_ar;
    ar.read("model", model_ar);
    net->load(model_ar);  // the whole model: every stage then trains its own layers of it
    torch::serialize::InputArchive opt_ar;
    if (pipe.stages() == 1) {
      ar.read("optimizer", opt_ar);
    } else {
      torch::Tensor b;
      ar.read("stage_optimizer_" + std::to_string(pipe.stage()), b);
      b = b.contiguous();
      opt_ar.load_from(reinterpret_cast<const char*>(b.data_ptr<std::uint8_t>()),
                       static_cast<std::size_t>(b.numel()));
    }
    check_optimizer_keys(opt_ar, what);
    opt.load(opt_ar);
    Resumed r = read_position(ar, format);
    if (format < 2) {
      r.samples = r.pos.batch * o.batch_size;  // format 1 required an even split: same meaning
    }
    torch::Tensor rng;
    ar.read("rng", rng);
    at::Generator gen = at::detail::getDefaultCPUGenerator();  // a handle to the global one
    gen.set_state(rng);
    return r;
  } catch (const c10::Error& e) {
    throw Error(what + ": unreadable checkpoint (" + first_line(e.what_without_backtrace()) + ")");
  }
}

void save_checkpoint(const DistEnv& env, const Options& o, Net& net, torch::optim::Optimizer& opt, Pipe& pipe,
                     const Position& pos) {
  if (o.checkpoint_dir.empty() || env.dp_rank != 0) {
    return;
  }
  std::vector<std::vector<char>> opt_bytes;
  if (pipe.stages() > 1) {
    gather_layers(pipe, net);
    torch::serialize::OutputArchive opt_ar;
    opt.save(opt_ar);
    opt_bytes = gather_bytes(pipe, archive_bytes(opt_ar));
  }
  if (env.rank != 0) {
    return;
  }
  const auto bytes = serialize_checkpoint(net, opt, opt_bytes, pos, o, env);
  write_file_atomic(checkpoint_path(o), bytes, test_pause_hook());
}

std::optional<std::vector<char>> fetch_checkpoint(Dist& d, const Options& o) {
  std::optional<std::vector<char>> bytes;
  if (d.env.rank == 0) {
    fs::create_directories(o.checkpoint_dir);
    remove_stale_temps(checkpoint_path(o));
    if (o.resume) {
      bytes = read_file_if_exists(checkpoint_path(o));
    }
  }
  if (!d.active() || !o.resume) {
    return bytes;
  }
  const std::string key = "ddprun_train/resume";
  if (d.env.rank == 0) {
    // Test hook: the other ranks wait in the store meanwhile.
    pause_for_test("DDPRUN_TRAIN_TEST_PAUSE_BEFORE_HANDOVER_MS",
                   "read " + checkpoint_path(o) + ", pausing before handing it to the other ranks");
    d.store->set(key, pack_for_store(bytes));
    return bytes;
  }
  // Test hook (0 ms: a notice): a test stops this rank while it waits in the store.
  pause_for_test("DDPRUN_TRAIN_TEST_PAUSE_BEFORE_FETCH_MS", "waiting in the store for rank 0's checkpoint");
  const auto v = d.store->get(key);
  if (v.empty() || v[0] == 0) {
    return std::nullopt;
  }
  return std::vector<char>(v.begin() + 1, v.end());
}

}  // namespace ddprun::train
