#!/usr/bin/env bash
# The sbatch/ templates run as written on the local cluster, with small sizes passed through the environment.
source "$(dirname "$0")/lib.sh"
setup
need_ddprun
need_train

T=$SOURCE_DIR/sbatch
export DDPRUN DDPRUN_TRAIN
small="--model toy --toy-samples ${TOY_SAMPLES:-2000} --batch-size 16 --backend gloo"

run_template() { # name expected-world sbatch-options... ; template from $TEMPLATE, TRAIN_ARGS from env
  local name=$1 world=$2; shift 2
  local j st
  j=$(submit -o "$name.out" "$@" "$T/$TEMPLATE")
  st=$(wait_job "$j" 300) || fail "$TEMPLATE: job $j did not finish (state $st)"
  expect_job "$j" COMPLETED 0:0
  grep -q "world $world " "$name.out" || fail "$TEMPLATE: the trainer did not report world $world"
  note "ok: $TEMPLATE ran $world workers"
}

TEMPLATE=single-node-gpus.sbatch TRAIN_ARGS="$small --epochs 1" \
  run_template single 4 -N1 --gres=gpu:4 --cpus-per-task=4
TEMPLATE=multi-node-gpus.sbatch TRAIN_ARGS="$small --epochs 1" \
  run_template multi 8 -N2 --gres=gpu:4 --cpus-per-task=4
TEMPLATE=model-parallel.sbatch TRAIN_ARGS="$small --epochs 1" \
  run_template mp 8 -N2 --gres=gpu:8 --cpus-per-task=8
grep -q 'model-parallel' mp.out || fail "model-parallel.sbatch did not run the model-parallel path"
TEMPLATE=cpu-only.sbatch NPROC=2 TRAIN_ARGS="--model toy --toy-samples ${TOY_SAMPLES:-2000} --batch-size 16 --epochs 1" \
  run_template cpu 4 -N2 --cpus-per-task=4
# cpus-per-task 4 / 2 workers per node = 2 threads each.
grep -q 'threads 2' cpu.out || fail "cpu-only.sbatch: workers did not get 2 threads each (OMP_NUM_THREADS from --cpus-per-task)"
note "ok: cpu-only workers use 2 threads"

# One standby node: 2 of the 3 nodes train (2 GPUs each), node3 stands by; no node is lost here (test_elastic.sh
# loses one).
mkdir -p elastic.ckpt
TEMPLATE=elastic.sbatch NNODES=2:2 CKPT_DIR=$WORK/elastic.ckpt TRAIN_ARGS="$small --epochs 1" \
  run_template elastic 4 -N3 --gres=gpu:2 --cpus-per-task=2
grep -q 'standby' elastic.out || fail "elastic.sbatch: the startup table did not show node3 as a standby"
note "ok: elastic.sbatch ran 2 nodes and a standby"

note "preemptible.sbatch: USR2 -> checkpoint -> requeue -> resume"
mkdir -p pre.ckpt
j=$(CKPT_DIR=$WORK/pre.ckpt TRAIN_ARGS="$small --epochs 12" submit -N2 --gres=gpu:2 --cpus-per-task=2 -o pre.out \
    "$T/preemptible.sbatch")
wait_file_grep pre.out 'epoch 1/' 120 || fail "preemptible: training did not complete its first epoch"
# What --signal=B:USR2@90 does before the time limit, now.
scancel --batch --signal=USR2 "$j" || fail "scancel --batch --signal=USR2 $j was refused"
wait_file_grep pre.out 'requeueing job' 60 || fail "preemptible: the script did not requeue itself after USR2 (if the run had already finished, raise TOY_SAMPLES)"
deadline=$((SECONDS + 60))
until [[ $(job_field "$j" JobState) == PENDING ]]; do
  (( SECONDS < deadline )) || fail "preemptible: job $j did not go back to PENDING"
  sleep 0.2
done
# Slurm holds a requeued job until its revoked credentials expire (cred_expire=5 s in the test cluster);
# releasing it earlier makes slurmd refuse the batch launch ("Job credential revoked").
st=$(wait_job "$j" 300) || fail "preemptible: the requeued job did not finish (state $st)"
expect_job "$j" COMPLETED 0:0
grep -q 'stopped by signal 12' pre.out || fail "preemptible: the trainer did not checkpoint on USR2"
grep -q 'restart count 1' pre.out || fail "preemptible: the second start did not see SLURM_RESTART_COUNT=1"
grep -q 'resumed from' pre.out || fail "preemptible: the second start did not resume"
note "ok: $(grep -m1 -o 'resumed from .*' pre.out)"
pass
