#!/usr/bin/env bash
# Builds everything and runs every test: the main build (all suites, including the real local Slurm
# cluster and real PyTorch workers), then the unit tests again under ASan/UBSan.
set -euo pipefail
cd "$(dirname "$0")/.."
# ccache hits across clones in different directories (CI builds a fresh clone every time).
export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=true
bash scripts/setup.sh
jobs=$(nproc)

echo "== build (RelWithDebInfo)"
cmake --preset default >/dev/null
cmake --build build -j"$jobs"
echo "== tests"
ctest --test-dir build --output-on-failure -j"$jobs" --timeout 600

if [ "${DDPRUN_SKIP_ASAN:-0}" != "1" ]; then
  echo "== unit tests under ASan + UBSan"
  cmake --preset asan >/dev/null
  cmake --build build-asan -j"$jobs"
  ASAN_OPTIONS=detect_leaks=1 LSAN_OPTIONS="suppressions=$PWD/tests/lsan.supp" UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --test-dir build-asan --output-on-failure -j"$jobs" -L unit --timeout 600
fi
