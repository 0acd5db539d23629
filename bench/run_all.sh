#!/usr/bin/env bash
# One command for every benchmark, each side by side with its PyTorch counterpart in the same run:
#   launcher (launch, teardown, SIGTERM to exit, log throughput, RSS) against torchrun 2.x (the project's venv,
#   scripts/torch2.sh) and Debian's 1.13, store scaling against c10d::TCPStore of both (2.x: its libuv server),
#   ddprun-train against Python DDP, ddprun-train with and without --cpu-bind.
# Writes docs/benchmarks.md and the plots under docs/bench/. Run it on a quiet machine.
#   bench/run_all.sh [--quick]     (--quick: fewer repeats, torchrun only at --monitor_interval 0.1)
set -euo pipefail
cd "$(dirname "$0")/.."
# ccache hits across clones in different directories (CI builds a fresh clone every time).
export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=true
quick=0
[ "${1:-}" = "--quick" ] && quick=1
bash scripts/setup.sh
cmake --preset default >/dev/null
targets=(ddprun fake_worker store_bench torch_store_bench ddprun-train)
# torch2_store_bench exists when the torch 2.x venv does (cmake/Torch2.cmake).
cmake --build build --target help | grep -q torch2_store_bench && targets+=(torch2_store_bench)
cmake --build build -j"$(nproc)" --target "${targets[@]}"

out=docs/bench
mkdir -p "$out"
reps=3
store_ns="64 128 256 512 1024 2048 4096"
launcher_flags=()
if [ $quick = 1 ]; then
  reps=2
  store_ns="64 256 1024 2048"
  launcher_flags=(--quick)
fi

echo "== launcher against torchrun"
/usr/bin/python3 bench/bench_launcher.py build "$out" --repeat "$reps" "${launcher_flags[@]}"

echo "== store scaling against c10d::TCPStore (torch 1.13, and 2.x's libuv server)"
# Client threads SCHED_IDLE (they never take the server's CPU, as on a cluster where they sit on
# other nodes; see bench/bench_harness.hpp), then plain SCHED_OTHER. 9 runs: each is well under a
# second here.
for sched in idle normal; do
  # shellcheck disable=SC2086
  build/bench/store_bench --runs 9 --sched $sched $store_ns | tee "$out/store_ddprun_$sched.md"
  # torch 1.13's server dies of EMFILE at 4096 clients; a crash there is a result, not a bench failure. c10d runs
  # under loopback_hosts.sh: torch 2.x's clients look up the name of the IPv4-mapped loopback address.
  # shellcheck disable=SC2086
  bash bench/loopback_hosts.sh build/bench/torch/torch_store_bench --runs "$reps" --sched $sched $store_ns | \
    tee "$out/store_c10d_$sched.md" || \
    echo "(torch_store_bench exited $? at the largest N)" | tee -a "$out/store_c10d_$sched.md"
  if [ -x build/bench/torch2_store_bench ]; then
    # shellcheck disable=SC2086
    TORCH_CPP_LOG_LEVEL=ERROR bash bench/loopback_hosts.sh build/bench/torch2_store_bench --runs "$reps" \
      --sched $sched $store_ns | tee "$out/store_c10d2_$sched.md" || \
      echo "(torch2_store_bench exited $? at the largest N)" | tee -a "$out/store_c10d2_$sched.md"
  fi
done

echo "== ddprun-train against Python DDP"
/usr/bin/python3 bench/torch_train/run.py --trainer build/examples/train/ddprun-train --reps "$reps" \
  | tee "$out/trainer.md"

echo "== ddprun-train with and without --cpu-bind"
/usr/bin/python3 bench/torch_train/cpu_bind.py --ddprun build/launcher/ddprun \
  --trainer build/examples/train/ddprun-train --reps "$reps" 2>/dev/null | tee "$out/cpu_bind.md"

/usr/bin/python3 bench/assemble.py "$out" docs/benchmarks.md
echo "wrote docs/benchmarks.md"
