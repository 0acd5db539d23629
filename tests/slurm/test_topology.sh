#!/usr/bin/env bash
# --rank-order topology (issue 28 §2) on a cluster of its own whose slurm.conf has TopologyPlugin=topology/tree
# (cluster.sh --switches): leaf switch s1 holds node[1,3,5], s2 node[2,4], so Slurm's node order interleaves
# them. (Its own cluster: with a topology plugin the scheduler packs jobs by switch, which would change which
# nodes the other tests' jobs get.)
#  1. srun -N4: every node's RANK and GROUP_RANK follow the switches (node1 node3 | node2 node4); without the
#     flag Slurm's order holds.
#  2. block addresses (NVL72-style b1.node2), injected per task: the store node's block first; node 0's
#     rank_order event (--log-format json) names the blocks.
#  3. sbatch -N5 --nnodes 3:3 (two standbys: node4 on s2, node5 on s1) through DDPRUN_RANK_ORDER and a
#     self-launch; node3 (s1) is lost: node5, its switch's standby, takes its place, not Slurm's first
#     standby node4.
source "$(dirname "$0")/lib.sh"
TOPO_DIR=${DDPRUN_SLURM_DIR:?DDPRUN_SLURM_DIR is not set}-topo
[[ $EUID == 0 ]] || skip "the local Slurm cluster needs root"
stop_topo() { cd / && DDPRUN_SLURM_DIR=$TOPO_DIR bash "$CLUSTER_SH" stop || true; }
DDPRUN_SLURM_DIR=$TOPO_DIR bash "$CLUSTER_SH" start 5 --gpus 0 --cpus 4 --switches 's1:node[1,3,5] s2:node[2,4]' \
  || { stop_topo; fail "cannot start a cluster with a topology in $TOPO_DIR"; }
DDPRUN_SLURM_DIR=$TOPO_DIR
setup
trap 'cleanup; stop_topo' EXIT
need_ddprun

# Each worker writes "host RANK GROUP_RANK" to out/<attempt>.<host>.<local rank>.
cat > worker.sh <<'EOS'
#!/bin/bash
echo "$(hostname) $RANK $GROUP_RANK" > "$1/$TORCHELASTIC_RESTART_COUNT.$(hostname).$LOCAL_RANK"
[[ $TORCHELASTIC_RESTART_COUNT != 0 || -z ${2:-} ]] || exec sleep "$2"
EOS
chmod +x worker.sh

ranks() { # attempt: "host:RANK:GROUP_RANK ..." ordered by RANK
  cat out/"$1".* 2>/dev/null | sort -k2,2n | awk '{printf "%s%s:%s:%s", (NR > 1 ? " " : ""), $1, $2, $3}'
}

note "1. srun -N4 ddprun --rank-order topology: switch s1 (node1 node3) gets node ranks 0-1, s2 ranks 2-3"
mkdir -p out
timeout 120 srun -N4 -w 'node[1-4]' "$DDPRUN" --rank-order topology --nproc-per-node 2 --no-python -- \
  "$WORK/worker.sh" "$WORK/out" > tree.out 2> tree.err || fail "srun ddprun --rank-order topology failed"
expect_eq "ranks by topology" "node1:0:0 node1:1:0 node3:2:1 node3:3:1 node2:4:2 node2:5:2 node4:6:3 node4:7:3" \
  "$(ranks 0)"
grep -q 'ddprun: --rank-order topology: node ranks 0-1: switch/block s0.s1 (node\[1,3\])' tree.err \
  || fail "node 0 did not print the order and its switches"
rm -rf out && mkdir out
timeout 120 srun -N4 -w 'node[1-4]' "$DDPRUN" --nproc-per-node 1 --no-python -- "$WORK/worker.sh" "$WORK/out" \
  > slurm.out 2> slurm.err || fail "srun ddprun failed"
expect_eq "ranks without --rank-order" "node1:0:0 node2:1:1 node3:2:2 node4:3:3" "$(ranks 0)"

note "2. block addresses injected per task: node1 b2, node2 b1, node3 b1, node4 b2"
rm -rf out && mkdir out
timeout 120 srun -N4 -w 'node[1-4]' bash -c '
  case $(hostname) in node1|node4) b=b2 ;; *) b=b1 ;; esac
  SLURM_TOPOLOGY_ADDR=$b.$(hostname) SLURM_TOPOLOGY_ADDR_PATTERN=block.node exec "$@"' sh \
  "$DDPRUN" --rank-order topology --log-format json --nproc-per-node 1 --no-python -- "$WORK/worker.sh" \
  "$WORK/out" > block.out 2> block.err || fail "srun ddprun --rank-order topology (blocks) failed"
expect_eq "ranks by block" "node1:0:0 node4:1:1 node2:2:2 node3:3:3" "$(ranks 0)"
grep -q '"event":"rank_order".*"node ranks 0-1: switch/block b2 (node\[1,4\])","node ranks 2-3: switch/block b1' \
  block.err || fail "node 0 did not emit the rank_order event with the blocks"

note "3. sbatch -N5, --nnodes 3:3 --max-restarts 1, DDPRUN_RANK_ORDER=topology; node3 (s1) is lost"
rm -rf out && mkdir out
cat > spare.sh <<EOS
#!/bin/bash
#SBATCH --no-kill
export DDPRUN_RANK_ORDER=topology
"$DDPRUN" --nnodes 3:3 --max-restarts 1 --nproc-per-node 1 --no-python -- "$WORK/worker.sh" "$WORK/out" 600
EOS
j=$(submit -N5 -w 'node[1-5]' -o spare.out spare.sh)
wait_file_grep spare.out 'run .* attempt 0' 120 || fail "the job did not start its first attempt"
for _ in $(seq 100); do [[ $(ls out | wc -l) == 3 ]] && break; sleep 0.2; done
expect_eq "first attempt by topology (standbys node4 node5)" "node1:0:0 node3:1:1 node2:2:2" "$(ranks 0)"
kill_node_tasks "$j" 2  # SLURM_NODEID 2 is node3
note "node3's agent and workers are gone"
st=$(wait_job "$j" 300) || fail "job $j did not finish after the loss (state $st)"
expect_job "$j" COMPLETED 0:0
expect_eq "after the loss node5 (s1) replaced node3, not node4 (s2)" "node1:0:0 node5:1:1 node2:2:2" "$(ranks 1)"
pass
