#!/usr/bin/env bash
# Per-task mode: under srun --ntasks-per-node=K every ddprun is exactly one worker, RANK = SLURM_PROCID.
source "$(dirname "$0")/lib.sh"
setup
need_ddprun

report='echo "$(hostname) $RANK $LOCAL_RANK $WORLD_SIZE $LOCAL_WORLD_SIZE $SLURM_PROCID $MASTER_ADDR" > '"$WORK"'/t.$SLURM_PROCID'

note "srun -N2 --ntasks-per-node=2 ddprun -- CMD"
timeout 120 srun -N2 -w 'node[1-2]' --ntasks-per-node=2 "$DDPRUN" -- sh -c "$report" > pt.out 2> pt.err \
  || fail "srun --ntasks-per-node=2 ddprun exited $?"
for p in 0 1 2 3; do
  [[ -e t.$p ]] || fail "task $p ran no worker"
  expect_eq "task $p: host rank local world local_world procid master" \
    "node$((p / 2 + 1)) $p $((p % 2)) 4 2 $p node1" "$(cat "t.$p")"
done
[[ $(ls t.* | wc -l) == 4 ]] || fail "expected exactly 4 workers, got $(ls t.* | wc -l)"

note "uneven tasks per node (2,1): ranks stay consecutive per node"
rm -f t.*
timeout 120 srun -N2 -n3 -w 'node[1-2]' "$DDPRUN" -- sh -c "$report" > un.out 2> un.err \
  || fail "srun -N2 -n3 ddprun exited $?"
expect_eq "task 0" "node1 0 0 3 2 0 node1" "$(cat t.0)"
expect_eq "task 1" "node1 1 1 3 2 1 node1" "$(cat t.1)"
expect_eq "task 2" "node2 2 0 3 1 2 node1" "$(cat t.2)"

note "--nproc-per-node contradicts per-task mode"
if timeout 60 srun -N1 --ntasks-per-node=2 "$DDPRUN" --nproc-per-node 2 -- true > bad.out 2> bad.err; then
  fail "--nproc-per-node 2 under --ntasks-per-node=2 was accepted"
fi
grep -q -- 'nproc' bad.err || fail "the error does not name --nproc-per-node: $(head -n2 bad.err)"
note "ok: refused with: $(grep -m1 nproc bad.err)"
pass
