#!/usr/bin/env bash
# Elastic recovery on the local Slurm cluster (docs/benchmarks.md, "Elastic recovery"): sbatch jobs whose
# ddprun loses one node's agent and workers (SIGKILL, as a dead node) in the middle of a run of real PyTorch
# workers (tests/e2e/elastic_worker.py); the phases come from the survivors' JSON events
# (bench/elastic_recovery.py). Figures only. Needs root, slurm-wlm and munge, and a built ddprun.
#   bench/elastic_slurm.sh [trials]      (default 3)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
trials=${1:-3}
export DDPRUN=${DDPRUN:-$ROOT/build/launcher/ddprun} PYTHON=/usr/bin/python3 TEST_NAME=elastic_bench
export DDPRUN_SLURM_DIR=${DDPRUN_SLURM_DIR:-/tmp/ddprun-slurm-bench}
started=0
if [[ ! -e $DDPRUN_SLURM_DIR/etc/slurm.conf ]]; then
  bash tests/slurm/cluster.sh start 5 --gpus 8 --cpus 16 >/dev/null
  started=1
fi
source tests/slurm/lib.sh
setup
[[ $started == 1 ]] && trap 'cleanup; DDPRUN_SLURM_DIR=$DDPRUN_SLURM_DIR bash $ROOT/tests/slurm/cluster.sh stop >/dev/null' EXIT
echo "scenario  trial  detection  teardown  round   spawn   total   all-reduce  (s from the loss)"
one() { # scenario nodes --nnodes lost-node-id world
  local name=$1 n=$2 nn=$3 lost=$4 world=$5 d j t_loss
  d=$WORK/$name.$6
  mkdir -p "$d"
  cat >"$d/job.sh" <<EOS
#!/bin/bash
#SBATCH --no-kill
export DIR=$d ELASTIC_WORKER_COLLECTIVES=1
"$DDPRUN" --log-format json --nnodes $nn --max-restarts 2 --nproc-per-node 1 --term-timeout 3 \
  --python /usr/bin/python3 $ROOT/tests/e2e/elastic_worker.py
EOS
  j=$(submit -N"$n" -w "node[1-$n]" -o "$d/out" "$d/job.sh")
  for _ in $(seq 600); do
    [[ $(ls "$d"/ready_* 2>/dev/null | wc -l) -ge $((n < 5 ? n : 4)) ]] && break
    sleep 0.1
  done
  sleep 0.5
  t_loss=$(date +%s.%N)
  kill_node_tasks "$j" "$lost"
  wait_job "$j" 300 >/dev/null || true
  /usr/bin/python3 "$ROOT/bench/elastic_recovery.py" --json "${JSON:-/dev/null}" --slurm-out "$name" "$d/out" "$t_loss" "$world" |
    sed "s/^\($name *\) 0 /\1 $6 /" || { echo "$name   $6  did not recover (job $j: $(job_field "$j" JobState))"; grep -E "\"event\":\"(error|remote_abort|restart)\"" "$d/out" | cut -c1-400 | tail -8; }
}
[[ ${ONLY:-} && ${ONLY} != shrink ]] || for t in $(seq 0 $((trials - 1))); do one shrink 4 3:4 2 3 "$t"; done
[[ ${ONLY:-} && ${ONLY} != standby ]] || for t in $(seq 0 $((trials - 1))); do one standby 5 4:4 2 4 "$t"; done
[[ ${ONLY:-} && ${ONLY} != master ]] || for t in $(seq 0 $((trials - 1))); do one master 4 3:4 0 3 "$t"; done
