// The job-wide summary (pure): each agent's record, who prints what, node 0's table and the one
// line of the other nodes.
#include <catch2/catch.hpp>

#include <csignal>
#include <sstream>

#include "job_summary.hpp"

using namespace ddprun::agent;
using namespace std::chrono_literals;

namespace {

WorkerExit exit_of(int rank, int code, bool stopped = false, int sig = 0, int ms = 500) {
  WorkerExit e;
  e.rank = rank;
  e.local_rank = rank % 2;
  e.pid = 100 + rank;
  e.status = {code, sig};
  e.stopped_by_ddprun = stopped;
  e.duration = std::chrono::milliseconds(ms);
  e.end_time = ddprun::core::FailureTime(std::chrono::microseconds(1000 * ms));
  return e;
}

Failure cause(int node, int rank, int code, const std::string& host) {
  Failure f;
  f.node_rank = node;
  f.rank = rank;
  f.host = host;
  f.pid = 100 + rank;
  f.exit_code = code;
  f.reason = "exited with code " + std::to_string(code);
  return f;
}

// Node `node` of a failed run whose root cause is rank 3 on node 1 (host-b).
RunResult failed_node(int node) {
  RunResult r;
  r.node_rank = node;
  r.host = std::string("host-") + static_cast<char>('a' + node);
  r.exit_code = 7;
  r.root_cause = cause(1, 3, 7, "host-b");
  r.exits = {exit_of(2 * node, 143, true, 15, 510), exit_of(2 * node + 1, 143, true, 15, 520)};
  if (node == 1) r.exits[1] = exit_of(3, 7, false, 0, 500);
  return r;
}

RunResult ok_node(int node) {
  RunResult r;
  r.node_rank = node;
  r.host = "h" + std::to_string(node);
  r.success = true;
  r.exits = {exit_of(2 * node, 0), exit_of(2 * node + 1, 0)};
  return r;
}

PeerRecord peer(const RunResult& r) {
  return {r.node_rank, r.host, encode_node_record(node_record(r))};
}

}  // namespace

TEST_CASE("node record: what one node's run ended with, and its codec", "[summary]") {
  const NodeRecord ok = node_record(ok_node(2));
  CHECK(ok.success);
  CHECK(ok.first_rank == 4);
  CHECK(ok.last_rank == 5);
  CHECK(ok.workers == 2);
  CHECK(ok.failed_rank == -1);

  const NodeRecord root = node_record(failed_node(1));
  CHECK_FALSE(root.success);
  CHECK(root.failed_rank == 3);
  CHECK(root.failed_exit == 7);
  CHECK(root.stopped == 1);
  CHECK(root.duration_s == Approx(0.51));

  RunResult sig = failed_node(0);
  sig.exits[0] = exit_of(0, 139, false, 11);  // a worker that died by itself of SIGSEGV
  const NodeRecord segv = node_record(sig);
  CHECK(segv.failed_rank == 0);
  CHECK(segv.failed_signal == 11);

  RunResult spawn;
  spawn.spawn_failed = true;
  spawn.exit_code = 127;
  spawn.root_cause = cause(0, 0, 127, "host-a");
  const NodeRecord cannot = node_record(spawn);
  CHECK(cannot.spawn_failed);
  CHECK(cannot.failed_rank == 0);
  CHECK(cannot.first_rank == -1);

  RunResult stopped = failed_node(2);  // stopped by SIGTERM: the job's root cause
  stopped.root_cause = cause(2, -1, 143, "host-c");
  stopped.root_cause->signal = 15;
  stopped.stopped_by_signal = true;
  stopped.signal = 15;
  CHECK(node_record(stopped).agent_signal == 15);
  // The same TERM once a worker had failed (srun --kill-on-bad-exit, a cancel during the teardown): the
  // first cause is reported, the node's row says "stopped *".
  RunResult late = failed_node(2);
  late.stopped_by_signal = true;
  late.signal = 15;
  CHECK(node_record(late).agent_signal == 0);

  for (const auto& n : {ok, root, segv, cannot}) {
    const auto back = decode_node_record(encode_node_record(n));
    REQUIRE(back);
    CHECK(encode_node_record(*back) == encode_node_record(n));
  }
  CHECK(encode_node_record(root).size() < 400);  // bounded: no stderr, no per-worker list
  CHECK_FALSE(decode_node_record("not json"));
  CHECK_FALSE(decode_node_record(R"({"node_rank":1})"));
  // A record of an older ddprun, without the hang's fields, still reads.
  auto older = nlohmann::json::parse(encode_node_record(node_record(ok_node(1))));
  older.erase("hung");
  older.erase("root_stack");
  older.erase("root_stack_python");
  const auto read = decode_node_record(older.dump());
  REQUIRE(read);
  CHECK_FALSE(read->hung);
  CHECK(read->success);
  // A hung rank's stack with bytes that are not UTF-8 reaches node 0 as it was (shown as \xNN there).
  NodeRecord hung = node_record(ok_node(1));
  hung.root_stack = "File \"/data/caf\xe9.py\", line 3 in stuck\n";
  const auto stack = decode_node_record(encode_node_record(hung));
  REQUIRE(stack);
  CHECK(stack->root_stack == hung.root_stack);
}

TEST_CASE("who prints what at the end of a run", "[summary]") {
  CHECK(report_role(1, 0) == ReportRole::single);
  CHECK(report_role(3, 0) == ReportRole::node0);
  CHECK(report_role(3, 2) == ReportRole::member);
  struct Row {
    ReportRole role;
    bool verbose, quiet, json, success, published;
    bool report, brief, node_table, member_line, gather;
  };
  using R = ReportRole;
  const std::vector<Row> table = {
      // role       verb   quiet  json   ok     pub  | report brief  table  line   gather
      {R::single, false, false, false, false, false, true, false, true, false, false},
      {R::single, false, true, false, false, false, true, true, false, false, false},
      {R::single, false, true, false, true, false, false, true, false, false, false},
      {R::node0, false, false, false, false, true, true, false, false, false, true},
      {R::node0, true, false, false, false, true, true, false, true, false, true},
      {R::node0, false, true, false, false, true, true, true, false, false, false},
      {R::node0, false, true, true, true, true, false, true, false, false, true},  // json: the event
      {R::node0, false, false, false, true, true, false, false, false, false, true},
      {R::member, false, false, false, false, true, false, false, false, true, false},
      {R::member, false, false, false, true, true, false, false, false, true, false},
      {R::member, false, true, false, true, true, false, true, false, false, false},    // quiet success
      {R::member, false, true, false, false, true, false, true, false, true, false},    // never hides
      {R::member, true, false, false, false, true, true, false, true, false, false},    // --verbose
      {R::member, false, false, false, false, false, true, false, true, false, false},  // node 0 gone
  };
  for (std::size_t i = 0; i < table.size(); ++i) {
    const auto& t = table[i];
    INFO("row " << i);
    RunResult r = t.success ? ok_node(1) : failed_node(1);
    const ReportPlan p = plan_report(t.role, t.verbose, t.quiet, t.json, r, t.published);
    CHECK(p.report == t.report);
    if (t.report) CHECK((p.length == ReportLength::brief) == t.brief);
    CHECK(p.node_table == t.node_table);
    CHECK(p.member_line == t.member_line);
    CHECK(p.gather == t.gather);
  }
  // A command that could not start printed its error line: nothing more on that node.
  RunResult spawn = failed_node(1);
  spawn.spawn_failed = true;
  const ReportPlan p = plan_report(R::member, false, false, false, spawn, true);
  CHECK_FALSE(p.report);
  CHECK_FALSE(p.member_line);
  CHECK_FALSE(p.node_table);
  // Node 0 does not wait for a node whose lost agent is the root cause.
  Failure lost = cause(2, -1, 1, "host-c");
  CHECK(lost_node(lost) == 2);
  lost.signal = 15;  // an agent stopped by a signal still reports
  CHECK_FALSE(lost_node(lost));
  CHECK_FALSE(lost_node(cause(2, 4, 1, "host-c")));
  CHECK_FALSE(lost_node(std::nullopt));
  CHECK(gather_timeout(true, 10s) == 5s);
  CHECK(gather_timeout(false, 10s) == 13s);  // the others' grace and output drain
}

TEST_CASE("the one line of a node other than 0", "[summary]") {
  CHECK(format_member_line(failed_node(2), std::nullopt, false) ==
        "ddprun: node 2 (host-c): failed, exit 7, root cause rank 3 on host-b; full report on node 0\n");
  CHECK(format_member_line(ok_node(1), std::nullopt, false) ==
        "ddprun: node 1 (h1): success, ranks 2-3 exited 0; job summary on node 0\n");
  RunResult lost = failed_node(2);
  lost.exit_code = 1;
  lost.root_cause->rank = -1;
  lost.root_cause->reason = "lost the agent on host-b (node rank 1): connection closed";
  CHECK(format_member_line(lost, std::nullopt, false) ==
        "ddprun: node 2 (host-c): failed, exit 1, root cause: lost the agent on host-b (node rank 1): "
        "connection closed; full report on node 0\n");
  RunResult task = ok_node(1);
  task.exits.resize(1);
  CHECK(format_member_line(task, 2, false) ==
        "ddprun: rank 2 on node 1 (h1): success, rank 2 exited 0; job summary on node 0\n");
  CHECK_THAT(format_member_line(failed_node(2), std::nullopt, true), Catch::Contains("\x1b["));
  // A stop on request (ranks exiting after a checkpoint signal) is not called a failure.
  RunResult stopped = failed_node(2);
  stopped.exit_code = 140;
  stopped.root_cause->after_signal = SIGUSR2;
  CHECK(
      format_member_line(stopped, std::nullopt, false) ==
      "ddprun: node 2 (host-c): stopped after SIGUSR2 with exit code 140, root cause rank 3 on host-b; full "
      "report on node 0\n");
}

TEST_CASE("job summary: one row per node, the root cause marked", "[summary]") {
  const std::vector<PeerRecord> peers = {peer(failed_node(0)), peer(failed_node(1)), peer(failed_node(2))};
  CHECK(format_job_summary(failed_node(0), peers, false) ==
        "ddprun: job summary (attempt 0): FAILED, exit code 7, root cause rank 3 on host-b (exited with code "
        "7)\n"
        "   node  host    ranks  result                         duration\n"
        "      0  host-a  0-1    stopped *                         0.52s\n"
        "      1  host-b  2-3    rank 3: exit 7 <- root cause      0.51s\n"
        "      2  host-c  4-5    stopped *                         0.52s\n"
        "  * stopped by ddprun during teardown\n");
  const std::vector<PeerRecord> ok = {peer(ok_node(0)), peer(ok_node(1))};
  CHECK(format_job_summary(ok_node(0), ok, false) ==
        "ddprun: job summary (attempt 0): success, 4 workers on 2 nodes exited 0\n"
        "   node  host  ranks  result   duration\n"
        "      0  h0    0-1    ok          0.50s\n"
        "      1  h1    2-3    ok          0.50s\n");
}

TEST_CASE("job summary of a success counts the workers of the nodes that reported, the others apart",
          "[summary]") {
  // Node 2's record did not come in time: its workers are not counted, and the header says why.
  const std::vector<PeerRecord> late = {peer(ok_node(0)), peer(ok_node(1)), {2, "h2", {}}};
  CHECK_THAT(
      format_job_summary(ok_node(0), late, false),
      Catch::StartsWith("ddprun: job summary (attempt 0): success, 4 workers on 2 nodes exited 0, 1 more "
                        "node did not report\n"));
  // A node whose record counts no worker.
  RunResult idle = ok_node(2);
  idle.exits.clear();
  const std::vector<PeerRecord> with_idle = {peer(ok_node(0)), peer(idle)};
  CHECK_THAT(
      format_job_summary(ok_node(0), with_idle, false),
      Catch::StartsWith("ddprun: job summary (attempt 0): success, 2 workers on 1 node exited 0, 1 more "
                        "node ran no worker\n"));
}

TEST_CASE("job summary: a missing or lost node, a stopped agent", "[summary]") {
  RunResult node0 = failed_node(0);
  node0.exit_code = 1;
  node0.root_cause = cause(2, -1, 1, "host-c");
  node0.root_cause->reason = "lost the agent on host-c (node rank 2): connection closed";
  const std::vector<PeerRecord> peers = {peer(failed_node(0)), {1, "host-b", "garbage"}, {2, "host-c", {}}};
  const std::string t = format_job_summary(node0, peers, false);
  CHECK_THAT(t, Catch::Contains("FAILED, exit code 1, root cause: lost the agent on host-c (node rank 2)"));
  CHECK_THAT(t, Catch::Contains("      1  host-b  ?      unreadable report "));
  CHECK_THAT(t, Catch::Contains("      2  host-c  ?      no report <- root cause "));
  CHECK_THAT(t, Catch::Contains("  no report: that agent was lost, hung, or still stopping"));

  RunResult by_signal = failed_node(0);
  by_signal.exit_code = 143;
  by_signal.root_cause = cause(1, -1, 143, "host-b");
  by_signal.root_cause->signal = 15;
  RunResult stopped = failed_node(1);
  stopped.exits[1] = exit_of(3, 143, true, 15);
  stopped.root_cause = by_signal.root_cause;  // every node's run names the job's root cause
  stopped.stopped_by_signal = true;
  stopped.signal = 15;
  const std::string s = format_job_summary(by_signal, {peer(failed_node(0)), peer(stopped)}, false);
  CHECK_THAT(s, Catch::Contains("ddprun got SIGTERM <- root cause"));
}

TEST_CASE("job summary: a node whose ranks exited 0 before another node failed says so", "[summary]") {
  RunResult early = ok_node(0);
  early.success = false;  // the job failed later, on node 1
  early.exit_code = 7;
  early.root_cause = cause(1, 3, 7, "host-b");
  const std::string t = format_job_summary(early, {peer(early), peer(failed_node(1))}, false);
  CHECK_THAT(t, Catch::Contains("FAILED, exit code 7, root cause rank 3 on host-b"));
  CHECK_THAT(t, Catch::Contains("      0  h0      0-1    exited 0 "));
}

TEST_CASE("job summary after a checkpoint signal: the ranks stopped on request, not a failure", "[summary]") {
  RunResult node0 = failed_node(0);
  node0.exit_code = 140;
  node0.root_cause = cause(1, 3, 140, "host-b");
  node0.root_cause->after_signal = 10;
  node0.root_cause->reason = "exited with code 140";
  const std::string t = format_job_summary(node0, {peer(failed_node(0)), peer(failed_node(1))}, false);
  CHECK_THAT(t,
             Catch::StartsWith("ddprun: job summary (attempt 0): stopped after SIGUSR1 with exit code 140, "
                               "root cause rank 3 on host-b (exited with code 140)\n"));
  CHECK_THAT(t, !Catch::Contains("FAILED"));
}

TEST_CASE("job summary of a big job stays short: failures first, the rest counted", "[summary]") {
  std::vector<PeerRecord> peers;
  for (int n = 0; n < 40; ++n) peers.push_back(peer(n == 1 ? failed_node(1) : failed_node(n)));
  peers[30] = {30, "host-x", {}};  // one never reported
  const std::string t = format_job_summary(failed_node(0), peers, false, 16);
  CHECK(std::count(t.begin(), t.end(), '\n') == 1 + 1 + 16 + 3);  // header, columns, rows, footer
  CHECK_THAT(t, Catch::Contains("rank 3: exit 7 <- root cause"));
  CHECK_THAT(t, Catch::Contains("     30  host-x"));  // shown although past the first rows
  CHECK_THAT(t, Catch::Contains("  ... 24 more nodes: 24 stopped by ddprun\n"));

  std::vector<PeerRecord> ok;
  for (int n = 0; n < 21; ++n) ok.push_back(peer(ok_node(n)));
  const std::string s = format_job_summary(ok_node(0), ok, false, 16);
  CHECK_THAT(s, Catch::Contains("success, 42 workers on 21 nodes exited 0") &&
                    Catch::Contains("  ... 5 more nodes: 5 ok\n"));
}

TEST_CASE("job summary of a big job: the root cause's row comes first, then the other failures",
          "[summary]") {
  RunResult node0 = failed_node(0);
  node0.root_cause = cause(30, 61, 7, "h30");
  std::vector<PeerRecord> peers;
  for (int n = 0; n < 40; ++n) {
    RunResult r = failed_node(n);  // node 1's rank 3 failed by itself too: another row that explains
    r.host = "h" + std::to_string(n);
    r.root_cause = node0.root_cause;
    if (n == 30) r.exits[1] = exit_of(61, 7, false, 0, 500);
    peers.push_back(peer(r));
  }
  const std::string t = format_job_summary(node0, peers, false, 16);
  std::vector<std::string> lines;
  std::istringstream in(t);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  REQUIRE(lines.size() > 4);
  CHECK_THAT(lines[2],
             Catch::StartsWith("     30  h30 ") && Catch::Contains("rank 61: exit 7 <- root cause"));
  CHECK_THAT(lines[3], Catch::StartsWith("      1  h1 ") && Catch::Contains("rank 3: exit 7"));
  CHECK_THAT(lines[4], Catch::StartsWith("      0  h0 "));
}

TEST_CASE("after a hang the hung node's row is the root cause, and its stack reaches node 0", "[summary]") {
  Failure hang = cause(1, 3, 124, "host-b");
  hang.hang = true;
  hang.silent = {{3, 2.5}};
  hang.reason = "hung: no output or heartbeat for --hang-timeout 2 s; silent rank 3 (2.5 s)";
  RunResult hung_node = failed_node(1);
  hung_node.exit_code = 124;
  hung_node.root_cause = hang;
  hung_node.exits[1] = exit_of(3, 134, true, SIGABRT);  // our SIGABRT for faulthandler's dump
  hung_node.hung = {
      {3, 1, 103, 2500ms, true, "Thread 0x1 (most recent call first):\n  File \"t.py\", line 9 in stuck"}};
  RunResult node0 = failed_node(0);
  node0.exit_code = 124;
  node0.root_cause = hang;
  const std::vector<PeerRecord> peers = {peer(node0), peer(hung_node)};
  const std::string t = format_job_summary(node0, peers, false);
  CHECK_THAT(t, Catch::Contains("HUNG, exit code 124, root cause rank 3 on host-b"));
  CHECK_THAT(t, Catch::Contains("      1  host-b  2-3    rank 3: hung <- root cause"));
  const auto stack = root_stack_from(node0, peers);
  REQUIRE(stack);
  CHECK(stack->rank == 3);
  CHECK(stack->python);
  CHECK(stack->silent == 2500ms);
  CHECK_THAT(stack->stack, Catch::Contains("line 9 in stuck"));
  node0.root_stack = stack;
  const std::string report = format_report(node0);
  CHECK_THAT(report, Catch::Contains("  stack of rank 3 on host-b (node 1), Python stack of every thread "
                                     "(faulthandler):\n    | Thread 0x1 (most recent call first):\n"));
  CHECK(report_to_json(node0).at("root_cause").at("stack") == hung_node.hung[0].stack);
  // The node that has it prints it among its own stacks: node 0 only takes another node's.
  CHECK_FALSE(root_stack_from(hung_node, peers));
}

TEST_CASE("job summary in per-task mode counts tasks and the nodes they ran on", "[summary]") {
  std::vector<PeerRecord> tasks;
  for (int t = 0; t < 4; ++t) {
    RunResult r = ok_node(t / 2);
    r.exits = {exit_of(t, 0)};
    tasks.push_back({t, r.host, encode_node_record(node_record(r))});
  }
  const std::string s = format_job_summary(ok_node(0), tasks, false, 16, true);
  CHECK_THAT(s, Catch::StartsWith("ddprun: job summary (attempt 0): success, 4 tasks on 2 nodes exited 0\n"));
  CHECK_THAT(format_job_summary(ok_node(0), tasks, false, 2, true),
             Catch::Contains("  ... 2 more tasks: 2 ok\n"));
}

TEST_CASE("job_summary event: the records, and which nodes did not report", "[summary]") {
  const std::vector<PeerRecord> peers = {peer(failed_node(0)), peer(failed_node(1)), {2, "host-c", {}}};
  const auto j = job_summary_json(failed_node(0), peers);
  CHECK(j.at("exit_code") == 7);
  CHECK(j.at("success") == false);
  CHECK(j.at("nodes_reported") == 2);
  CHECK(j.at("root_cause").at("rank") == 3);
  REQUIRE(j.at("nodes").size() == 3);
  CHECK(j.at("nodes").at(1).at("failed_rank") == 3);
  CHECK(j.at("nodes").at(1).at("reported") == true);
  CHECK(j.at("nodes").at(2) == nlohmann::json{{"node_rank", 2}, {"host", "host-c"}, {"reported", false}});
}
