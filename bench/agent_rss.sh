#!/usr/bin/env bash
# Peak RSS of real ddprun agents: NODES agents (default 4) x 8 workers (/bin/true) on loopback,
# token auth, each agent under /usr/bin/time. Prints one line per node rank and the maximum.
#   bench/agent_rss.sh DDPRUN [NODES]
set -euo pipefail
ddprun=$1
nodes=${2:-4}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
export DDPRUN_TOKEN=agent-rss-bench
for r in $(seq 0 $((nodes - 1))); do
  /usr/bin/time -f "%M" -o "$dir/rss.$r" "$ddprun" --nnodes "$nodes" --node-rank "$r" \
    --rdzv-endpoint "127.0.0.1:$port" --rdzv-id rss --rdzv-auth token --nproc-per-node 8 --quiet \
    -- /bin/true >"$dir/log.$r" 2>&1 &
done
wait
max=0
for r in $(seq 0 $((nodes - 1))); do
  kb=$(tail -1 "$dir/rss.$r")
  echo "agent node rank $r: peak RSS ${kb} KB"
  [ "$kb" -gt "$max" ] && max=$kb
done
echo "agent peak RSS max: $((max / 1024)) MB ($nodes agents x 8 workers)"
