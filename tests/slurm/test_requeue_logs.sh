#!/usr/bin/env bash
# A requeued job keeps both runs' logs: `scontrol requeue` stops the first run (its agents write their error
# reports), the job starts again with SLURM_RESTART_COUNT=1, and with --log-dir the second run writes under
# requeue_1/ instead of over the first run's attempt_0/. The workers see DDPRUN_REQUEUE_COUNT, Slurm's own
# SLURM_RESTART_COUNT, and TORCHELASTIC_RESTART_COUNT=0 (restarts of this launch).
source "$(dirname "$0")/lib.sh"
setup
need_ddprun

cat > worker.sh <<EOS
#!/bin/sh
echo "run requeue=\$DDPRUN_REQUEUE_COUNT restart=\$TORCHELASTIC_RESTART_COUNT slurm=\${SLURM_RESTART_COUNT:-unset} rank=\$RANK"
if [ -z "\${SLURM_RESTART_COUNT:-}" ]; then
  echo "first run stderr rank \$RANK" >&2
  touch "$WORK/ready_\$RANK"
  exec sleep 600
fi
echo "second run done rank \$RANK"
EOS
cat > job.sh <<EOS
#!/bin/bash
#SBATCH --requeue
#SBATCH --open-mode=append
echo "batch restart_count=\${SLURM_RESTART_COUNT:-0}"
"$DDPRUN" --nproc-per-node 2 --term-timeout 3 --log-dir "$WORK/logs" -- sh "$WORK/worker.sh"
EOS
j=$(submit -N2 -o job.out job.sh)
deadline=$((SECONDS + 120))
for r in 0 1 2 3; do
  until [[ -e ready_$r ]]; do
    (( SECONDS < deadline )) || fail "rank $r of the first run never started"
    sleep 0.2
  done
done
note "requeue job $j while its first run's workers run"
scontrol requeue "$j" || fail "scontrol requeue $j was refused"
wait_state "$j" PENDING 60 || fail "job $j did not go back to PENDING after requeue"
st=$(wait_job "$j" 180) || fail "the requeued job did not finish (state $st)"
expect_job "$j" COMPLETED 0:0
expect_eq "Restarts" 1 "$(job_field "$j" Restarts)"

for r in 0 1 2 3; do
  first=logs/attempt_0/rank_$r
  second=logs/requeue_1/attempt_0/rank_$r
  grep -qx "run requeue=0 restart=0 slurm=unset rank=$r" "$first/stdout.log" \
    || fail "the first run's stdout of rank $r is gone or wrong: $(cat "$first/stdout.log" 2>&1)"
  grep -qx "first run stderr rank $r" "$first/stderr.log" || fail "the first run's stderr of rank $r is gone"
  grep -qx "run requeue=1 restart=0 slurm=1 rank=$r" "$second/stdout.log" \
    || fail "the requeued run's stdout of rank $r: $(cat "$second/stdout.log" 2>&1)"
  grep -qx "second run done rank $r" "$second/stdout.log" || fail "the requeued run of rank $r did not finish"
  [[ -s $second/stderr.log ]] && fail "the requeued run's stderr of rank $r is not its own: $(cat "$second/stderr.log")"
done
note "ok: both runs' logs of every rank survive (attempt_0/ and requeue_1/attempt_0/)"
for n in 0 1; do
  [[ -s logs/attempt_0/error_node_$n.json ]] || fail "the stopped first run's error report of node $n is gone"
  [[ -e logs/requeue_1/attempt_0/error_node_$n.json ]] && fail "an error report lies beside the successful run's logs"
done
note "ok: the first run's error reports stay with its logs; none beside the successful run's"
pass
