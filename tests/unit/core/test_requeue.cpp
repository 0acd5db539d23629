// --requeue-on / --max-requeues: the codes, the verdict and the job that scontrol requeue names.
#include <catch2/catch.hpp>

#include "core/error.hpp"
#include "core/requeue.hpp"

using namespace ddprun::core;

TEST_CASE("parse_exit_codes: single codes and ranges, 0-255") {
  CHECK(parse_exit_codes("140") == std::set<int>{140});
  CHECK(parse_exit_codes("140,143") == std::set<int>{140, 143});
  CHECK(parse_exit_codes("200-203,1") == std::set<int>{1, 200, 201, 202, 203});
  CHECK(parse_exit_codes("0-255").size() == 256);
  CHECK(parse_exit_codes("7-7") == std::set<int>{7});
  for (const char* bad : {"", ",", "140,", ",140", "256", "-1", "a", "1-", "-5", "5-3", "1.5", " 140", "140 ",
                          "1--2", "0x10", "140;143"}) {
    INFO(bad);
    CHECK_THROWS_AS(parse_exit_codes(bad), Error);
  }
  try {
    parse_exit_codes("140,300");
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.exit_code() == kUsageExit);
    CHECK(std::string(e.what()) ==
          "--requeue-on '140,300': '300' is not an exit code 0-255 or a range LO-HI; give e.g. --requeue-on "
          "140,143,200-210");
  }
}

TEST_CASE("format_exit_codes: the codes back as text, as the dry run shows them") {
  struct Row {
    std::set<int> codes;
    std::string text;
  };
  for (const Row& r : std::vector<Row>{{{}, ""},
                                       {{143}, "143"},
                                       {{140, 143}, "140,143"},
                                       {{140, 141}, "140,141"},
                                       {{140, 143, 200, 201, 202, 210}, "140,143,200-202,210"},
                                       {{0, 1, 2, 3, 255}, "0-3,255"}}) {
    CHECK(format_exit_codes(r.codes) == r.text);
    if (!r.codes.empty()) CHECK(parse_exit_codes(r.text) == r.codes);
  }
  CHECK(format_exit_codes(parse_exit_codes("0-255")) == "0-255");
}

TEST_CASE("requeue_verdict: a listed code requeues while SLURM_RESTART_COUNT is below --max-requeues") {
  const std::set<int> codes{140, 143};
  struct Row {
    int code, restarts, max;
    RequeueVerdict v;
  };
  const std::vector<Row> rows{
      {140, 0, 1, RequeueVerdict::requeue},      {143, 1, 2, RequeueVerdict::requeue},
      {140, 1, 1, RequeueVerdict::budget_spent}, {140, 5, 2, RequeueVerdict::budget_spent},
      {140, 0, 0, RequeueVerdict::budget_spent}, {123, 0, 5, RequeueVerdict::not_listed},
      {0, 0, 5, RequeueVerdict::not_listed},     {1, 9, 1, RequeueVerdict::not_listed},
  };
  for (const auto& r : rows) {
    CAPTURE(r.code, r.restarts, r.max);
    CHECK(requeue_verdict(r.code, codes, r.restarts, r.max) == r.v);
  }
  CHECK(requeue_verdict(0, {0}, 0, 1) == RequeueVerdict::requeue);  // success too, when listed
}

TEST_CASE("requeue_verdict: a cancelled job is never requeued, a time limit or a preemption is") {
  const std::set<int> codes{140, 143};
  struct Row {
    int code;
    JobEnd end;
    RequeueVerdict v;
  };
  const std::vector<Row> rows{
      {143, JobEnd::cancelled, RequeueVerdict::cancelled},   // scancel: the user's word is final
      {140, JobEnd::cancelled, RequeueVerdict::cancelled},   // ... whatever the code
      {123, JobEnd::cancelled, RequeueVerdict::not_listed},  // a code not listed says nothing of it
      {143, JobEnd::time_limit, RequeueVerdict::requeue},    // --requeue-on 143 for time limits
      {143, JobEnd::preempted, RequeueVerdict::requeue},     // and for preemptions
      {143, JobEnd::running, RequeueVerdict::requeue},       // a signal only (scancel --signal)
      {143, JobEnd::other, RequeueVerdict::requeue},         // a node failure
      {143, JobEnd::unknown, RequeueVerdict::requeue},       // scontrol did not answer: the code decides
  };
  for (const auto& r : rows) {
    CAPTURE(r.code, to_string(r.end));
    CHECK(requeue_verdict(r.code, codes, 0, 2, r.end) == r.v);
  }
  // No requeue left and cancelled: the cancel is what the line says.
  CHECK(requeue_verdict(143, codes, 2, 2, JobEnd::cancelled) == RequeueVerdict::cancelled);
}

TEST_CASE("job_end_from_scontrol: what ended the job, from scontrol show job -o (Slurm 22.05)") {
  // Lines as the local cluster printed them from a batch script's TERM trap, cut to the fields read.
  const std::string cancelled =
      "JobId=1 JobName=job.sh UserId=root(0) JobState=COMPLETING Reason=None Dependency=(null) Requeue=1 "
      "Restarts=0 BatchFlag=1 ExitCode=0:0 RunTime=00:00:02";
  const std::string timed_out =
      "JobId=3 JobName=job.sh JobState=COMPLETING Reason=TimeLimit Dependency=(null) TimeLimit=00:01:00";
  const std::string signalled = "JobId=2 JobName=job.sh JobState=RUNNING Reason=None Dependency=(null)";
  // Where preemption is configured, scontrol adds PreemptEligibleTime and PreemptTime.
  const std::string preempted =
      "JobId=4 JobState=COMPLETING Reason=None PreemptEligibleTime=2026-11-29T08:40:37 "
      "PreemptTime=2026-11-29T08:41:10 SuspendTime=None";
  const std::string preemptable_cancelled =
      "JobId=5 JobState=COMPLETING Reason=None PreemptEligibleTime=2026-11-29T08:40:37 PreemptTime=None";
  const std::string in_grace =
      "JobId=6 JobState=RUNNING Reason=None PreemptEligibleTime=2026-11-29T08:40:37 "
      "PreemptTime=2026-11-29T08:41:10";
  CHECK(job_end_from_scontrol(cancelled) == JobEnd::cancelled);
  CHECK(job_end_from_scontrol(cancelled + "\n") == JobEnd::cancelled);
  CHECK(job_end_from_scontrol(timed_out) == JobEnd::time_limit);
  CHECK(job_end_from_scontrol(signalled) == JobEnd::running);
  CHECK(job_end_from_scontrol(preempted) == JobEnd::preempted);
  CHECK(job_end_from_scontrol(preemptable_cancelled) == JobEnd::cancelled);
  CHECK(job_end_from_scontrol(in_grace) == JobEnd::preempted);
  CHECK(job_end_from_scontrol("JobId=7 JobState=COMPLETING Reason=NodeDown") == JobEnd::other);
  CHECK(job_end_from_scontrol("JobId=8 JobState=CANCELLED Reason=None") == JobEnd::cancelled);
  CHECK(job_end_from_scontrol("JobId=9 JobState=TIMEOUT Reason=TimeLimit") == JobEnd::time_limit);
  CHECK(job_end_from_scontrol("slurm_load_jobs error: Invalid job id specified") == JobEnd::unknown);
  CHECK(job_end_from_scontrol("") == JobEnd::unknown);
  // A key is matched whole: StateReason=TimeLimit is not Reason.
  CHECK(job_end_from_scontrol("JobState=COMPLETING StateReason=TimeLimit Reason=None") == JobEnd::cancelled);
}

TEST_CASE("requeue_target: an array task as ARRAYJOB_TASK, else the job id") {
  CHECK(requeue_target({{"SLURM_JOB_ID", "42"}}) == "42");
  CHECK(requeue_target({{"SLURM_JOBID", "43"}}) == "43");
  CHECK(requeue_target(
            {{"SLURM_JOB_ID", "45"}, {"SLURM_ARRAY_JOB_ID", "44"}, {"SLURM_ARRAY_TASK_ID", "3"}}) == "44_3");
  CHECK(requeue_target({{"SLURM_JOB_ID", "45"}, {"SLURM_ARRAY_JOB_ID", "44"}}) == "45");
  CHECK(requeue_target({}) == std::nullopt);
}
