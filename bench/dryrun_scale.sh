#!/usr/bin/env bash
# The dry-run at scale (issue 16, docs/scale.md "The plan"): `ddprun --dry-run` for N nodes x 8
# workers inside a simulated Slurm step (node[00001-N], 8 GPUs each), timed with /usr/bin/time -v.
# Prints one line per size and format: wall time, peak RSS, output size (MB, 10^6 bytes). Figures only.
#   bench/dryrun_scale.sh [BUILD_DIR] [N ...]           (default: build, 2048 4096 16384)
#   bench/dryrun_scale.sh --bytes [BUILD_DIR] [N ...]   only the output's size in bytes, untimed: the
#     one figure here that is deterministic; the cli test "doc figures" compares it with docs/scale.md
#     and docs/cli.md.
set -euo pipefail
cd "$(dirname "$0")/.."
bytes_only=false
if [ "${1:-}" = --bytes ]; then
  bytes_only=true
  shift
fi
build=${1:-build}
shift || true
sizes=("$@")
[ ${#sizes[@]} -eq 0 ] && sizes=(2048 4096 16384)
exe="$build/launcher/ddprun"
[ -x "$exe" ] || { echo "dryrun_scale: $exe not found; build the ddprun target first" >&2; exit 2; }
out=$(mktemp)
timing=$(mktemp)
trap 'rm -f "$out" "$timing"' EXIT

# The dry run of N nodes x 8 GPUs in FORMAT, node 1's view of a Slurm step, on stdout.
dry_run() {
  local n=$1 fmt=$2 last
  last=$(printf '%05d' "$n")
  env -i PATH=/usr/bin:/bin SLURM_JOB_ID=4242 SLURM_STEP_ID=0 \
    SLURM_STEP_NODELIST="node[00001-$last]" SLURM_NODELIST="node[00001-$last]" \
    SLURM_STEP_NUM_NODES="$n" SLURM_STEP_NUM_TASKS="$n" SLURM_STEP_TASKS_PER_NODE="1(x$n)" \
    SLURM_NODEID=0 SLURM_PROCID=0 SLURM_LOCALID=0 CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7 \
    "${@:3}" "$exe" --dry-run --format "$fmt" -- python3 train.py
}

if $bytes_only; then
  printf '%-7s %-5s %12s\n' nodes fmt output_bytes
  for n in "${sizes[@]}"; do
    for fmt in json text; do
      printf '%-7s %-5s %12s\n' "$n" "$fmt" "$(dry_run "$n" "$fmt" | wc -c)"
    done
  done
  exit 0
fi

printf '%-7s %-5s %9s %10s %12s\n' nodes fmt wall_s rss_mb output_mb
for n in "${sizes[@]}"; do
  for fmt in json text; do
    dry_run "$n" "$fmt" /usr/bin/time -v >"$out" 2>"$timing"
    wall=$(awk -F': ' '/Elapsed \(wall clock\)/ {split($2, t, ":"); print t[1] * 60 + t[2]}' "$timing")
    rss=$(awk -F': ' '/Maximum resident set size/ {printf "%.0f", $2 / 1024}' "$timing")
    size=$(stat -c %s "$out")
    printf '%-7s %-5s %9s %10s %12.2f\n' "$n" "$fmt" "$wall" "$rss" "$(echo "$size / 1000000" | bc -l)"
  done
done
