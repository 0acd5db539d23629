#!/usr/bin/env bash
# A checkpoint signal under Slurm, the way sbatch/preemptible.sbatch passes it: USR2 to the batch shell, whose
# trap sends it to ddprun (srun), which passes it to the agents. Rank 1 exits 140 at once; rank 0 takes a second
# to write its "checkpoint". Nobody may stop rank 0 meanwhile: not ddprun's teardown, and not srun
# --kill-on-bad-exit after rank 1's node exited. Every node reports "stopped after SIGUSR2" and the job ends with
# 140. (Whether a worker's children live on is tested in tests/e2e: a signal srun forwards reaches every process
# of the step here, children included, whatever ddprun does.)
source "$(dirname "$0")/lib.sh"
setup
need_ddprun

cat > worker.sh <<'EOS'
#!/bin/sh
trap 'if [ "$RANK" = 0 ]; then sleep 1; echo saved > "$WORK/saved_$RANK"; fi; exit 140' USR2
touch "$WORK/ready_$RANK"
while :; do sleep 0.1; done
EOS
cat > job.sh <<EOS
#!/bin/bash
export WORK="$WORK"
trap 'kill -USR2 "\$pid" 2>/dev/null' USR2
"$DDPRUN" --nproc-per-node 1 --term-timeout 5 -- sh "$WORK/worker.sh" &
pid=\$!
wait "\$pid"; rc=\$?
while kill -0 "\$pid" 2>/dev/null; do wait "\$pid"; rc=\$?; done   # the trap interrupted wait
echo "ddprun exited \$rc"
exit \$rc
EOS
j=$(submit -N2 -o job.out job.sh)
deadline=$((SECONDS + 120))
until [[ -e ready_0 && -e ready_1 ]]; do
  (( SECONDS < deadline )) || fail "the workers did not start"
  sleep 0.2
done
note "USR2 to the batch shell of job $j"
scancel --batch --signal=USR2 "$j" || fail "scancel --batch --signal=USR2 $j was refused"
st=$(wait_job "$j" 120) || fail "job $j did not end after USR2 (state $st)"
expect_job "$j" FAILED 140:0
grep -q 'ddprun exited 140' job.out || fail "ddprun did not exit 140"
[[ $(cat saved_0 2>/dev/null) == saved ]] || fail "rank 0 was stopped before it wrote its checkpoint"
note "ok: rank 0 wrote its checkpoint"
# Node 0 prints the report; the other node its one line (the job-wide summary), both in these words.
n=$(grep -cE 'ddprun: (node 1 \(node2\): )?stopped after SIGUSR2 with exit code 140' job.out)
expect_eq "nodes reporting 'stopped after SIGUSR2'" 2 "$n"
! grep -qE 'job failed|Root cause' job.out || fail "a stop on request was reported as a failure"
pass
