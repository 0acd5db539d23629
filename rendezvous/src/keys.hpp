#pragma once
// Every store key and connection label of the rendezvous, in one place. They are the protocol
// between the agents of one job: change none without changing every agent.
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include <fmt/core.h>

namespace ddprun::rdzv::keys {

// One namespace per attempt, so that a restart runs a fresh round. The keys below live in it.
inline std::string attempt_prefix(int attempt) {
  return fmt::format("/attempt_{}/", attempt);
}

// Job-wide keys, outside the attempts' namespaces (docs/rendezvous.md, "Standbys that come late").
inline constexpr const char* kCurrentAttempt = "/job/attempt";  // the attempt of the last published plan
inline constexpr const char* kOver = "/job/over";  // the job's exit code, set by node 0 when it ends

inline constexpr const char* kPlan = "plan";                      // the published plan record (below)
inline constexpr const char* kJoinError = "join_error";           // why the round failed on node 0
inline constexpr const char* kJoinErrorCode = "join_error_code";  // its exit code, when not 1
inline constexpr const char* kAbort = "abort";        // the root cause (core::Failure); first write wins
inline constexpr const char* kArrivals = "arrivals";  // counter: agents that published their record
inline constexpr const char* kStandbys = "standbys";  // counter: the same for standbys (node rank >= MAX)
// Counter: agents that have read a start-up error under kAbort (Rendezvous::fail_start); "start_read/<n>"
// marks the n-th, and everyone leaves once all agents of the job have.
inline constexpr const char* kStartRead = "start_read";
inline std::string start_read(std::int64_t n) {
  return fmt::format("start_read/{}", n);
}

// Counter: claims on a node rank; the second claimant is refused.
inline std::string rank_claim(int node_rank) {
  return fmt::format("rank/{}", node_rank);
}
// The join record (JoinInfo as JSON) of a node rank.
inline std::string node(int node_rank) {
  return fmt::format("node/{}", node_rank);
}
// The node rank of the n-th arrival (n from 1): node 0 waits for "arrived/<nnodes>".
inline std::string arrived(std::int64_t n) {
  return fmt::format("arrived/{}", n);
}
// The node rank of the n-th standby's arrival: standbys never count towards MIN or MAX.
inline std::string standby_arrived(std::int64_t n) {
  return fmt::format("standby/{}", n);
}
// Set by an agent once its arrival is counted and recorded: a round after a restart waits for these.
inline std::string present(int node_rank) {
  return fmt::format("present/{}", node_rank);
}
// An agent that will not join this round (its --health-check failed; elastic): the counter, the n-th
// one's node rank, and its cause (core::Failure) by node rank.
inline constexpr const char* kDeclined = "declined";
inline std::string declined(std::int64_t n) {
  return fmt::format("declined/{}", n);
}
inline std::string decline(int node_rank) {
  return fmt::format("decline/{}", node_rank);
}
// Set by a node that reached a barrier: it is leaving, its disconnection is no failure.
inline std::string left(int node_rank) {
  return fmt::format("left/{}", node_rank);
}

// Barrier `name`: a counter of arrivals, "done" once all arrived, and each node's acknowledgement.
inline std::string barrier_count(const std::string& name) {
  return fmt::format("barrier/{}/count", name);
}
inline std::string barrier_done(const std::string& name) {
  return fmt::format("barrier/{}/done", name);
}
inline std::string barrier_ack(const std::string& name, int node_rank) {
  return fmt::format("barrier/{}/ack/{}", name, node_rank);
}

// An agent's end-of-run record (opaque here) for the job-wide summary node rank 0 prints.
inline std::string result(int node_rank) {
  return fmt::format("result/{}", node_rank);
}

// Fields of the record under kPlan.
namespace plan_record {
inline constexpr const char* kPlan = "plan";          // the opaque plan
inline constexpr const char* kRanks = "ranks";        // runs [first, last] of the node ranks that joined
inline constexpr const char* kHostlist = "hostlist";  // hostnames by rank in the plan, as a Slurm hostlist
inline constexpr const char* kHosts = "hosts";        // the same as a list, when a name fits no hostlist
inline constexpr const char* kActive = "active";      // active nodes; the rest are standbys
}  // namespace plan_record

}  // namespace ddprun::rdzv::keys

// Connection labels (the hello's label): the store reports a lost connection by its label.
namespace ddprun::rdzv::labels {

// An agent's main connection (join, abort, barrier).
inline constexpr const char* kMainPrefix = "main/";
inline std::string main_conn(int node_rank) {
  return fmt::format("{}{}", kMainPrefix, node_rank);
}
// The node rank in a main-connection label; nullopt for any other label.
inline std::optional<int> main_node_rank(const std::string& label) {
  if (!label.starts_with(kMainPrefix)) return std::nullopt;
  try {
    return std::stoi(label.substr(std::string_view(kMainPrefix).size()));
  } catch (const std::exception&) {
    return std::nullopt;
  }
}
// An agent's watch connection, its heartbeat: losing it means losing the agent.
inline std::string agent_prefix(int attempt) {
  return fmt::format("agent/{}/", attempt);
}
inline std::string agent(int attempt, int node_rank) {
  return fmt::format("{}{}", agent_prefix(attempt), node_rank);
}
// The node rank in an agent label of `attempt`; nullopt for any other label.
inline std::optional<int> agent_node_rank(const std::string& label, int attempt) {
  const std::string prefix = agent_prefix(attempt);
  if (!label.starts_with(prefix)) return std::nullopt;
  try {
    return std::stoi(label.substr(prefix.size()));
  } catch (const std::exception&) {
    return std::nullopt;
  }
}
// The short connection an agent publishes its end-of-run record on (bounded, whatever the main
// connection is doing).
inline std::string result(int node_rank) {
  return fmt::format("result/{}", node_rank);
}
// The short connection an agent answers `ddprun stacks` on while its exit barrier holds the main one.
inline std::string reply(int node_rank) {
  return fmt::format("reply/{}", node_rank);
}
// The short connection an agent publishes its root cause on while its exit barrier holds the main one.
inline std::string abort(int node_rank) {
  return fmt::format("abort/{}", node_rank);
}
// An agent's connection while its --health-check runs before the first round: it hears of the job's end.
inline constexpr const char* kWaitingPrefix = "waiting/";
inline std::string waiting(int node_rank) {
  return fmt::format("{}{}", kWaitingPrefix, node_rank);
}
// Node 0's connection that publishes lost agents.
inline std::string monitor(int attempt) {
  return fmt::format("monitor/{}", attempt);
}

}  // namespace ddprun::rdzv::labels
