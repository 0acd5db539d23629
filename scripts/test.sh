#!/usr/bin/env bash
# Builds everything and runs every test: the format gate, clang-tidy over the five layers, a plain Release
# build, the main build (all suites, including the real local Slurm cluster and real PyTorch workers), the
# portable build and its checks, then the unit tests again under ASan/UBSan and the unit and loopback tests under
# TSan.
#
# Two lanes (docs/install.md, "The test command's time"): the main build and its tests in the foreground; in
# the background, at the lowest CPU priority, clang-tidy, the plain Release build, the sanitizer builds and the
# portable build and its checks, which use the CPU that the main tests leave idle while they wait on processes,
# sockets and Slurm. The
# sanitizer builds build only the test programs their tests run. Each stage's wall time is in
# build-ci/times.txt and printed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
# ccache hits across clones in different directories (CI builds a fresh clone every time).
export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=true
jobs=$(nproc)
logs=build-ci
rm -rf "$logs"
mkdir -p "$logs"
times=$logs/times.txt
begin=$SECONDS

# stage NAME FUNCTION: runs it, and records its wall time.
stage() {
  local t=$SECONDS
  echo "== $1"
  "$2"
  printf '%-62s %5d s\n' "$1" $((SECONDS - t)) >>"$times"
}

format_gate() {
  if ! git ls-files -z '*.cpp' '*.hpp' | xargs -0 clang-format --dry-run --Werror; then
    echo "format: the files above differ from .clang-format; run: git ls-files '*.cpp' '*.hpp' | xargs clang-format -i" >&2
    return 1
  fi
}

# Every unit of the five layers (about 11 min of CPU uncached); units unchanged since they passed are skipped.
tidy() { bash scripts/tidy.sh; }

# As packagers build: no preset, default warnings, without MUNGE.
plain_release() {
  cmake -S . -B build-plain-release -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF -DDDPRUN_BUILD_TRAINER=OFF \
    -DDDPRUN_WITH_MUNGE=OFF >/dev/null
  cmake --build build-plain-release -j"$jobs" --target ddprun
  # Built without MUNGE: asking for it is one clear line and exit 2; token auth still runs a job. Two
  # nodes, so that a store is opened (a one-node run opens none and checks no auth setting).
  local port msg rc
  port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  local plain=(build-plain-release/launcher/ddprun --nnodes 2 --rdzv-endpoint "127.0.0.1:$port")
  set +e
  msg=$(timeout 60 "${plain[@]}" --node-rank 0 --rdzv-auth munge --no-python -- /bin/true 2>&1)
  rc=$?
  set -e
  if [ $rc -ne 2 ] || ! grep -q "built without MUNGE" <<<"$msg"; then
    echo "no-MUNGE build: expected exit 2 naming the missing MUNGE, got $rc: $msg" >&2
    return 1
  fi
  DDPRUN_TOKEN=ci-token timeout 120 "${plain[@]}" --node-rank 1 --rdzv-auth token --no-python -- /bin/true &
  DDPRUN_TOKEN=ci-token timeout 120 "${plain[@]}" --node-rank 0 --rdzv-auth token --no-python -- /bin/true
  wait $!
}

main_build() {
  cmake --preset default >/dev/null
  cmake --build build -j"$jobs"
}

# The programs that the tests labelled $1 (less those matching $2) run, as the main build lists them: what a
# sanitizer build must build. Only programs of the build count: a test that runs /usr/bin/python3 (the file
# map's) needs no target.
programs_of() {
  local exclude=()
  [ -z "${2:-}" ] || exclude=(-E "$2")
  ctest --test-dir build --show-only=json-v1 -L "$1" "${exclude[@]}" | /usr/bin/python3 -c '
import json, os, sys
build = os.path.realpath("build") + os.sep
names = {os.path.basename(t["command"][0]) for t in json.load(sys.stdin)["tests"]
         if t.get("command") and os.path.realpath(t["command"][0]).startswith(build)}
print(" ".join(sorted(names)))'
}

# The libslurm oracle and the fuzz replays are single-threaded and slow under TSan: left out. So is the
# reaper test: it SIGKILLs a forked agent of a threaded process, which TSan's runtime does not survive (it
# hangs); it runs in the main build and under ASan.
tsan_excluded='hostlist_oracle|fuzz_replay|reaper'

asan_build() {
  cmake --preset asan >/dev/null
  # shellcheck disable=SC2046
  cmake --build build-asan -j"$jobs" --target $(programs_of unit)
}

tsan_build() {
  cmake --preset tsan >/dev/null
  # shellcheck disable=SC2046
  cmake --build build-tsan -j"$jobs" --target $(programs_of 'unit|loopback' "$tsan_excluded")
}

# The trainer against PyPI's libtorch 2.x with CUDA and NCCL (compile and link: no GPU here), which the
# trainer_torch2:* tests run on the CPU; then the GPU check's steps that need no GPU (the GPU ones say SKIP).
. scripts/torch2.sh
gpu_kit() {
  bash scripts/gpu-kit.sh >/dev/null
  PYTHON="$DDPRUN_TORCH2_PYTHON" bash scripts/gpu-check.sh
}

# The portable build (zig, glibc 2.28) for x86_64 and aarch64, its wheels and tarballs in dist/, and the proof
# that they run where the Debian build cannot: symbols, auditwheel, a fresh venv running the e2e suite's named
# part with the main build's e2e_tests, a bullseye chroot, a chroot of the binary and libc alone, aarch64 under
# qemu (docs/install.md). DDPRUN_PORTABLE_ARCHS=x86_64 checks that one alone.
portable() { bash scripts/portable-check.sh; }

main_tests() { ctest --test-dir build --output-on-failure -j"$jobs" --timeout 600; }

asan_tests() {
  ASAN_OPTIONS=detect_leaks=1 LSAN_OPTIONS="suppressions=$PWD/tests/lsan.supp" UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --test-dir build-asan --output-on-failure -j"$jobs" -L unit --timeout 600
}

tsan_tests() {
  TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
    ctest --test-dir build-tsan --output-on-failure -j"$jobs" -L 'unit|loopback' -E "$tsan_excluded" --timeout 600
}

# The background lane: its output in $logs/background.log, shown when it ends.
background() {
  renice -n 19 "$BASHPID" >/dev/null
  stage "clang-tidy (scripts/tidy.sh)" tidy
  stage "plain Release build (no preset, without MUNGE) and its checks" plain_release
  if [ "${DDPRUN_SKIP_ASAN:-0}" != 1 ]; then stage "ASan + UBSan build (the unit tests' programs)" asan_build; fi
  if [ "${DDPRUN_SKIP_TSAN:-0}" != 1 ]; then stage "TSan build (the unit and loopback tests' programs)" tsan_build; fi
  if [ "${DDPRUN_SKIP_PORTABLE:-0}" != 1 ]; then stage "portable build and its checks (scripts/portable-check.sh)" portable; fi
}

show_times() {
  echo "== stage times (wall; the background lane's stages overlap the foreground's)"
  cat "$times"
  printf '%-62s %5d s\n' "whole test command" $((SECONDS - begin))
}

setup() { bash scripts/setup.sh; }
# The background lane and whatever it runs, when this script ends before it.
kill_tree() {
  local child
  for child in $(pgrep -P "$1" || true); do kill_tree "$child"; done
  kill "$1" 2>/dev/null || true
}

stage "setup (scripts/setup.sh)" setup
stage "format (clang-format, whole tree)" format_gate
stage "main build (RelWithDebInfo, warnings as errors)" main_build

(background) >"$logs/background.log" 2>&1 &
lane=$!
# Whatever ends this script ends the lane too.
trap 'kill_tree $lane' EXIT

if [ -x "$DDPRUN_TORCH2_PYTHON" ]; then
  stage "ddprun-train against torch $DDPRUN_TORCH2_VERSION with CUDA (gpu-kit.sh), gpu-check.sh here" gpu_kit
else
  echo "== no torch $DDPRUN_TORCH2_VERSION (DDPRUN_SKIP_TORCH2=1 at setup): the CUDA trainer build and its tests are skipped"
fi
stage "tests (main build, every suite)" main_tests

echo "== waiting for the background lane (clang-tidy, plain Release, sanitizer builds, portable build)"
lane_rc=0
wait $lane || lane_rc=$?
trap - EXIT
cat "$logs/background.log"
if [ $lane_rc -ne 0 ]; then
  echo "the background lane failed (exit $lane_rc): its output is above, and in $logs/background.log" >&2
  show_times
  exit 1
fi

if [ "${DDPRUN_SKIP_ASAN:-0}" != 1 ]; then stage "unit tests under ASan + UBSan" asan_tests; fi
if [ "${DDPRUN_SKIP_TSAN:-0}" != 1 ]; then stage "unit and loopback tests under TSan" tsan_tests; fi
show_times
