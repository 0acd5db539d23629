#!/usr/bin/env bash
# scancel stops the job at whatever phase it comes (issue 35, items 1, 8 and 9). A batch job with
# --max-restarts and --requeue-on 143 whose attempt 0 fails on node 1 while node 2's rank takes seconds to
# stop: scancel while node 0 collects that attempt's records starts no attempt 1, every agent exits 143, and
# ddprun does not requeue the job the user cancelled (JobState=COMPLETING, Reason=None, no PreemptTime). A
# TERM to the steps alone (scancel --signal=TERM: the job is not cancelled, as in a preemption's grace
# time) still requeues on 143, and Slurm then ends the batch script: a stage-out after ddprun is cut off.
source "$(dirname "$0")/lib.sh"
setup
need_ddprun

# Attempt 0: rank 1 fails once ranks 0 and 2 run; rank 0 stops at once on TERM, rank 2 takes 4 s. A later
# attempt (or a requeued run) finishes at once.
cat > worker.sh <<'EOS'
#!/bin/sh
echo "${SLURM_RESTART_COUNT:-0}.$TORCHELASTIC_RESTART_COUNT" >> "$WORK/attempts.$RANK"
[ "$TORCHELASTIC_RESTART_COUNT" = 0 ] && [ "${SLURM_RESTART_COUNT:-0}" = 0 ] || exit 0
case $RANK in
  0) trap 'touch "$WORK/stopped.0"; exit 0' TERM; touch "$WORK/ready.0" ;;
  1) while [ ! -f "$WORK/ready.0" ] || [ ! -f "$WORK/ready.2" ]; do sleep 0.05; done; exit 3 ;;
  2) trap 'touch "$WORK/stopping.2"; sleep 4; exit 0' TERM; touch "$WORK/ready.2" ;;
esac
while :; do sleep 0.1; done
EOS
job_script() {
  cat <<EOS
#!/bin/bash
#SBATCH --requeue
#SBATCH --open-mode=append
export WORK="$WORK"
echo "run \${SLURM_RESTART_COUNT:-0}"
"$DDPRUN" --nproc-per-node 1 --max-restarts 2 --term-timeout 5 --requeue-on 143 --max-requeues 3 \
  -- sh "$WORK/worker.sh"
echo "after ddprun: \$?"
sleep 3
echo "stage-out done"
EOS
}

wait_collecting() {
  local f
  for f in stopped.0 stopping.2; do
    for _ in $(seq 1 1200); do [[ -e $WORK/$f ]] && break; sleep 0.1; done
    [[ -e $WORK/$f ]] || fail "no $f: the attempt did not fail as planned"
  done
  sleep 1  # node 0's rank is gone: its agent collects the nodes' records, waiting for node 2's
}

note "scancel while node 0 collects the failed attempt's records"
job_script > cancel.sh
j=$(submit -N3 -o cancel.out cancel.sh)
wait_collecting
scancel "$j"
st=$(wait_job "$j" 90) || fail "job $j did not end after scancel (state $st); $(cat cancel.out)"
sed 's/^/   /' cancel.out | tail -n 25
expect_eq "state after scancel" CANCELLED "$st"
expect_eq "Restarts (never requeued)" 0 "$(job_field "$j" Restarts)"
for r in 0 1 2; do expect_eq "attempts of rank $r" "0.0" "$(cat "attempts.$r")"; done
grep -q 'SIGTERM received: attempt 0 (exit 3) is not restarted; exit code 143' cancel.out ||
  fail "no line saying the restart was cancelled"
grep -q "exit code 143 is in --requeue-on, but job $j was cancelled (scancel): not requeued" cancel.out ||
  fail "no line saying the cancelled job was not requeued"
# (Node 1, whose rank failed at once, may have said "restarting" before the cancel came: it then died in
# the round; the attempts files above show that no attempt 1 started anywhere.)
grep -q 'requeued job' cancel.out && fail "requeued: $(grep 'requeued job' cancel.out)"

note "scancel --signal=TERM (the steps only, the job goes on): requeued on 143, and the script ends there"
rm -f attempts.* ready.* stopped.* stopping.*
job_script > signal.sh
j=$(submit -N3 -o signal.out signal.sh)
wait_collecting
scancel --signal=TERM "$j"
st=$(wait_job "$j" 240) || fail "job $j did not finish (state $st); $(cat signal.out)"
sed 's/^/   /' signal.out | tail -n 25
expect_job "$j" COMPLETED 0:0
expect_eq "Restarts" 1 "$(job_field "$j" Restarts)"
grep -q "exit code 143 is in --requeue-on: requeued job $j (requeue 1 of --max-requeues 3)" signal.out ||
  fail "no line for the requeue"
expect_eq "runs of the batch script" 2 "$(grep -c '^run ' signal.out)"
# Slurm ends the batch script (TERM) moments after ddprun's requeue is accepted: a stage-out after ddprun is
# cut off in the requeued run (its first line may still get out), and runs to its end only in the last run.
expect_eq "stage-outs that finished" 1 "$(grep -c '^stage-out done' signal.out)"
expect_eq "the last line" "stage-out done" "$(tail -n 1 signal.out)"
pass
