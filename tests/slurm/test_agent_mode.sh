#!/usr/bin/env bash
# Agent mode: one ddprun per node (srun --ntasks-per-node=1), each spawning 2 real PyTorch workers that
# form a gloo group through env:// and all_reduce. Workers see distinct hostnames; MASTER_ADDR is node 1.
source "$(dirname "$0")/lib.sh"
setup
need_ddprun
need_torch

mkdir -p out
note "srun -N2 --ntasks-per-node=1 ddprun --nproc-per-node 2 -- python3 allreduce_worker.py"
timeout 300 srun -N2 -w 'node[1-2]' --ntasks-per-node=1 "$DDPRUN" --nproc-per-node 2 -- \
  "$PYTHON" "$SLURM_TEST_DIR/allreduce_worker.py" "$WORK/out" > agent.out 2> agent.err
rc=$?
[[ $rc == 0 ]] || fail "srun ddprun exited $rc (expected 0)"
"$PYTHON" "$SLURM_TEST_DIR/check_allreduce.py" out 4 node1 node2 || fail "worker records are wrong (see above)"
# The cluster's munged authenticates the rendezvous (DDPRUN_MUNGE_SOCKET): no fallback warning.
! grep -q "unauthenticated" agent.err || fail "the rendezvous fell back to no authentication under Slurm"
note "ok: the rendezvous was authenticated with MUNGE"

note "the same inside a batch script, with srun started by the user"
rm -rf out && mkdir out
cat > job.sh <<EOS
#!/bin/bash
srun --ntasks-per-node=1 "$DDPRUN" --nproc-per-node 2 -- "$PYTHON" "$SLURM_TEST_DIR/allreduce_worker.py" "$WORK/out"
EOS
j=$(submit -N2 -w 'node[3-4]' -o job.out job.sh)
st=$(wait_job "$j" 300) || fail "job $j did not finish (state $st)"
expect_job "$j" COMPLETED 0:0
"$PYTHON" "$SLURM_TEST_DIR/check_allreduce.py" out 4 node3 node4 || fail "worker records are wrong (see above)"
pass
