#!/usr/bin/env bash
# Self-launch: plain `ddprun ...` in a batch script or an salloc shell re-launches itself on every node of
# the allocation with srun, one agent per node, and passes the exit code on.
source "$(dirname "$0")/lib.sh"
setup
need_ddprun

report='echo "$(hostname) $RANK $WORLD_SIZE ${SLURM_STEP_ID:-nostep} $MASTER_ADDR" > '"$WORK"'/s.$RANK'

note "sbatch -N2 with one plain ddprun line"
cat > job.sh <<EOS
#!/bin/bash
"$DDPRUN" --nproc-per-node 2 -- sh -c '$report'
EOS
j=$(submit -N2 -w 'node[1-2]' -o job.out job.sh)
st=$(wait_job "$j" 120) || fail "job $j did not finish (state $st)"
expect_job "$j" COMPLETED 0:0
for r in 0 1 2 3; do
  [[ -e s.$r ]] || fail "rank $r did not run"
  read -r host rank world step master < "s.$r"
  expect_eq "rank $r host/rank/world/master" "node$((r / 2 + 1)) $r 4 node1" "$host $rank $world $master"
  [[ $step != nostep ]] || fail "rank $r did not run inside an srun step (SLURM_STEP_ID unset)"
done

note "the batch's --ntasks-per-node does not multiply the workers"
rm -f s.*
j=$(submit -N2 --ntasks-per-node=2 -w 'node[1-2]' -o job2.out job.sh)
st=$(wait_job "$j" 120) || fail "job $j did not finish (state $st)"
expect_job "$j" COMPLETED 0:0
expect_eq "workers" 4 "$(ls s.* | wc -l)"

note "salloc -N2 ddprun ... (salloc shell context)"
rm -f s.*
timeout 120 salloc -N2 -w 'node[1-2]' "$DDPRUN" --nproc-per-node 1 -- sh -c "$report" > salloc.out 2> salloc.err \
  || fail "salloc ddprun exited $?"
expect_eq "salloc workers" "node1 node2" "$(cat s.0 s.1 | awk '{print $1}' | tr '\n' ' ' | sed 's/ $//')"

note "exit code passes through self-launch"
timeout 120 salloc -N2 "$DDPRUN" --nproc-per-node 1 -- sh -c '[ "$RANK" = 1 ] && exit 4; exit 0' \
  > rc.out 2> rc.err
expect_eq "salloc ddprun exit code" 4 "$?"
pass
