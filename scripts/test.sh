#!/usr/bin/env bash
# Builds everything and runs every test: the format gate, clang-tidy over the five layers, a plain Release
# build, the main build (all suites, including the real local Slurm cluster and real PyTorch workers), the
# portable build and its checks, then the unit tests again under ASan/UBSan and the unit and loopback tests under TSan.
set -euo pipefail
cd "$(dirname "$0")/.."
# ccache hits across clones in different directories (CI builds a fresh clone every time).
export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=true
bash scripts/setup.sh
jobs=$(nproc)

echo "== format (clang-format, whole tree)"
if ! git ls-files -z '*.cpp' '*.hpp' | xargs -0 clang-format --dry-run --Werror; then
  echo "format: the files above differ from .clang-format; run: git ls-files '*.cpp' '*.hpp' | xargs clang-format -i" >&2
  exit 1
fi

# Every unit of the five layers: about 11 min of CPU, 8 min at -j2 on a shared 2-core VM (docs/install.md).
echo "== clang-tidy (.clang-tidy's checks over core/ store/ rendezvous/ agent/ launcher/: scripts/tidy.sh)"
bash scripts/tidy.sh

echo "== plain Release build (as packagers build: no preset, default warnings), without MUNGE"
cmake -S . -B build-plain-release -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF -DDDPRUN_BUILD_TRAINER=OFF \
  -DDDPRUN_WITH_MUNGE=OFF >/dev/null
cmake --build build-plain-release -j"$jobs" --target ddprun
# Built without MUNGE: asking for it is one clear line and exit 2; token auth still runs a job. Two
# nodes, so that a store is opened (a one-node run opens none and checks no auth setting).
port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
plain=(build-plain-release/launcher/ddprun --nnodes 2 --rdzv-endpoint "127.0.0.1:$port")
set +e
msg=$(timeout 60 "${plain[@]}" --node-rank 0 --rdzv-auth munge --no-python -- /bin/true 2>&1); rc=$?
set -e
if [ $rc -ne 2 ] || ! grep -q "built without MUNGE" <<<"$msg"; then
  echo "no-MUNGE build: expected exit 2 naming the missing MUNGE, got $rc: $msg" >&2
  exit 1
fi
export DDPRUN_TOKEN=ci-token
timeout 120 "${plain[@]}" --node-rank 1 --rdzv-auth token --no-python -- /bin/true &
timeout 120 "${plain[@]}" --node-rank 0 --rdzv-auth token --no-python -- /bin/true
wait $!
unset DDPRUN_TOKEN

echo "== build (RelWithDebInfo, warnings as errors)"
cmake --preset default >/dev/null
cmake --build build -j"$jobs"

# The trainer against PyPI's libtorch 2.x with CUDA and NCCL (compile and link: no GPU here), which the
# trainer_torch2:* tests below run on the CPU; then the GPU check's steps that need no GPU (the GPU ones say SKIP).
. scripts/torch2.sh
if [ -x "$DDPRUN_TORCH2_PYTHON" ]; then
  echo "== ddprun-train against torch $DDPRUN_TORCH2_VERSION with CUDA (scripts/gpu-kit.sh), and scripts/gpu-check.sh here"
  bash scripts/gpu-kit.sh >/dev/null
  PYTHON="$DDPRUN_TORCH2_PYTHON" bash scripts/gpu-check.sh
else
  echo "== no torch $DDPRUN_TORCH2_VERSION (DDPRUN_SKIP_TORCH2=1 at setup): the CUDA trainer build and its tests are skipped"
fi
echo "== tests"
ctest --test-dir build --output-on-failure -j"$jobs" --timeout 600

# The portable build (zig, glibc 2.28) for x86_64 and aarch64, its wheels and tarballs in dist/, and the proof that
# they run where the Debian build cannot: symbols, auditwheel, a fresh venv running the e2e suite's named part,
# a bullseye chroot, a chroot of the binary and libc alone, aarch64 under qemu (docs/install.md).
if [ "${DDPRUN_SKIP_PORTABLE:-0}" != "1" ]; then
  echo "== the portable build and its checks (scripts/portable-check.sh)"
  bash scripts/portable-check.sh
else
  echo "== the portable build and its checks: skipped (DDPRUN_SKIP_PORTABLE=1)"
fi

if [ "${DDPRUN_SKIP_ASAN:-0}" != "1" ]; then
  echo "== unit tests under ASan + UBSan"
  cmake --preset asan >/dev/null
  cmake --build build-asan -j"$jobs"
  ASAN_OPTIONS=detect_leaks=1 LSAN_OPTIONS="suppressions=$PWD/tests/lsan.supp" UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --test-dir build-asan --output-on-failure -j"$jobs" -L unit --timeout 600
fi

if [ "${DDPRUN_SKIP_TSAN:-0}" != "1" ]; then
  echo "== unit and loopback tests under TSan"
  cmake --preset tsan >/dev/null
  cmake --build build-tsan -j"$jobs"
  # The libslurm oracle and the fuzz replays are single-threaded and slow under TSan: left out. So is
  # the reaper test: it SIGKILLs a forked agent of a threaded process, which TSan's runtime does not
  # survive (it hangs); it runs in the main build and under ASan.
  TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
    ctest --test-dir build-tsan --output-on-failure -j"$jobs" -L 'unit|loopback' -E 'hostlist_oracle|fuzz_replay|reaper' \
    --timeout 600
fi
