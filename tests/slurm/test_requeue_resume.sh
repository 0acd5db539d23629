#!/usr/bin/env bash
# A requeued job resumes: `scontrol requeue` stops the running job (SIGTERM; the trainer checkpoints), the job
# starts again with the same id and SLURM_RESTART_COUNT=1, and `--resume` continues from the checkpoint.
source "$(dirname "$0")/lib.sh"
setup
need_ddprun
need_train

mkdir -p ckpt
# The first attempt would run for ever. The restarted one finishes the epoch it was in: metrics.jsonl holds one
# line per finished epoch, so the epoch in progress is that count + 1.
cat > job.sh <<EOS
#!/bin/bash
#SBATCH --requeue
#SBATCH --open-mode=append
echo "attempt restart_count=\${SLURM_RESTART_COUNT:-0} job=\$SLURM_JOB_ID"
epochs=100000
if [ -n "\${SLURM_RESTART_COUNT:-}" ]; then epochs=\$(( \$(wc -l < "$WORK/metrics.jsonl") + 1 )); fi
"$DDPRUN" --nproc-per-node 1 -- "$DDPRUN_TRAIN" --model toy --toy-samples ${TOY_SAMPLES:-2000} --batch-size 8 \
  --epochs \$epochs --checkpoint-dir "$WORK/ckpt" --resume --metrics-file "$WORK/metrics.jsonl"
EOS
j=$(submit -N2 -o job.out job.sh)
wait_file_grep job.out 'epoch 1/' 120 || fail "training did not complete its first epoch"
note "requeue job $j while it trains"
scontrol requeue "$j" || fail "scontrol requeue $j was refused"
deadline=$((SECONDS + 60))
until [[ $(job_field "$j" JobState) == PENDING ]]; do
  (( SECONDS < deadline )) || fail "job $j did not go back to PENDING after requeue"
  sleep 0.2
done
# Slurm holds a requeued job until its revoked credentials expire (cred_expire=5 s in the test cluster);
# releasing it earlier makes slurmd refuse the batch launch ("Job credential revoked").
st=$(wait_job "$j" 180) || fail "the requeued job did not finish (state $st)"
expect_job "$j" COMPLETED 0:0
expect_eq "Restarts" 1 "$(job_field "$j" Restarts)"
grep -q 'attempt restart_count=1' job.out || fail "the second attempt did not see SLURM_RESTART_COUNT=1"
grep -q 'stopped by signal 15' job.out || fail "the first attempt's trainer did not checkpoint on SIGTERM"
line=$(grep -m1 -o 'resumed from .*' job.out) || fail "the second attempt did not resume from the checkpoint"
note "ok: $line"
# The checkpoint was taken mid-run, so the resumed position is past step 0.
[[ $line =~ \(step\ ([0-9]+)\) ]] && (( BASH_REMATCH[1] > 0 )) || fail "resumed at step 0: '$line'"
pass
