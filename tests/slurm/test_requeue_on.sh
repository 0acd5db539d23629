#!/usr/bin/env bash
# --requeue-on / --max-requeues in a batch script (self-launch): a job whose workers exit 140 on its first two
# runs is requeued by ddprun itself (scontrol requeue) and completes on the third, Restarts=2; a job that stops
# restarting without progress (--max-restarts-without-progress, exit 123, not listed) is not requeued.
source "$(dirname "$0")/lib.sh"
setup
need_ddprun

# The workers see SLURM_RESTART_COUNT (unset on the first run): exit 140 (as after a checkpoint) on runs 0 and 1.
cat > requeued.sh <<EOS
#!/bin/bash
#SBATCH --requeue
#SBATCH --open-mode=append
echo "run restart_count=\${SLURM_RESTART_COUNT:-0}"
"$DDPRUN" --nproc-per-node 2 --requeue-on 140,143 --max-requeues 3 -- /bin/sh -c \
  'if [ "\${SLURM_RESTART_COUNT:-0}" -lt 2 ]; then exit 140; fi; echo "rank \$RANK done"'
echo "ddprun exited \$?"
EOS
j=$(submit -N2 -o requeued.out requeued.sh)
note "job $j: exits 140 twice, then succeeds"
st=$(wait_job "$j" 240) || fail "job $j did not finish (state $st)"
expect_job "$j" COMPLETED 0:0
expect_eq "Restarts" 2 "$(job_field "$j" Restarts)"
expect_eq "runs" 3 "$(grep -c '^run restart_count=' requeued.out)"
grep -q 'exit code 140 is in --requeue-on: requeued job '"$j"' (requeue 1 of --max-requeues 3)' requeued.out ||
  fail "no line for the first requeue"
grep -q 'exit code 140 is in --requeue-on: requeued job '"$j"' (requeue 2 of --max-requeues 3)' requeued.out ||
  fail "no line for the second requeue"
expect_eq "finished ranks" 4 "$(grep -c 'rank [0-3] done' requeued.out)"

# Fails at step 50 on every attempt: one restart without progress stops it with 123, which is not listed.
cat > stalled.sh <<EOS
#!/bin/bash
#SBATCH --requeue
#SBATCH --open-mode=append
echo "run restart_count=\${SLURM_RESTART_COUNT:-0}"
"$DDPRUN" --nproc-per-node 1 --max-restarts 5 --max-restarts-without-progress 1 --requeue-on 140,143 \
  -- /bin/sh -c 'echo "step 50" > "\$DDPRUN_HEARTBEAT_FILE"; exit 3'
EOS
j=$(submit -N1 -o stalled.out stalled.sh)
note "job $j: fails at step 50 every time"
st=$(wait_job "$j" 240) || fail "job $j did not finish (state $st)"
expect_job "$j" FAILED 123:0
expect_eq "Restarts" 0 "$(job_field "$j" Restarts)"
expect_eq "runs" 1 "$(grep -c '^run restart_count=' stalled.out)"
grep -q 'no progress in 1 restart in a row (--max-restarts-without-progress 1): the last attempt failed at step 50' \
  stalled.out || fail "no line saying why the job stopped"
grep -q 'requeued job' stalled.out && fail "the job was requeued"
pass
