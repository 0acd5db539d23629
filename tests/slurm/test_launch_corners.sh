#!/usr/bin/env bash
# Corners of starting ddprun from a Slurm shell:
#  - the dry run in a batch script shows the run id and ports the self-launched run uses (before, it planned
#    with the job id and the run used JOBID.STEPID: a port and run id it never used);
#  - ddprun typed into a multi-node `srun --pty` shell waits for nodes whose shell ended at once: its first
#    "waiting" line says so and what to do (before, it waited --rdzv-timeout with no hint).
source "$(dirname "$0")/lib.sh"
setup
need_ddprun
command -v script >/dev/null || skip "script (util-linux) is needed for a terminal"

note "batch script: dry run, then the run"
cat > worker.sh <<EOS
#!/bin/sh
echo "\$TORCHELASTIC_RUN_ID \$MASTER_PORT" > "$WORK/run_rank\$RANK"
EOS
chmod +x worker.sh
cat > job.sh <<EOS
#!/bin/bash
"$DDPRUN" --dry-run --format json --nproc-per-node 1 -- true > "$WORK/dry.json" || exit
"$DDPRUN" --nproc-per-node 1 -- "$WORK/worker.sh"
EOS
j=$(submit -N2 -o job.out job.sh)
st=$(wait_job "$j" 120) || fail "job $j did not finish (state $st)"
sed 's/^/   /' job.out
expect_job "$j" COMPLETED 0:0
dry_run_id=$(sed -n 's/^  "run_id": "\(.*\)",$/\1/p' dry.json)
dry_port=$(sed -n 's/^  "master_port": \([0-9]*\),$/\1/p' dry.json)
for r in 0 1; do
  expect_eq "rank $r: run id and MASTER_PORT as the dry run showed" "$dry_run_id $dry_port" "$(cat "run_rank$r")"
done

note "srun -N2 --pty bash: ddprun typed into the shell"
# Node 1's shell has no terminal and ends at once; node 0's reads these lines from the terminal.
{
  echo "$DDPRUN --rdzv-timeout 25 --nproc-per-node 1 -- true; echo ddprun-rc=\$?; exit"
  sleep 40
} | timeout 90 script -qfc "srun -N2 --pty bash --norc --noprofile" pty.out > /dev/null
tr -d '\r' < pty.out | grep -E 'ddprun' | sed 's/^/   /'
grep -q 'ddprun-rc=1' pty.out || fail "ddprun in the pty shell did not end with the rendezvous time-out"
grep -q 'this is an interactive srun --pty step over 2 nodes' pty.out \
  || fail "no hint that the pty step's other node runs no agent"
grep -q 'srun --overlap --ntasks-per-node=1 ddprun' pty.out || fail "the hint does not say what to run"
note "ok: the waiting line says why and what to run"
pass
