# shellcheck shell=bash disable=SC2034
# Shared helpers for the tests under a local Slurm cluster (sourced, not run).
#
# Inputs (environment; CTest sets them, see CMakeLists.txt):
#   DDPRUN_SLURM_DIR  state dir of a running cluster (tests/slurm/cluster.sh start N)
#   DDPRUN            the ddprun binary (tests that need it skip when unset)
#   DDPRUN_TRAIN      the ddprun-train binary (trainer tests skip when unset)
#   PYTHON            an interpreter with torch (default /usr/bin/python3; the torch2 copies name the torch 2.x
#                     venv's, and an empty or missing one makes need_torch skip)
# A test prints "FAIL: <what>" and exits 1 on the first failed check, "PASS: <test>" at the end, and exits 77
# (CTest SKIP_RETURN_CODE) when something it needs is missing.

set -uo pipefail

TEST_NAME=$(basename "$0" .sh)
SLURM_TEST_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SOURCE_DIR=$(cd "$SLURM_TEST_DIR/../.." && pwd)
CLUSTER_SH=$SLURM_TEST_DIR/cluster.sh
PYTHON=${PYTHON-/usr/bin/python3}  # set but empty: no venv (need_torch says so)
export PYTHON
WORK=""

# Job ids submitted by this test, kept in a file because submit runs in $(...) subshells.
submitted_jobs() { [[ -n $WORK && -e $WORK/.jobs ]] && cat "$WORK/.jobs"; return 0; }

skip() { echo "SKIP: $TEST_NAME: $*"; exit 77; }

note() { echo "-- $*"; }

# Prints what failed and the context that explains it, then exits 1 (the EXIT trap cleans up).
fail() {
  echo "FAIL: $TEST_NAME: $*" >&2
  local j f
  for j in $(submitted_jobs); do
    echo "---- scontrol show job $j" >&2
    scontrol show job "$j" 2>&1 | grep -E 'JobId|JobState|ExitCode|Restarts|NodeList|Reason' >&2 || true
  done
  if [[ -n $WORK && -d $WORK ]]; then
    for f in "$WORK"/*.out "$WORK"/*.log "$WORK"/*.err; do
      [[ -s $f ]] || continue
      echo "---- $f (last 40 lines)" >&2
      tail -n 40 "$f" >&2
    done
    echo "---- work dir kept: $WORK" >&2
    KEEP_WORK=1
  fi
  exit 1
}

pass() { echo "PASS: $TEST_NAME"; exit 0; }

cleanup() {
  local j
  for j in $(submitted_jobs); do scancel "$j" 2>/dev/null || true; done
  if [[ -n $WORK && -d $WORK && -z ${KEEP_WORK:-} ]]; then rm -rf -- "$WORK"; fi
}

# Client environment for the cluster; a work dir every node can see (all nodes share this machine's /tmp).
setup() {
  [[ $EUID == 0 ]] || skip "the local Slurm cluster needs root"
  [[ -n ${DDPRUN_SLURM_DIR:-} ]] || skip "DDPRUN_SLURM_DIR is not set (start a cluster with tests/slurm/cluster.sh start 5)"
  [[ -e $DDPRUN_SLURM_DIR/etc/slurm.conf ]] || fail "no cluster in $DDPRUN_SLURM_DIR (did the fixture slurm_cluster_start fail?)"
  eval "$("$CLUSTER_SH" env)"
  WORK=$(mktemp -d "/tmp/ddprun-$TEST_NAME.XXXXXX")
  chmod 0755 "$WORK"
  trap cleanup EXIT
  cd "$WORK" || fail "cannot enter $WORK"
}

need_ddprun() {
  [[ -n ${DDPRUN:-} ]] || skip "DDPRUN (path of the ddprun binary) is not set"
  [[ -x $DDPRUN ]] || fail "DDPRUN=$DDPRUN is not an executable (build the ddprun target first)"
}

need_train() {
  [[ -n ${DDPRUN_TRAIN:-} ]] || skip "DDPRUN_TRAIN is not set (ddprun-train needs libtorch-dev)"
  if [[ ! -x $DDPRUN_TRAIN && -n ${DDPRUN_TRAIN_TORCH2:-} ]]; then
    skip "DDPRUN_TRAIN=$DDPRUN_TRAIN (ddprun-train against libtorch 2.x) is not built: scripts/gpu-kit.sh builds it"
  fi
  [[ -x $DDPRUN_TRAIN ]] || fail "DDPRUN_TRAIN=$DDPRUN_TRAIN is not an executable (build ddprun-train first)"
}

need_torch() {
  [[ -n $PYTHON && -x $PYTHON ]] \
    || skip "PYTHON='$PYTHON' is not an interpreter: the torch 2.x venv is not installed (scripts/setup.sh installs it unless DDPRUN_SKIP_TORCH2=1; scripts/torch2.sh says where)"
  "$PYTHON" -c 'import torch.distributed as d; assert d.is_gloo_available()' 2>/dev/null \
    || skip "$PYTHON cannot import torch with gloo (install python3-torch)"
  note "torch $("$PYTHON" -c 'import torch; print(torch.__version__)') from $PYTHON"
}

# sbatch with the job id remembered for cleanup; prints the id.
submit() {
  local id
  id=$(sbatch --parsable "$@") || fail "sbatch $* was refused"
  id=${id%%;*}
  echo "$id" >> "$WORK/.jobs"
  echo "$id"
}

job_field() { # job field
  scontrol show job "$1" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$2=//p" | head -n1
}

# Waits until the job reaches a final state (bounded); prints that state.
wait_job() { # job [timeout_s]
  local j=$1 limit=${2:-120} deadline st
  deadline=$((SECONDS + limit))
  while :; do
    st=$(job_field "$j" JobState)
    case $st in
      COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY|PREEMPTED|BOOT_FAIL|DEADLINE) echo "$st"; return 0 ;;
    esac
    (( SECONDS < deadline )) || { echo "${st:-UNKNOWN}"; return 1; }
    sleep 0.2
  done
}

wait_state() { # job state [timeout_s]: waits until the job is in exactly that state
  local j=$1 want=$2 limit=${3:-60} deadline
  deadline=$((SECONDS + limit))
  until [[ $(job_field "$j" JobState) == "$want" ]]; do
    (( SECONDS < deadline )) || return 1
    sleep 0.2
  done
}

wait_file_grep() { # file pattern [timeout_s]
  local f=$1 pat=$2 limit=${3:-60} deadline
  deadline=$((SECONDS + limit))
  until grep -qE -- "$pat" "$f" 2>/dev/null; do
    (( SECONDS < deadline )) || return 1
    sleep 0.2
  done
}

expect_eq() { # what expected actual
  [[ $2 == "$3" ]] || fail "$1: expected '$2', got '$3'"
  note "ok: $1 = '$3'"
}

expect_job() { # job state exitcode   e.g. expect_job 12 FAILED 3:0
  local st ec
  st=$(job_field "$1" JobState)
  ec=$(job_field "$1" ExitCode)
  [[ $st == "$2" && $ec == "$3" ]] || fail "job $1: expected $2 with ExitCode $3, got $st with ExitCode $ec"
  note "ok: job $1 is $st with ExitCode $ec"
}

# Pids of job $1's step tasks on its node $2 (SLURM_NODEID) and of everything they started (the agent and
# its workers inherit the task's environment); the batch shell and srun are no step tasks.
step_pids_on_node() { # job nodeid
  local f
  while read -r f; do
    grep -qszxF -- "SLURM_NODEID=$2" "$f" && grep -qszE -- '^SLURM_STEP_ID=' "$f" && { f=${f#/proc/}; echo "${f%%/*}"; }
  done < <(grep -lszxF -- "SLURM_JOB_ID=$1" /proc/[0-9]*/environ 2>/dev/null)
  return 0
}

# SIGKILLs job $1's agent and workers on its node $2 all at once, as when the node dies; again until none is left.
kill_node_tasks() { # job nodeid
  local pids
  for _ in $(seq 50); do
    pids=$(step_pids_on_node "$1" "$2")
    [[ -z $pids ]] && return 0
    # shellcheck disable=SC2086  # word-split on purpose: a pid list
    kill -KILL $pids 2>/dev/null
    sleep 0.1
  done
  fail "processes of job $1 on node id $2 survived SIGKILL: $(step_pids_on_node "$1" "$2")"
}
