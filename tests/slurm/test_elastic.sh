#!/usr/bin/env bash
# Elastic jobs under Slurm (issue 14). Mid-training, one node's agent and workers die by SIGKILL, as when the
# node is lost; the other agents restart the workers without it, and the trainer resumes from its checkpoint:
#  1. sbatch -N4, --nnodes 3:4 --max-restarts 2: the job goes on at world size 3;
#  2. sbatch -N5, --nnodes 4:4: node5 is a standby and takes the lost node's place; the world stays at 4.
# Either job ends COMPLETED, its last metrics record has the expected world size, and no epoch ran twice
# (the survivors resumed from the checkpoint instead of starting again from epoch 1).
source "$(dirname "$0")/lib.sh"
setup
need_ddprun
need_train
nodes=$(sinfo -h -N -o %N | sort -u | wc -l)
(( nodes >= 5 )) || fail "needs a cluster of 5 nodes, this one has $nodes (tests/slurm/cluster.sh start 5)"

# Global batch 24 divides among 4 and 3 ranks alike. Enough epochs that the job outlives the kill and the
# restart; --checkpoint-every keeps the work lost with the node small.
EPOCHS=${ELASTIC_EPOCHS:-30}
train="--model toy --toy-samples ${TOY_SAMPLES:-4800} --batch-size 24 --epochs $EPOCHS --checkpoint-every 20"

run_case() { # name sbatch-nodes --nnodes lost-node-id expected-final-world
  local name=$1 n=$2 nn=$3 lost=$4 world=$5 j st line
  mkdir -p "$name.ckpt"
  cat > "$name.sh" <<EOS
#!/bin/bash
#SBATCH --no-kill
"$DDPRUN" --nnodes $nn --max-restarts 2 --nproc-per-node 1 -- "$DDPRUN_TRAIN" $train \
  --checkpoint-dir "$WORK/$name.ckpt" --resume --metrics-file "$WORK/$name.metrics.jsonl"
EOS
  note "$name: sbatch -N$n, ddprun --nnodes $nn --max-restarts 2; SIGKILL node id $lost's agent and workers"
  j=$(submit -N"$n" -w "node[1-$n]" -o "$name.out" "$name.sh")
  # Epoch 1 is done and checkpointed: a resume from it is not a start from zero.
  wait_file_grep "$name.out" 'epoch 2/' 240 || fail "$name: training did not complete its first epoch"
  [[ -s $name.ckpt/latest.pt ]] || fail "$name: no checkpoint after the first epoch"
  [[ -n $(step_pids_on_node "$j" "$lost") ]] || fail "$name: found no agent of job $j on node id $lost"
  kill_node_tasks "$j" "$lost"
  note "$name: node id $lost's agent and workers are gone"
  st=$(wait_job "$j" 600) || fail "$name: job $j did not finish after the loss (state $st)"
  expect_job "$j" COMPLETED 0:0
  line=$(grep -m1 -o 'resumed from .* at epoch [0-9]* batch [0-9]*.*' "$name.out") \
    || fail "$name: the survivors did not resume from the checkpoint"
  note "$name: ok: $line"
  "$PYTHON" - "$name.metrics.jsonl" "$world" "$EPOCHS" <<'PY' || fail "$name: metrics records are wrong (see above)"
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
epochs = [r["epoch"] for r in recs]
want = list(range(1, int(sys.argv[3]) + 1))
if epochs != want:
    sys.exit(f"epochs recorded {epochs}, expected {want} once each (an epoch ran twice, or one is missing)")
if recs[-1]["world_size"] != int(sys.argv[2]):
    sys.exit(f"last record has world_size {recs[-1]['world_size']}, expected {sys.argv[2]}")
print(f"-- world sizes by epoch: {[r['world_size'] for r in recs]}")
PY
}

run_case shrink 4 3:4 2 3
run_case spare 5 4:4 2 4
pass
