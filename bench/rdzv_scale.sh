#!/usr/bin/env bash
# The rendezvous at scale, ddprun against PyTorch's c10d TCPStore in the same run (docs/scale.md).
#   bench/rdzv_scale.sh [N ...]        (default 256 1024 4096 16384)
# Writes docs/bench/scale.{jsonl,md,dat,png} and prints the side-by-side table. Figures only.
# Env: C10D_PROCS (client processes for c10d, default 16), C10D_TIMEOUT (s, default 60),
#      SIM_THREADS (rdzv_scale io_context threads, default 1), PROTOCOL (what the driven ddprun
#      speaks: one-conn, today's, the default; two-conn, two connections per agent as before
#      issue 16), DDPRUN (another build's ddprun to drive instead of build/launcher/ddprun).
set -euo pipefail
cd "$(dirname "$0")/.."
export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=true
sizes=("$@")
[ ${#sizes[@]} -eq 0 ] && sizes=(256 1024 4096 16384)
cmake --preset default >/dev/null
cmake --build build -j2 --target ddprun rdzv_scale
out=${SCALE_OUT:-docs/bench}
mkdir -p "$out"
jsonl="$out/scale.jsonl"
: >"$jsonl"

echo "== ddprun: simulated agents against a real ddprun master (token auth)"
# Node rank 1 is a real ddprun agent (8 GPUs a node): its peak RSS is the agent's column.
build/bench/rdzv_scale --ddprun "${DDPRUN:-build/launcher/ddprun}" --protocol "${PROTOCOL:-one-conn}" \
  --threads "${SIM_THREADS:-1}" --real-agent --json "$jsonl" "${sizes[@]}"

# torch 2.x (the project's venv; its libuv server) and Debian's 1.13 (the old anchor), under loopback_hosts.sh: torch
# 2.x's clients look up the name of the IPv4-mapped loopback address, which DNS would answer otherwise.
. scripts/torch2.sh
for py in "$DDPRUN_TORCH2_PYTHON" /usr/bin/python3; do
  [ -x "$py" ] || { echo "(no torch 2.x venv at $DDPRUN_TORCH2_VENV: scripts/setup.sh installs it)"; continue; }
  echo "== c10d TCPStore of $("$py" -c 'import torch; print(torch.__version__)'), the same join workload (plan of 64 bytes per node)"
  TORCH_CPP_LOG_LEVEL=ERROR bash bench/loopback_hosts.sh "$py" bench/c10d_scale.py --procs "${C10D_PROCS:-16}" \
    --timeout "${C10D_TIMEOUT:-60}" --json "$jsonl" "${sizes[@]}" || echo "(c10d_scale exited $?)"
done

echo "== a real ddprun agent's peak RSS (4 agents x 8 workers on loopback)"
bash bench/agent_rss.sh "${DDPRUN:-build/launcher/ddprun}" | tee "$out/scale_agent_rss.txt"

echo "== side by side"
/usr/bin/python3 bench/scale_table.py "$jsonl" "$out"
