#!/usr/bin/env bash
# Per-task mode with real PyTorch workers: under srun --ntasks-per-node=2 every ddprun is one rank of a gloo
# group (env://) that all-reduces; the records show Slurm's ranks, hosts and the master on node 1.
source "$(dirname "$0")/lib.sh"
setup
need_ddprun
need_torch

note "srun -N2 --ntasks-per-node=2 ddprun -- python3 allreduce_worker.py"
mkdir -p out
timeout 300 srun -N2 -w 'node[1-2]' --ntasks-per-node=2 "$DDPRUN" -- \
  "$PYTHON" "$SLURM_TEST_DIR/allreduce_worker.py" "$WORK/out" > torch.out 2> torch.err \
  || fail "per-task PyTorch run exited $?"
"$PYTHON" "$SLURM_TEST_DIR/check_allreduce.py" out 4 node1 node2 || fail "worker records are wrong (see above)"
pass
