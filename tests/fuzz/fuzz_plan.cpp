// libFuzzer target for the published plan (core/plan_table.hpp): any bytes given to the decoder
// either decode or raise core::Error, nothing else; what decodes encodes back to an equal table and
// derives every node's workers without error; and any strings in a table survive the codec.
// Seeds: tests/fuzz/corpus/plan/.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "core/error.hpp"
#include "core/plan_table.hpp"

namespace core = ddprun::core;

namespace {

// The input as wire text from the master.
void as_wire(std::string_view in) {
  core::PlanTable t;
  try {
    t = core::decode_plan_table(in);
  } catch (const core::Error&) {
    return;
  }
  if (!(core::decode_plan_table(core::encode_plan_table(t)) == t)) std::abort();
  if (t.job.world_size > 4096) return;  // deriving is O(workers): keep each input fast
  for (std::size_t n = 0; n < t.nodes.size(); ++n) {
    const auto ws = core::derive_workers(t, static_cast<int>(n));
    if (ws.size() != (t.nodes[n].standby ? 0u : static_cast<std::size_t>(t.nodes[n].local_world_size)))
      std::abort();
  }
}

// The input's bytes, split at NULs, as the strings of a table the master could build.
void as_strings(std::string_view rest) {
  auto next = [&rest] {
    const auto cut = rest.find('\0');
    std::string piece(rest.substr(0, cut));
    rest = cut == std::string_view::npos ? std::string_view{} : rest.substr(cut + 1);
    return piece;
  };
  core::PlanTable t;
  t.job.mode = core::Mode::agent;
  t.job.master_addr = next();
  t.job.run_id = next();
  t.job.role = next();
  t.job.user_omp_num_threads = next();
  t.job.nnodes = 0;
  while (!rest.empty() && t.nodes.size() < 64) {
    core::NodeRow row;
    row.host = next();
    // Mostly rows alike (own address, the last row's GPUs), so that runs form and break.
    row.addr = t.nodes.size() % 4 != 3 ? *row.host : next();
    if (t.nodes.size() % 3 == 0)
      row.gpus = {next(), next()};
    else
      row.gpus = t.nodes.back().gpus;
    row.first_rank = t.job.world_size;
    t.job.world_size += 1;
    t.job.nnodes += 1;
    t.nodes.push_back(std::move(row));
  }
  if (t.nodes.empty()) return;
  if (!(core::decode_plan_table(core::encode_plan_table(t)) == t)) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  as_wire(in);
  as_strings(in);
  return 0;
}
