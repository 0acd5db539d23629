#!/usr/bin/env bash
# Two steps of one job whose JOBID.STEPID derive the same store port, running at once on the same first node:
# the second master takes the next candidate port of its step, its agents find it there, and neither step's
# agents join the other's store. Before, the second step failed at once: "Address already in use".
# The steps run with --resv-ports=0: ports Slurm reserved (the cluster's MpiParams=ports) would replace the derived ones.
source "$(dirname "$0")/lib.sh"
setup
need_ddprun

# The store port ddprun derives for step J.S, read from its own dry run in that step's environment.
cat > port.sh <<EOS
#!/bin/bash
env -i PATH="\$PATH" SLURM_JOB_ID=\$1 SLURM_STEP_ID=\$2 SLURM_STEP_NODELIST=node1 SLURM_STEP_NUM_NODES=1 \\
  SLURM_STEP_NUM_TASKS=1 SLURM_STEP_TASKS_PER_NODE=1 SLURM_NODEID=0 \\
  "$DDPRUN" --dry-run --format json --rdzv-auth none --nproc-per-node 1 -- true |
  sed -n 's/.*"rdzv_endpoint": "node1:\([0-9]*\)".*/\1/p'
EOS
chmod +x port.sh

# Each worker records its run id and world size, and stays up until the other step has run.
cat > worker.sh <<'EOS'
#!/bin/sh
echo "$TORCHELASTIC_RUN_ID $WORLD_SIZE" > "$2/$1_rank$RANK"
[ "$1" = a ] && while [ ! -e "$2/b_done" ]; do sleep 0.2; done
exit 0
EOS
chmod +x worker.sh

cat > job.sh <<EOS
#!/bin/bash
# The first pair of step ids a < b of this job with the same derived store port.
declare -A seen
a= b=
for s in \$(seq 0 1500); do
  p=\$("$WORK/port.sh" "\$SLURM_JOB_ID" "\$s")
  [ -n "\$p" ] || { echo "no port for step \$s"; exit 3; }
  if [ -n "\${seen[\$p]:-}" ]; then a=\${seen[\$p]}; b=\$s; break; fi
  seen[\$p]=\$s
done
[ -n "\$b" ] || { echo "no colliding pair of step ids"; exit 3; }
echo "steps \$a and \$b share store port \$p"
step=0
# Step ids are handed out in order: empty steps (--overlap: they need no CPUs of their own), a few at once,
# bring the next id to \$1.
burn() {
  while [ \$step -lt \$1 ]; do
    n=\$(( \$1 - step < 8 ? \$1 - step : 8 ))
    pids=
    for _ in \$(seq \$n); do srun --overlap -N1 -n1 true & pids="\$pids \$!"; done
    wait \$pids
    step=\$((step + n))
  done
}
burn "\$a"
srun -N2 --ntasks-per-node=1 --exact --resv-ports=0 "$DDPRUN" --nproc-per-node 1 -- "$WORK/worker.sh" a "$WORK" > "$WORK/a.out" 2> "$WORK/a.err" &
a_pid=\$!
step=\$((step + 1))
for _ in \$(seq 600); do [ -e "$WORK/a_rank1" ] && break; sleep 0.1; done
burn "\$b"
srun -N2 --ntasks-per-node=1 --exact --resv-ports=0 "$DDPRUN" --nproc-per-node 1 -- "$WORK/worker.sh" b "$WORK" > "$WORK/b.out" 2> "$WORK/b.err"
rb=\$?
touch "$WORK/b_done"
wait \$a_pid; ra=\$?
echo "rc \$ra \$rb"
exit \$(( ra + rb ))
EOS
j=$(submit -N2 -c 2 -w 'node[1-2]' -o job.out job.sh)
st=$(wait_job "$j" 280) || fail "job $j did not finish (state $st)"
cat job.out a.err b.err 2>/dev/null | sed 's/^/   /'
grep -q 'share store port' job.out || fail "no colliding step ids found"
expect_job "$j" COMPLETED 0:0
read -r _ sa _ sb _ < <(grep 'share store port' job.out)
for s in a b; do
  step=$sa; [[ $s == b ]] && step=$sb
  for r in 0 1; do
    expect_eq "step $s rank $r: run id and world size" "$j.$step 2" "$(cat "$WORK/${s}_rank$r" 2>/dev/null)"
  done
done
pass
