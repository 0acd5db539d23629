// The enums' names (core/enum_names.hpp): each table lists every value and every name once, to_string
// and the parsers answer from it, and the names users type or read (flags, JSON, `ddprun top`) stay.
#include <catch2/catch.hpp>

#include <set>
#include <string>

#include "core/cpu_bind.hpp"
#include "core/plan.hpp"
#include "core/rank_order.hpp"
#include "core/requeue.hpp"
#include "core/slurm_env.hpp"
#include "core/status.hpp"
#include "core/worker_store.hpp"

using namespace ddprun::core;

namespace {

// Values are the enum's 0..N-1, each once; names unique; both lookups agree; an unknown name is none.
template <class E, std::size_t N>
void check_table(const std::array<EnumName<E>, N>& table) {
  std::set<int> values;
  std::set<std::string> names;
  for (const auto& e : table) {
    CAPTURE(e.name);
    CHECK(values.insert(static_cast<int>(e.value)).second);
    CHECK(names.insert(e.name).second);
    CHECK(value_of(table, e.name) == e.value);
    CHECK(std::string(name_of(table, e.value, "?")) == e.name);
  }
  CHECK(*values.begin() == 0);
  CHECK(*values.rbegin() == static_cast<int>(N) - 1);
  CHECK_FALSE(value_of(table, "no such name").has_value());
  CHECK(std::string(name_of(table, static_cast<E>(N), "fallback")) == "fallback");
}

}  // namespace

TEST_CASE("enum names: every table lists each value and each name once, both ways", "[enum_names]") {
  check_table(kCpuBindNames);
  check_table(kJobEndNames);
  check_table(kWorkerStoreNames);
  check_table(kSlurmContextNames);
  check_table(kModeNames);
  check_table(kRankOrderNames);
  check_table(kRankStateNames);
}

TEST_CASE("enum names: to_string and the parsers answer from the tables", "[enum_names]") {
  for (const auto& e : kCpuBindNames) {
    CHECK(std::string(to_string(e.value)) == e.name);
    CHECK(parse_cpu_bind(e.name) == e.value);
  }
  CHECK_THROWS_AS(parse_cpu_bind("socket"), Error);
  for (const auto& e : kWorkerStoreNames) {
    CHECK(std::string(to_string(e.value)) == e.name);
    CHECK(parse_worker_store(e.name) == e.value);
  }
  for (const auto& e : kRankOrderNames) {
    CHECK(std::string(to_string(e.value)) == e.name);
    CHECK(parse_rank_order(e.name) == e.value);
  }
  for (const auto& e : kRankStateNames) {
    CHECK(std::string(to_string(e.value)) == e.name);
    CHECK(rank_state_from_string(e.name) == e.value);
  }
  for (const auto& e : kSlurmContextNames) CHECK(std::string(to_string(e.value)) == e.name);
  for (const auto& e : kModeNames) CHECK(std::string(to_string(e.value)) == e.name);
}

TEST_CASE("enum names: the names users type and read", "[enum_names]") {
  struct Row {
    std::string got;
    std::string want;
  };
  const std::vector<Row> rows = {
      {to_string(CpuBind::none), "none"},
      {to_string(CpuBind::cores), "cores"},
      {to_string(CpuBind::numa), "numa"},
      {to_string(CpuBind::gpu), "gpu"},
      {to_string(WorkerStore::agent), "agent"},
      {to_string(WorkerStore::rank0), "rank0"},
      {to_string(WorkerStore::relay), "relay"},
      {to_string(SlurmContext::none), "none"},
      {to_string(SlurmContext::batch), "batch"},
      {to_string(SlurmContext::step), "step"},
      {to_string(Mode::agent), "agent"},
      {to_string(Mode::per_task), "per-task"},
      {to_string(Mode::standalone), "standalone"},
      {to_string(RankOrder::slurm), "slurm"},
      {to_string(RankOrder::topology), "topology"},
      {to_string(RankState::starting), "starting"},
      {to_string(RankState::running), "running"},
      {to_string(RankState::hung), "hung"},
      {to_string(RankState::exited), "exited"},
      {to_string(RankState::stopped), "stopped"},
  };
  for (const auto& r : rows) CHECK(r.got == r.want);
}
