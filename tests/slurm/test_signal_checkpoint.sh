#!/usr/bin/env bash
# scancel and the time limit: Slurm sends SIGTERM, ddprun passes it to the workers, and ddprun-train finishes
# its step, writes a checkpoint and exits.
# Set DDPRUN_SLURM_SKIP_TIME_LIMIT=1 to skip the time-limit half (it waits for a real 1-minute limit).
source "$(dirname "$0")/lib.sh"
setup
need_ddprun
need_train

# Long enough that only a signal ends it; small epochs so checkpoints are cheap.
train_args=(--model toy --toy-samples "${TOY_SAMPLES:-2000}" --batch-size 8 --epochs 100000)

run_until_signal() { # name sbatch-options... ; leaves the job id in $job
  local name=$1; shift
  mkdir -p "$name.ckpt"
  cat > "$name.sh" <<EOS
#!/bin/bash
"$DDPRUN" --nproc-per-node 1 -- "$DDPRUN_TRAIN" ${train_args[*]} --checkpoint-dir "$WORK/$name.ckpt"
EOS
  job=$(submit -N2 -o "$name.out" "$@" "$name.sh")
  wait_file_grep "$name.out" 'epoch 1/' 120 || fail "$name: training did not complete its first epoch"
}

note "scancel"
run_until_signal cancel
scancel "$job"
st=$(wait_job "$job" 90) || fail "job $job did not end after scancel (state $st)"
expect_eq "state after scancel" CANCELLED "$st"
wait_file_grep cancel.out 'stopped by signal 15' 10 || fail "the trainer did not report SIGTERM (no 'stopped by signal 15')"
[[ -s cancel.ckpt/latest.pt ]] || fail "no checkpoint cancel.ckpt/latest.pt after scancel"
note "ok: $(grep -m1 -o 'stopped by signal 15.*' cancel.out)"

if [[ -n ${DDPRUN_SLURM_SKIP_TIME_LIMIT:-} ]]; then pass; fi
note "time limit (--time=1: about 70 s)"
run_until_signal timeout --time=1
st=$(wait_job "$job" 180) || fail "job $job outlived its time limit (state $st)"
expect_eq "state after the time limit" TIMEOUT "$st"
wait_file_grep timeout.out 'stopped by signal 15' 10 || fail "the trainer did not report SIGTERM at the time limit"
[[ -s timeout.ckpt/latest.pt ]] || fail "no checkpoint timeout.ckpt/latest.pt after the time limit"
note "ok: $(grep -m1 -o 'stopped by signal 15.*' timeout.out)"
pass
