#!/usr/bin/env bash
# GPU slices with the fake GPUs: --gpus-per-proc G gives each local worker a disjoint slice of the node's
# GPUs as CUDA_VISIBLE_DEVICES, keeping Slurm's ids; --procs-per-replica adds model-parallel groups.
source "$(dirname "$0")/lib.sh"
setup
need_ddprun

report='echo "$(hostname) $RANK $LOCAL_RANK $CUDA_VISIBLE_DEVICES ${DDPRUN_MP_RANK:-} ${DDPRUN_MP_SIZE:-} ${DDPRUN_DP_RANK:-} ${DDPRUN_DP_SIZE:-}" > '"$WORK"'/w.$RANK'

note "8 GPUs per node, 2 per worker, on 2 nodes: 4 workers per node"
timeout 120 srun -N2 -w 'node[1-2]' --ntasks-per-node=1 --gres=gpu:8 \
  "$DDPRUN" --nproc-per-node gpu --gpus-per-proc 2 -- sh -c "$report" > run.out 2> run.err \
  || fail "srun ddprun --gpus-per-proc 2 exited $?"
slices=("0,1" "2,3" "4,5" "6,7")
for r in 0 1 2 3 4 5 6 7; do
  [[ -e w.$r ]] || fail "rank $r did not run (expected 8 workers)"
  read -r host rank lr cvd _ < "w.$r"
  expect_eq "rank $r host/local rank/GPUs" "node$((r / 4 + 1)) $r $((r % 4)) ${slices[r % 4]}" "$host $rank $lr $cvd"
done
[[ ! -e w.8 ]] || fail "more than 8 workers ran"

note "model-parallel groups: 2 GPUs per worker, 2 workers per replica"
rm -f w.*
timeout 120 srun -N1 -w node1 --gres=gpu:8 \
  "$DDPRUN" --nproc-per-node gpu --gpus-per-proc 2 --procs-per-replica 2 -- sh -c "$report" > mp.out 2> mp.err \
  || fail "srun ddprun --procs-per-replica 2 exited $?"
for r in 0 1 2 3; do
  read -r _ _ _ cvd mpr mps dpr dps < "w.$r" || fail "rank $r did not run"
  expect_eq "rank $r GPUs, MP rank/size, DP rank/size" "${slices[r]} $((r % 2)) 2 $((r / 2)) 2" "$cvd $mpr $mps $dpr $dps"
done

note "ids stay as Slurm gives them: a job holding GPUs 0-3 leaves 4-7 to the next"
holder=$(submit -N1 -w node2 --gres=gpu:4 -o /dev/null --wrap 'sleep 300')
wait_state "$holder" RUNNING 60 || fail "the GPU-holding job $holder did not start"
rm -f w.*
timeout 120 srun -N1 -w node2 --gres=gpu:4 "$DDPRUN" --nproc-per-node gpu --gpus-per-proc 2 -- sh -c "$report" \
  > ids.out 2> ids.err || fail "srun ddprun on GPUs 4-7 exited $?"
read -r _ _ _ cvd0 _ < w.0 || fail "rank 0 did not run"
read -r _ _ _ cvd1 _ < w.1 || fail "rank 1 did not run"
expect_eq "slices of 4,5,6,7" "4,5 6,7" "$cvd0 $cvd1"
scancel "$holder"

note "dry run agrees: JSON plan of the whole job"
# One file per task (%t): both nodes print a plan, and their lines would interleave on one stdout.
timeout 60 srun -N2 -w 'node[1-2]' --ntasks-per-node=1 --gres=gpu:8 --output="$WORK/plan.%t.json" \
  "$DDPRUN" --dry-run --format json --nproc-per-node gpu --gpus-per-proc 2 -- true 2> plan.err \
  || fail "dry run exited $?"
"$PYTHON" - plan.1.json <<'PY' || fail "dry-run plan is wrong (see above)"
import json, sys
plan = json.load(open(sys.argv[1]))
ok = True
def check(what, got, want):
    global ok
    if got != want:
        print(f"FAIL: {what}: got {got!r}, expected {want!r}", file=sys.stderr); ok = False
check("world_size", plan["world_size"], 8)
check("nnodes", plan["nnodes"], 2)
check("node_rank", plan["node_rank"], 1)
check("master_addr", plan["master_addr"], "node1")
for w in plan["workers"]:
    r = w["rank"]
    check(f"rank {r} host", w["host"], f"node{r // 4 + 1}")
    check(f"rank {r} CUDA_VISIBLE_DEVICES", w["env"]["CUDA_VISIBLE_DEVICES"], ["0,1", "2,3", "4,5", "6,7"][r % 4])
check("workers", sorted(w["rank"] for w in plan["workers"]), list(range(8)))
sys.exit(0 if ok else 1)
PY
note "ok: dry-run plan"
pass
