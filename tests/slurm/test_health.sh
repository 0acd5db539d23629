#!/usr/bin/env bash
# --health-check under Slurm (docs/slurm.md, "Health checks"): every node's agent runs the check before it
# joins; here it fails on one named node only.
#  1. fail-fast, srun ddprun on 3 nodes: every task ends with 125 and the line naming the node and the
#     check's output, no worker starts, nobody waits for the rendezvous timeout;
#  2. fail-fast, a batch script's plain ddprun (self-launch): the same, and the job ends FAILED 125:0;
#  3. elastic, --nnodes 2:3 --max-restarts 1 on 3 nodes: the job runs on the 2 others and ends COMPLETED 0:0;
#     node rank 0 names the node left out;
#  4. elastic with a standby, --nnodes 2 --max-restarts 1 on 3 nodes: the standby takes the node's place;
#  5. per-task mode, srun --ntasks-per-node=2 ddprun on 2 nodes: local task 0 runs its node's check, and every
#     task of the step ends at once with 125 and the line, no worker started;
#  6. elastic, but the failing node is node rank 0, whose store the others need: all end at once with 125;
#  7. per-task mode with --max-restarts 1: the check runs again before the restart (once per node), fails
#     there on node2, and every task ends at once with 125.
source "$(dirname "$0")/lib.sh"
setup
need_ddprun
nodes=$(sinfo -h -N -o %N | sort -u | wc -l)
(( nodes >= 3 )) || fail "needs a cluster of 3 nodes, this one has $nodes (tests/slurm/cluster.sh start 5)"

# The check fails on host $BAD only, with two lines of output; every worker leaves a file naming itself.
check='test "$(hostname)" != "$BAD" || { echo "GPU 3: uncorrectable ECC errors"; echo "7 of 8 GPUs usable"; exit 3; }'
worker="echo \"\$(hostname) \$RANK \$WORLD_SIZE\" > $WORK/started.\$RANK"
# The tail as ddprun reports it: the output's lines joined by " | ".
tail_re='exited with code 3; output: GPU 3: uncorrectable ECC errors \| 7 of 8 GPUs usable'

no_worker_started() { # case
  if compgen -G "$WORK/started.*" > /dev/null; then fail "$1: a worker started: $(cat "$WORK"/started.*)"; fi
  note "ok: $1: no worker started"
}

no_wait() { # case file
  if grep -qE 'timed out|cannot reach' "$2"; then fail "$1: an agent waited for the rendezvous"; fi
}

note "1. srun -N3 ddprun, fail-fast: node2's check fails"
BAD=node2 timeout 200 srun -N3 -w 'node[1-3]' --ntasks-per-node=1 -l "$DDPRUN" --rdzv-timeout 120 \
  --nproc-per-node 1 --health-check "$check" -- sh -c "$worker" > srun.out 2> srun.err
rc=$?
sed 's/^/   /' srun.err
expect_eq "srun exit code" 125 "$rc"
grep -qE "^1: ddprun: error: node 1 \(node2\) failed its health check \(--health-check\): $tail_re" srun.err \
  || fail "srun: node2 did not report its failed check"
for t in 0 2; do
  grep -qE "^$t: ddprun: error: node2 \(node rank 1\) could not start: node 1 \(node2\) failed its health check.*$tail_re" \
    srun.err || fail "srun: task $t does not name node2 and the check's output"
done
for t in 0 1 2; do
  grep -qE "task $t: Exited with exit code 125" srun.err || fail "srun: task $t did not exit 125"
done
no_wait srun srun.err
no_worker_started srun

note "2. sbatch -N3, plain ddprun (self-launch), fail-fast: node3's check fails"
cat > ff.sh <<EOS
#!/bin/bash
export BAD=node3
"$DDPRUN" --rdzv-timeout 120 --nproc-per-node 1 --health-check '$check' -- sh -c '$worker'
EOS
j=$(submit -N3 -w 'node[1-3]' -o ff.out ff.sh)
st=$(wait_job "$j" 200) || fail "job $j did not finish (state $st)"
sed 's/^/   /' ff.out
expect_job "$j" FAILED 125:0
grep -qE "^ddprun: error: node 2 \(node3\) failed its health check \(--health-check\): $tail_re" ff.out \
  || fail "batch: node3 did not report its failed check"
[[ $(grep -cE "^ddprun: error: node3 \(node rank 2\) could not start: .*$tail_re" ff.out) == 2 ]] \
  || fail "batch: the two other nodes do not both name node3 and the check's output"
no_wait batch ff.out
no_worker_started batch

# Elastic: a short last call, so that the round closes soon without the node that never comes.
elastic_case() { # name --nnodes bad expected-hosts-of-ranks-0-and-1
  local name=$1 nn=$2 bad=$3 want=$4 j st got
  rm -f "$WORK"/started.*
  cat > "$name.sh" <<EOS
#!/bin/bash
#SBATCH --no-kill
export BAD=$bad
"$DDPRUN" --nnodes $nn --max-restarts 1 --rdzv-last-call 5 --rdzv-timeout 120 --nproc-per-node 1 \
  --health-check '$check' -- sh -c '$worker'
EOS
  j=$(submit -N3 -w 'node[1-3]' -o "$name.out" "$name.sh")
  st=$(wait_job "$j" 200) || fail "$name: job $j did not finish (state $st)"
  sed 's/^/   /' "$name.out"
  expect_job "$j" COMPLETED 0:0
  grep -qE "^ddprun: error: node [0-9] \($bad\) failed its health check \(--health-check\): $tail_re" "$name.out" \
    || fail "$name: $bad did not report its failed check"
  grep -qE "^ddprun: warning: the first round closed without 1 of the step's 3 nodes: $bad \(node rank [0-9]\) \(did not join" \
    "$name.out" || fail "$name: node rank 0 does not name $bad as left out"
  if grep -q 'could not start' "$name.out"; then fail "$name: an elastic job ended other nodes"; fi
  got=$(cat "$WORK/started.0" "$WORK/started.1" 2> /dev/null | tr '\n' ' ')
  expect_eq "$name: the workers (host rank world)" "$want" "${got% }"
  [[ ! -e $WORK/started.2 ]] || fail "$name: a third worker ran"
}

note "3. sbatch -N3, --nnodes 2:3 --max-restarts 1: node2's check fails, the job runs on node1 and node3"
elastic_case shrink 2:3 node2 "node1 0 2 node3 1 2"
note "4. sbatch -N3, --nnodes 2 --max-restarts 1 (node3 a standby): node2's check fails, node3 takes its place"
elastic_case spare 2 node2 "node1 0 2 node3 1 2"

rm -f "$WORK"/started.*
note "5. srun -N2 --ntasks-per-node=2 ddprun (per-task mode): node2's check fails"
BAD=node2 timeout 200 srun -N2 -w 'node[1-2]' --ntasks-per-node=2 -l "$DDPRUN" --rdzv-timeout 120 \
  --health-check "$check" -- sh -c "$worker" > per_task.out 2> per_task.err
rc=$?
sed 's/^/   /' per_task.err
expect_eq "per-task srun exit code" 125 "$rc"
grep -qE "^2: ddprun: error: node 1 \(node2\) failed its health check \(--health-check\): $tail_re" per_task.err \
  || fail "per-task: node2's task 0 did not report its failed check"
for t in 0 1 3; do
  grep -qE "^$t: ddprun: error: node2 \(node rank 1\) could not start: node 1 \(node2\) failed its health check.*$tail_re" \
    per_task.err || fail "per-task: task $t does not name node2 and the check's output"
done
# srun folds tasks that exit together into one line ("tasks 0-1"), and writes one line a task otherwise.
for t in 0 1 2 3; do
  node=node$((t / 2 + 1))
  grep -qE "$node: (task $t|tasks $((t / 2 * 2))-$((t / 2 * 2 + 1))): Exited with exit code 125" per_task.err \
    || fail "per-task: task $t on $node did not exit 125"
done
no_wait per-task per_task.err
no_worker_started per-task

note "6. srun -N3 ddprun --nnodes 2:3 --max-restarts 1: node1 (node rank 0, the store's host) fails its check"
BAD=node1 timeout 200 srun -N3 -w 'node[1-3]' -l "$DDPRUN" --nnodes 2:3 --max-restarts 1 --rdzv-timeout 120 \
  --nproc-per-node 1 --health-check "$check" -- sh -c "$worker" > master.out 2> master.err
rc=$?
sed 's/^/   /' master.err
expect_eq "srun exit code (node rank 0's check failed)" 125 "$rc"
for t in 1 2; do
  grep -qE "^$t: ddprun: error: node1 \(node rank 0\) could not start: node 0 \(node1\) failed its health check.*$tail_re" \
    master.err || fail "master: task $t does not name node1 and the check's output"
done
no_wait master master.err
no_worker_started master

note "7. srun -N2 --ntasks-per-node=2 ddprun --max-restarts 1 (per-task): attempt 0's workers fail, node2's check fails at the restart"
# The check counts its runs per node (checks.HOST) and fails from the second on BAD only.
counting='f=$DIR/checks.$(hostname); n=$(cat "$f" 2>/dev/null || echo 0); echo $((n + 1)) > "$f"; test "$n" = 0 || { '"$check"'; }'
failing="touch $WORK/started.\$RANK.\$TORCHELASTIC_RESTART_COUNT; [ \$TORCHELASTIC_RESTART_COUNT != 0 ] || exit 3"
rm -f "$WORK"/started.*
DIR=$WORK BAD=node2 timeout 200 srun -N2 -w 'node[1-2]' --ntasks-per-node=2 -l "$DDPRUN" --rdzv-timeout 120 \
  --max-restarts 1 --term-timeout 3 --health-check "$counting" -- sh -c "$failing" > restart.out 2> restart.err
rc=$?
grep -E 'ddprun: (error|attempt)' restart.err | sed 's/^/   /'
expect_eq "per-task restart: srun exit code" 125 "$rc"
expect_eq "per-task restart: check runs per node (node1 node2)" "2 2" "$(cat checks.node1) $(cat checks.node2)"
# Attempt 0 failed and every task restarted (from their lines: a worker the teardown killed may not have
# left its file).
expect_eq "per-task restart: tasks that restarted" 4 "$(grep -c 'attempt 0 failed (exit 3); restarting' restart.err)"
if compgen -G "$WORK/started.*.1" > /dev/null; then fail "per-task restart: a worker of the restart started"; fi
grep -qE "^2: ddprun: error: node 1 \(node2\) failed its health check \(--health-check\): exited with code 3; output: GPU 3" \
  restart.err || fail "per-task restart: node2's task 0 did not report its failed check"
for t in 0 1 3; do
  grep -qE "^$t: ddprun: error: node2 \(node rank 1\) could not start: node 1 \(node2\) failed its health check" \
    restart.err || fail "per-task restart: task $t does not name node2"
done
no_wait per-task-restart restart.err
pass
