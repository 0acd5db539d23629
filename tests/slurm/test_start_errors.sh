#!/usr/bin/env bash
# An error found on one node before the rendezvous (that node's own input: no GPUs for --nproc-per-node gpu,
# too few cores for --cpu-bind cores) reaches every node: the failing agent still reaches the store and
# publishes it, so every agent ends with its exit code and names the node, instead of waiting --rdzv-timeout
# and blaming the node that failed to come (or, under srun --kill-on-bad-exit as self-launch runs it, being
# killed by SIGTERM: 143). A node rank set for the whole job (DDPRUN_NODE_RANK, PET_NODE_RANK) is such an
# error on every node whose SLURM_NODEID it is not.
source "$(dirname "$0")/lib.sh"
setup
need_ddprun

# agent.sh ID KIND ARGS...: on the node with SLURM_NODEID=ID, KIND is what that node lacks.
cat > agent.sh <<EOS
#!/bin/bash
id=\$1 kind=\$2
shift 2
if [ "\$SLURM_NODEID" = "\$id" ]; then
  case \$kind in
    gpus) unset CUDA_VISIBLE_DEVICES SLURM_STEP_GPUS SLURM_JOB_GPUS ;;   # as on a node without GPUs
    cores) exec taskset -c 0 "$DDPRUN" "\$@" ;;                          # one core for this agent
  esac
fi
exec "$DDPRUN" "\$@"
EOS
chmod +x agent.sh

# check NAME BAD_ID WHAT: every task's stderr (srun -l: "ID: ...") has the failing node's error; the
# failing node says it as its own, the other names the node.
check() {
  local name=$1 bad=$2 what=$3 other=$((1 - $2))
  sed 's/^/   /' "$name.err"
  grep -qE "^$bad: ddprun: error: .*$what" "$name.err" || fail "$name: node id $bad did not report its own error"
  grep -qE "^$other: ddprun: error: node[0-9]+ \(node rank $bad\) could not start: .*$what" "$name.err" \
    || fail "$name: node id $other does not name node rank $bad's error"
  if grep -qE 'timed out|cannot reach' "$name.err"; then fail "$name: a node waited for the rendezvous"; fi
  note "ok: $name: both nodes report node rank $bad's error"
}

for bad in 1 0; do
  note "srun ddprun: node id $bad sees no GPUs"
  timeout 200 srun -N2 --ntasks-per-node=1 --gres=gpu:2 -l ./agent.sh "$bad" gpus \
    --rdzv-timeout 60 --nproc-per-node gpu -- true > "gpus$bad.out" 2> "gpus$bad.err"
  rc=$?
  check "gpus$bad" "$bad" 'no GPUs are visible'
  expect_eq "srun exit code (node id $bad without GPUs)" 2 "$rc"
done

# The self-launch step's own flags: srun --kill-on-bad-exit ends the step as soon as one agent exits, so
# the others must have the cause by then (and keep their code against srun's SIGTERM).
note "srun --kill-on-bad-exit=1 --whole (as self-launch): node id 1 has one core for --cpu-bind cores"
timeout 200 srun -N2 --ntasks=2 --ntasks-per-node=1 --kill-on-bad-exit=1 --whole -l ./agent.sh 1 cores \
  --rdzv-timeout 60 --cpu-bind cores --nproc-per-node 2 -- true > cores.out 2> cores.err
rc=$?
check cores 1 'cpu-bind cores: 2 workers but only 1 core'
expect_eq "srun exit code (--kill-on-bad-exit)" 2 "$rc"

# A node rank set once for the whole step (issue 35): each node's is its SLURM_NODEID, so node id 1 refuses
# DDPRUN_NODE_RANK=0 at once and node id 0 ends with its line, instead of both claiming node rank 0.
note "srun ddprun with DDPRUN_NODE_RANK=0 on every node"
DDPRUN_NODE_RANK=0 timeout 200 srun -N2 --ntasks-per-node=1 -l "$DDPRUN" --rdzv-timeout 60 --no-python -- true \
  > noderank.out 2> noderank.err
rc=$?
check noderank 1 'DDPRUN_NODE_RANK=0 disagrees with SLURM_NODEID=1 of this node'
expect_eq "srun exit code (DDPRUN_NODE_RANK=0)" 2 "$rc"

# In a batch script the refusal comes before srun: every node's agent would get the same node rank.
note "a batch script with PET_NODE_RANK=1 left from a torchrun script"
cat > noderank.sh <<EOS
#!/bin/bash
export PET_NODE_RANK=1
"$DDPRUN" --rdzv-timeout 60 --no-python -- true
EOS
j=$(submit -N2 -o noderank_job.out noderank.sh)
st=$(wait_job "$j" 120) || fail "job $j did not finish (state $st)"
sed 's/^/   /' noderank_job.out
expect_job "$j" FAILED 2:0
grep -q '^ddprun: error: PET_NODE_RANK=1 would reach the agent on every node this batch script starts ddprun on (2 nodes)' \
  noderank_job.out || fail "the batch script's ddprun did not refuse PET_NODE_RANK"
note "ok: a job-wide node rank is refused in a step and in a batch script"
pass
