#!/usr/bin/env bash
# The root cause's exit code survives a TERM that lands after the outcome is decided: under srun
# --kill-on-bad-exit the step's other agents get TERM right as they finish. The test hook
# DDPRUN_TEST_RAISE_AFTER_RUN raises TERM in every agent at exactly that moment; before the fix an
# agent then exited 143 (and a requeue-on-143 recipe would requeue a broken job forever).
source "$(dirname "$0")/lib.sh"
setup
need_ddprun

note "srun -N3 --kill-on-bad-exit: rank 1 exits 7, every agent gets TERM right after its run"
timeout 180 srun -N3 -w 'node[1-3]' --ntasks-per-node=1 --kill-on-bad-exit=1 \
  env DDPRUN_TEST_RAISE_AFTER_RUN=15 "$DDPRUN" --nproc-per-node 1 --term-timeout 3 -- \
  sh -c 'if [ "$RANK" = 1 ]; then exit 7; fi; exec sleep 60' > run.out 2> run.err
rc=$?
sed 's/^/   /' run.err | tail -n 15
expect_eq "srun exit code (the highest of the three agents)" 7 "$rc"
! grep -q "exit code 143" run.err || fail "an agent reported 143: $(grep 'exit code 143' run.err)"
pass
