// A stand-in ddprun agent for multi-process rendezvous tests: joins, reports the plan, watches for
// aborts, then does what --mode says (idle, abort, barrier; stop-before-watch and
// exit-before-watch stop or end the process right after PLAN, before it starts watching).
// Output lines go to stdout (the test redirects to a file):
//   PLAN <node_rank> <nnodes> <world_size> <master_port>
//   ABORT <json>        (then exits with the abort's exit code)
//   BARRIER <0|1>
//   ERROR <message>     (exit 2)
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "rendezvous/rendezvous.hpp"
#include "support/simple_plan.hpp"

using namespace ddprun;
using namespace std::chrono_literals;

namespace {

void say(const std::string& line) {
  // One write per line so lines from threads never interleave; flushed at once.
  const std::string s = line + "\n";
  (void)!::write(1, s.data(), s.size());
}

test::Plan simple_plan(const std::vector<core::NodeSpec>& nodes) {
  return testplan::simple_plan(nodes, 29500);
}

}  // namespace

int main(int argc, char** argv) {
  rdzv::RendezvousOptions o;
  o.host = "127.0.0.1";
  o.run_id = "loopback";
  o.join_timeout = 60s;
  o.heartbeat_interval = 100ms;
  o.heartbeat_timeout = 1500ms;
  std::string mode = "idle";
  std::string port_file;
  int abort_code = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const std::string v = argv[i + 1];
    if (k == "--port")
      o.port = static_cast<std::uint16_t>(std::stoi(v));
    else if (k == "--node-rank")
      o.node_rank = std::stoi(v);
    else if (k == "--nnodes")
      o.nnodes_min = o.nnodes_max = std::stoi(v);
    else if (k == "--run-id")
      o.run_id = v;
    else if (k == "--mode")
      mode = v;
    else if (k == "--port-file")
      port_file = v;
    else if (k == "--abort-code")
      abort_code = std::stoi(v);
    else if (k == "--join-timeout-ms")
      o.join_timeout = std::chrono::milliseconds(std::stoi(v));
  }
  try {
    rdzv::Rendezvous r(o);
    if (!port_file.empty()) {
      const std::string tmp = port_file + ".tmp";
      std::ofstream(tmp) << r.port() << "\n";
      std::rename(tmp.c_str(), port_file.c_str());
    }
    rdzv::JoinInfo me{o.node_rank, "host-" + std::to_string(o.node_rank), "127.0.0.1", 2, {}};
    const auto joined = r.join(me, testplan::plan_fn(simple_plan));
    test::Plan plan = test::plan_from_json(nlohmann::json::parse(joined.plan));
    plan.node_rank = joined.node_rank;
    say("PLAN " + std::to_string(plan.node_rank) + " " + std::to_string(plan.nnodes) + " " +
        std::to_string(plan.world_size) + " " + std::to_string(plan.master_port));
    // A node that hangs or dies between the plan and its watch: only the master can notice.
    if (mode == "stop-before-watch") ::raise(SIGSTOP);
    if (mode == "exit-before-watch") std::_Exit(4);
    // Like the real agent: the callback only reports; the main thread tears down and returns,
    // so the Rendezvous destructor runs (the master drains before it stops serving).
    std::mutex mu;
    std::condition_variable cv;
    std::optional<core::Failure> aborted;
    // Notified under the lock: once main sees the abort it returns and destroys cv, possibly while
    // an unlocked notify would still be running on the watch thread (TSan found this).
    r.watch([&](const core::Failure& a) {
      std::lock_guard lk(mu);
      aborted = a;
      cv.notify_all();
    });
    say("WATCHING");
    if (mode == "abort") {
      core::Failure cause;
      cause.reason = "worker exited with code " + std::to_string(abort_code);
      cause.host = me.hostname;
      cause.node_rank = plan.node_rank;
      cause.rank = plan.node_rank * 2;
      cause.exit_code = abort_code;
      r.abort(cause);
    } else if (mode == "barrier") {
      const bool ok = r.barrier("exit", 30s);
      say(std::string("BARRIER ") + (ok ? "1" : "0"));
      // The traffic budget (issue 16): what came over the connection, beside the plan itself.
      say("RECEIVED " + std::to_string(r.bytes_received()) + " " + std::to_string(joined.plan.size()));
      return ok ? 0 : 1;
    }
    std::unique_lock lk(mu);
    cv.wait(lk, [&] { return aborted.has_value(); });  // until aborted or killed
    say("ABORT " + ddprun::core::encode_failure(*aborted));
    return aborted->exit_code;
  } catch (const std::exception& e) {
    say(std::string("ERROR ") + e.what());
    return 2;
  }
}
