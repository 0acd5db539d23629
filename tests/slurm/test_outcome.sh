#!/usr/bin/env bash
# The job's outcome when the nodes finish at different times (issue 23, item 13). An elastic batch job (its
# self-launched srun runs with --no-kill, and the batch script exits with the code of the agent on its own
# host, node 0) whose node 0's rank finishes first and whose node 1's rank then fails, on every attempt: the
# job is FAILED with that rank's code, not COMPLETED (an afterok dependent must not run), and node 0 ran
# both attempts (it stayed in the job instead of leaving with its own ranks' success).
source "$(dirname "$0")/lib.sh"
setup
need_ddprun

cat > worker.sh <<'EOS'
#!/bin/sh
echo x >> "$WORK/runs_$RANK"
if [ "$RANK" = 0 ]; then touch "$WORK/done_$TORCHELASTIC_RESTART_COUNT"; exit 0; fi
for i in $(seq 1 3000); do [ -e "$WORK/done_$TORCHELASTIC_RESTART_COUNT" ] && break; sleep 0.01; done
sleep 1
exit 3
EOS
cat > job.sh <<EOS
#!/bin/bash
#SBATCH --no-kill
export WORK="$WORK"
"$DDPRUN" --nnodes 1:2 --max-restarts 1 --nproc-per-node 1 --term-timeout 3 -- sh "$WORK/worker.sh"
rc=\$?
echo "ddprun exited \$rc"
exit \$rc
EOS
note "sbatch -N2, ddprun --nnodes 1:2 --max-restarts 1: rank 0 exits 0, then rank 1 exits 3, twice"
j=$(submit -N2 -o job.out job.sh)
st=$(wait_job "$j" 240) || fail "job $j did not end (state $st)"
expect_job "$j" FAILED 3:0
grep -q 'ddprun exited 3' job.out || fail "the batch script's ddprun did not exit 3"
expect_eq "attempts run by node 0" 2 "$(wc -l < runs_0)"
expect_eq "attempts run by node 1" 2 "$(wc -l < runs_1)"
! grep -q 'job summary (attempt [01]): success' job.out || fail "node 0 reported the failed job as a success"
pass
