#!/usr/bin/env bash
# GPU jobs started the way users start them from an allocation:
#  - `salloc -N2 --gres=gpu:2 ddprun --nproc-per-node gpu ...`: the salloc shell has no GPU variables,
#    so GPU counts come from the nodes after self-launch (before, this exited 2, "no GPUs are visible");
#  - `sbatch --ntasks-per-node=2 --gpus-per-task=1` with plain ddprun: each node's agent must hold both
#    tasks' GPUs (before, it saw one and ran world size 2 instead of 4, silently).
source "$(dirname "$0")/lib.sh"
setup
need_ddprun

report='echo "$(hostname) $RANK $WORLD_SIZE $CUDA_VISIBLE_DEVICES" > '"$WORK"'/w.$RANK'

note "salloc -N2 --gres=gpu:2 ddprun --nproc-per-node gpu"
timeout 180 salloc -N2 -w 'node[1-2]' --gres=gpu:2 "$DDPRUN" --nproc-per-node gpu -- sh -c "$report" \
  > salloc.out 2> salloc.err
rc=$?
sed 's/^/   /' salloc.err | tail -n 20
[[ $rc == 0 ]] || fail "salloc ddprun exited $rc (expected 0)"
for r in 0 1 2 3; do
  [[ -e w.$r ]] || fail "rank $r did not run (expected 2 nodes x 2 GPUs = 4 workers)"
  read -r host rank ws cvd < "w.$r"
  # Without --gpus-per-proc every worker sees all of its node's GPUs.
  expect_eq "rank $r host, world size and GPUs" "node$((r / 2 + 1)) 4 0,1" "$host $ws $cvd"
done
[[ ! -e w.4 ]] || fail "more than 4 workers ran"

note "sbatch --ntasks-per-node=2 --gpus-per-task=1, plain ddprun --nproc-per-node gpu"
rm -f w.*
j=$(submit -N2 -w 'node[3-4]' --ntasks-per-node=2 --gpus-per-task=1 -o job.out \
  --wrap "\"$DDPRUN\" --nproc-per-node gpu -- sh -c '$report'")
st=$(wait_job "$j" 240) || fail "job $j did not finish (state $st)"
sed 's/^/   /' job.out | tail -n 20
expect_job "$j" COMPLETED 0:0
for r in 0 1 2 3; do
  [[ -e w.$r ]] || fail "rank $r did not run: the agents did not get both tasks' GPUs"
  read -r host rank ws cvd < "w.$r"
  expect_eq "rank $r host and world size" "node$((r / 2 + 3)) 4" "$host $ws"
done
! grep -q "warning" job.out || fail "unexpected warning: $(grep warning job.out)"
pass
