#!/bin/sh
# A --health-check for GPU nodes (docs/agent.md, "Health check"):
#   ddprun --health-check 'examples/health/gpu_node_check.sh /scratch/ckpt' ...
# Exits non-zero, with one line saying why, when this node should not take part:
#   - fewer GPUs than EXPECT_GPUS (default: those CUDA_VISIBLE_DEVICES names, if set) per nvidia-smi;
#   - a GPU with less than MIN_FREE_MIB (default 1024) MiB of free memory;
#   - the checkpoint directory (first argument, optional) missing or not writable.
# Without nvidia-smi the GPU checks are skipped. Keep it well under --health-check-timeout (default 60 s).
set -u
ckpt_dir=${1:-}
min_free=${MIN_FREE_MIB:-1024}

if command -v nvidia-smi >/dev/null 2>&1; then
  free=$(nvidia-smi --query-gpu=memory.free --format=csv,noheader,nounits 2>&1) || {
    echo "nvidia-smi failed: $free"
    exit 1
  }
  count=$(printf '%s\n' "$free" | grep -c .)
  expect=${EXPECT_GPUS:-}
  if [ -z "$expect" ] && [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then
    expect=$(printf '%s\n' "$CUDA_VISIBLE_DEVICES" | tr ',' '\n' | grep -c .)
  fi
  if [ -n "$expect" ] && [ "$count" -lt "$expect" ]; then
    echo "only $count of $expect GPUs visible"
    exit 1
  fi
  i=0
  for mib in $free; do
    if [ "$mib" -lt "$min_free" ]; then
      echo "GPU $i has only $mib MiB free (need $min_free)"
      exit 1
    fi
    i=$((i + 1))
  done
fi

if [ -n "$ckpt_dir" ]; then
  probe="$ckpt_dir/.ddprun-health-$(hostname)-$$"
  if ! touch "$probe" 2>/dev/null; then
    echo "checkpoint directory $ckpt_dir is not writable"
    exit 1
  fi
  rm -f "$probe"
fi
exit 0
