#!/usr/bin/env bash
# A heterogeneous job is one ddprun job over every component:
#  - plain ddprun in its batch script self-launches on every node of every component (srun --het-group=0-1);
#    before, it ran on component 0 alone, silently (Slurm 22.05 gives the batch shell component 0's
#    SLURM_JOB_NODELIST);
#  - srun --het-group=0-1 ddprun finds node rank 0 on component 0 although that node does not sort first:
#    SLURM_NODEID counts component after component while SLURM_STEP_NODELIST is sorted; before, every agent
#    looked for the store on the first node of the sorted list, and the workers got that node as MASTER_ADDR
#    (rank 0 runs on node3; on this one-machine cluster every node address reaches every port, so only
#    MASTER_ADDR shows it).
# Component 0 is node3 with 2 GPUs, component 1 is node[1-2] with one each: ranks 0-1 on node3, 2 on node1,
# 3 on node2.
source "$(dirname "$0")/lib.sh"
setup
need_ddprun

cat > worker.sh <<EOS
#!/bin/sh
echo "\$(hostname) \$LOCAL_RANK \$WORLD_SIZE \$CUDA_VISIBLE_DEVICES \$MASTER_ADDR" > "$WORK/\$1_rank\$RANK"
EOS
chmod +x worker.sh
cat > job.sh <<EOS
#!/bin/bash
#SBATCH -N1 -w node3 --gres=gpu:2
#SBATCH hetjob
#SBATCH -N2 -w node[1-2] --gres=gpu:1
"$DDPRUN" --nproc-per-node gpu --rdzv-timeout 60 -- "$WORK/worker.sh" self || exit
srun --het-group=0-1 --ntasks-per-node=1 "$DDPRUN" --nproc-per-node gpu --rdzv-timeout 60 -- "$WORK/worker.sh" srun
EOS
j=$(submit -o job.out job.sh)
st=$(wait_job "$j" 240) || fail "job $j did not finish (state $st)"
sed 's/^/   /' job.out
expect_job "$j" COMPLETED 0:0
for how in self srun; do
  got=$(for r in 0 1 2 3 4; do [ -e "${how}_rank$r" ] && echo "$r: $(cat "${how}_rank$r")"; done)
  expect_eq "$how: ranks (host, local rank, world size, GPUs, MASTER_ADDR)" \
    "0: node3 0 4 0,1 node3;1: node3 1 4 0,1 node3;2: node1 0 4 0 node3;3: node2 0 4 0 node3" \
    "$(echo "$got" | paste -sd';')"
done
pass
