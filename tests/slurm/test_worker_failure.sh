#!/usr/bin/env bash
# A worker failure anywhere tears the job down everywhere; the job is FAILED with the worker's exit code.
source "$(dirname "$0")/lib.sh"
setup
need_ddprun

note "sbatch: rank 3 (node 2) exits 7 while the others sleep"
cat > job.sh <<EOS
#!/bin/bash
"$DDPRUN" --nproc-per-node 2 -- sh -c 'if [ "\$RANK" = 3 ]; then sleep 1; exit 7; fi; exec sleep 600'
EOS
j=$(submit -N2 -o job.out job.sh)
st=$(wait_job "$j" 120) || fail "job $j was not torn down after the failure (state $st)"
expect_job "$j" FAILED 7:0
# One job-wide summary (node 0), one line from the other node, even though srun --kill-on-bad-exit stops node 0
# once node 1 has exited.
expect_eq "job summaries" 1 "$(grep -c '^ddprun: job summary (attempt 0): FAILED, exit code 7, root cause rank 3 on node2' job.out)"
expect_eq "one-line reports" 1 "$(grep -c '^ddprun: node 1 (node2): failed, exit 7, root cause rank 3 on node2; full report on node 0' job.out)"
expect_eq "full reports" 1 "$(grep -c '^Root cause (first observed failure):' job.out)"

note "srun: a worker killed by SIGKILL gives 128+9"
timeout 120 srun -N2 --ntasks-per-node=1 "$DDPRUN" --nproc-per-node 2 -- \
  sh -c 'if [ "$RANK" = 1 ]; then kill -9 $$; fi; exec sleep 600' > kill.out 2> kill.err
expect_eq "srun exit code" 137 "$?"

note "per-task mode: the failing task's code"
timeout 120 srun -N2 --ntasks-per-node=2 "$DDPRUN" -- sh -c '[ "$RANK" = 2 ] && exit 9; exec sleep 600' \
  > pt.out 2> pt.err
rc=$?
# srun reports the highest task exit code; the sleeping tasks end by signal (SIGTERM from ddprun or srun -K).
[[ $rc == 9 ]] || fail "per-task srun exited $rc, expected 9"
note "ok: per-task srun exited 9"
pass
