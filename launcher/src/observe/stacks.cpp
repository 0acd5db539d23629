#include "launcher/observe/stacks.hpp"

#include <algorithm>
#include <chrono>
#include <iostream>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/json.hpp"
#include "core/stack_groups.hpp"
#include "job_query.hpp"
#include "launcher/observe/job_locator.hpp"
#include "store/client.hpp"
#include "store/error.hpp"

namespace ddprun::launcher {

namespace {

// The agents look for a request about once a second and bound each rank's collection: every node
// that can answer has answered well within this (--timeout's default).
constexpr double kReplyWaitSeconds = 15;

struct StacksOptions {
  JobQuery query;
  std::optional<std::string> ranks;
  double timeout_s = kReplyWaitSeconds;  // for every node's answer
  std::string format = "text";
  bool help = false;
};

StacksOptions parse_stacks(int argc, const char* const* argv) {
  StacksOptions o;
  JobQueryCli cli(
      "stacks",
      "Print every rank's current stack of a running ddprun job without stopping it (Python workers "
      "through faulthandler, native ones through eu-stack), ranks in the same frames grouped.",
      o.query);
  CLI::App& app = cli.app();
  app.add_option("--rank", o.ranks, "Only these ranks: 3,7-9");
  app.add_option("--timeout", o.timeout_s,
                 "Seconds to wait for every node's answer (default 15); a node that does not answer in time "
                 "is an error (exit 1)")
      ->check(CLI::Range(0.1, 3600.0));
  app.add_option("--format", o.format, "text or json")->check(CLI::IsMember({"text", "json"}));
  o.help = !cli.parse(argc, argv);
  return o;
}

std::string make_nonce() {
  std::random_device rd;
  return fmt::format("{:08x}{:08x}", rd(), rd());
}

// A --rank naming no rank of the job is a usage error, said before anything is asked.
void check_ranks_known(const StacksOptions& o, const std::set<int>& wanted,
                       const std::vector<core::NodeStatus>& nodes) {
  std::set<int> known;
  for (const auto& n : nodes) {
    for (const auto& r : n.ranks) known.insert(r.rank);
  }
  for (const int r : wanted) {
    if (known.count(r) == 0) {
      throw core::Error(fmt::format("--rank {}: the job has no rank {} (its ranks: {})", *o.ranks, r,
                                    core::format_rank_list({known.begin(), known.end()})),
                        core::kUsageExit);
    }
  }
}

struct Collected {
  std::vector<core::RankStack> stacks;
  std::vector<int> silent_nodes;  // node ranks with no (readable) answer by the deadline
};

// Takes node i's reply if it is there yet; returns whether it was.
bool take_reply(store::TcpStore& store, const core::StacksRequest& req, const std::string& key, int node,
                Collected& out) {
  const auto text = store.get(key, std::chrono::milliseconds{0});
  if (!text) return false;
  try {
    for (auto& r : core::decode_node_stacks(*text).ranks) {
      if (!req.ranks || req.ranks->count(r.rank) != 0) out.stacks.push_back(std::move(r));
    }
  } catch (const core::Error&) {
    out.silent_nodes.push_back(node);
  }
  store.del(key);
  return true;
}

// Posts the request and polls every node's reply key until all answered or the timeout passed.
Collected ask_and_collect(store::TcpStore& store, const core::StacksRequest& req, int nnodes,
                          double timeout_s) {
  std::vector<std::string> keys;
  keys.reserve(static_cast<std::size_t>(std::max(nnodes, 0)));
  for (int n = 0; n < nnodes; ++n) keys.push_back(core::stacks_reply_key(req.nonce, n));
  Collected out;
  store.set(core::kStacksRequestKey, core::encode_stacks_request(req));
  const auto deadline =
      std::chrono::steady_clock::now() +
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::duration<double>(timeout_s));
  std::vector<bool> have(keys.size(), false);
  for (;;) {
    for (std::size_t i = 0; i < keys.size(); ++i) {
      if (!have[i]) have[i] = take_reply(store, req, keys[i], static_cast<int>(i), out);
    }
    if (std::all_of(have.begin(), have.end(), [](bool b) { return b; })) break;
    if (std::chrono::steady_clock::now() >= deadline) {
      for (std::size_t i = 0; i < keys.size(); ++i) {
        if (!have[i]) out.silent_nodes.push_back(static_cast<int>(i));
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds{100});
  }
  store.del(core::kStacksRequestKey);
  return out;
}

int print_stacks(const StacksOptions& o, Collected c) {
  std::sort(c.stacks.begin(), c.stacks.end(), [](const auto& a, const auto& b) { return a.rank < b.rank; });
  const auto groups = core::group_stacks(c.stacks);
  if (o.format == "json") {
    nlohmann::json g = nlohmann::json::array();
    for (const auto& x : groups) g.push_back({{"ranks", x.ranks}, {"text", x.text}});
    std::cout << core::dump_json({{"groups", g}, {"nodes_not_answering", c.silent_nodes}}) << "\n";
  } else {
    std::cout << core::format_stack_groups(groups);
  }
  std::cout.flush();
  if (c.silent_nodes.empty()) return 0;
  // Stacks missing for a whole node are no complete answer, as a script asking must learn.
  fmt::print(stderr,
             "ddprun stacks: error: node ranks {} did not answer within {} s (their agents are stopped, "
             "stuck or gone): their ranks' stacks are missing\n",
             core::format_rank_list(c.silent_nodes), o.timeout_s);
  return kObserveExit;
}

int run_stacks(const StacksOptions& o, const JobTarget& t, store::TcpStore& store) {
  core::StacksRequest req;
  req.nonce = make_nonce();
  if (o.ranks) req.ranks = core::parse_rank_selection(*o.ranks);
  const auto nodes = read_job_status(store, t);  // the job is there and says how many nodes it has
  if (req.ranks) check_ranks_known(o, *req.ranks, nodes);
  Collected c;
  try {
    c = ask_and_collect(store, req, nodes.front().nnodes, o.timeout_s);
  } catch (const store::Error& e) {
    throw core::Error(fmt::format("the job's store at {} stopped answering: {}", t.describe(), e.what()),
                      kObserveExit);
  }
  std::sort(c.silent_nodes.begin(), c.silent_nodes.end());
  if (c.stacks.empty() && !c.silent_nodes.empty()) {
    throw core::Error(fmt::format("no node of the job at {} answered within {} s: its agents are busy or "
                                  "stopping, or predate `ddprun stacks`",
                                  t.describe(), o.timeout_s),
                      kObserveExit);
  }
  return print_stacks(o, std::move(c));
}

}  // namespace

int stacks_main(int argc, const char* const* argv) {
  return run_job_query("stacks", [&] {
    const StacksOptions o = parse_stacks(argc, argv);
    if (o.help) return 0;
    if (o.ranks) core::parse_rank_selection(*o.ranks);  // a bad selection before any connection
    const JobAccess access = prepare_access(o.query);
    JobTarget t;
    const auto store = connect_to(o.query, access, t);
    return run_stacks(o, t, *store);
  });
}

}  // namespace ddprun::launcher
