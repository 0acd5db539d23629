#!/usr/bin/env bash
# The local cluster behaves like the real Slurm that ddprun relies on (no ddprun needed).
source "$(dirname "$0")/lib.sh"
setup

note "steps run on distinct hosts"
expect_eq "srun -N2 hostname" "node1 node2" "$(srun -N2 -w 'node[1-2]' hostname | sort | tr '\n' ' ' | sed 's/ $//')"
expect_eq "node2 resolves node1" "127.0.1.1" "$(srun -N1 -w node2 getent hosts node1 | awk '{print $1}')"

note "step variables"
srun -N2 -w 'node[1-2]' --ntasks-per-node=2 -l printenv SLURM_STEP_ID SLURM_STEP_NODELIST SLURM_STEP_TASKS_PER_NODE > step.out \
  || fail "srun -N2 --ntasks-per-node=2 printenv failed"
expect_eq "SLURM_STEP_ID lines" 4 "$(grep -c ': 0$' step.out)"
expect_eq "SLURM_STEP_NODELIST" 4 "$(grep -c ': node\[1-2\]$' step.out)"
expect_eq "SLURM_STEP_TASKS_PER_NODE" 4 "$(grep -c ': 2(x2)$' step.out)"

note "a step smaller than its job"
salloc -N2 -w 'node[1-2]' srun -N1 -n1 bash -c 'echo "$SLURM_STEP_NODELIST $SLURM_NODELIST $SLURM_STEP_NUM_NODES"' > small.out 2> small.err \
  || fail "salloc -N2 srun -N1 failed"
expect_eq "step nodelist, job nodelist, step nodes" "node1 node[1-2] 1" "$(cat small.out)"

note "a batch script is not a step"
cat > batch.sh <<'EOS'
#!/bin/bash
echo "host=$(hostname) job=${SLURM_JOB_ID:-} step=${SLURM_STEP_ID:-unset} nodeid=${SLURM_NODEID:-} tpn=${SLURM_TASKS_PER_NODE:-}"
EOS
j=$(submit -N2 -w 'node[1-2]' -o batch.log batch.sh)
st=$(wait_job "$j" 60) || fail "batch job $j did not finish (state $st)"
expect_eq "batch environment" "host=node1 job=$j step=unset nodeid=0 tpn=1(x2)" "$(cat batch.log)"

note "fake GPUs"
expect_eq "CUDA_VISIBLE_DEVICES with --gres=gpu:4" "0,1,2,3" "$(srun -N1 --gres=gpu:4 printenv CUDA_VISIBLE_DEVICES)"
expect_eq "SLURM_STEP_GPUS with --gres=gpu:4" "0,1,2,3" "$(srun -N1 --gres=gpu:4 printenv SLURM_STEP_GPUS)"

note "exit codes reach the job record"
j=$(submit -N1 -o /dev/null --wrap 'exit 3')
wait_job "$j" 60 >/dev/null || fail "job $j did not finish"
expect_job "$j" FAILED 3:0

note "scancel sends SIGTERM to the step's tasks"
cat > term.sh <<'EOS'
#!/bin/bash
# The host name is read before: the handler forks nothing, so it is done before srun's SIGKILL follows.
srun bash -c 'h=$(hostname); trap "echo TERM on $h >> term.log; exit 143" TERM; echo ready >> ready.log; sleep 300 & wait'
EOS
j=$(submit -N2 -w 'node[1-2]' -o term.out term.sh)
deadline=$((SECONDS + 60))
until [[ $(grep -c ready ready.log 2>/dev/null) == 2 ]]; do
  (( SECONDS < deadline )) || fail "the step's tasks did not start"
  sleep 0.2
done
scancel "$j"
wait_job "$j" 60 >/dev/null || fail "job $j survived scancel"
expect_eq "tasks that got SIGTERM" "TERM on node1 TERM on node2" "$(sort term.log | tr '\n' ' ' | sed 's/ $//')"
expect_eq "cancelled job state" CANCELLED "$(job_field "$j" JobState)"

pass
