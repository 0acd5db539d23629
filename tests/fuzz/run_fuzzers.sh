#!/usr/bin/env bash
# Builds every fuzz target with clang's libFuzzer + ASan + UBSan and runs each for SECONDS on a
# copy of its corpus and regression inputs (the repository is never written to). Fails, naming the
# reproducer, if any target crashes, leaks, times out or runs out of memory.
#   usage: tests/fuzz/run_fuzzers.sh BUILD_DIR SECONDS [TARGET...]     (targets: hostlist codec failure plan c10d)
#   env:   FUZZ_CXX (default clang++), FUZZ_JOBS (parallel fuzzing jobs per target, default 1)
# Exit 77 means "skipped": clang cannot link libFuzzer here (install libclang-rt-14-dev).
set -euo pipefail

if [ $# -lt 2 ]; then
  echo "usage: $0 BUILD_DIR SECONDS [TARGET...]" >&2
  exit 2
fi
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=$(mkdir -p "$1" && cd "$1" && pwd)
secs=$2
shift 2
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(hostlist codec failure plan c10d)
cxx=${FUZZ_CXX:-clang++}
jobs=${FUZZ_JOBS:-1}

# Project sources each target needs, and its libFuzzer options. max_len: hostlists longer than
# 4 KiB only repeat structure; codec inputs cover a full 1 KiB hello plus several requests.
# malloc_limit_mb: no single allocation may approach it (codec: a length prefix must never size
# an allocation; hostlist: expansions are capped at 1M hosts / 64 MiB of names).
# timeout (seconds per input): a near-cap hostlist expansion takes 2-4 s under the sanitizers
# alone and far more on a loaded machine; only a real hang should fail.
sources_of() {
  case $1 in
    hostlist) echo "core/src/hostlist.cpp" ;;
    codec) echo "store/src/codec.cpp" ;;
    failure) echo "core/src/failure.cpp core/src/utf8.cpp" ;;
    plan) echo "core/src/plan.cpp core/src/plan_table.cpp core/src/checks.cpp core/src/plan_codec.cpp core/src/hostlist.cpp core/src/worker_store.cpp core/src/derived_port.cpp" ;;
    c10d) echo "store/src/c10d_codec.cpp" ;;
    *) echo "unknown fuzz target '$1' (known: hostlist codec failure plan c10d)" >&2; exit 2 ;;
  esac
}
options_of() {
  case $1 in
    hostlist) echo "-max_len=4096 -malloc_limit_mb=512 -timeout=60" ;;
    codec) echo "-max_len=4096 -malloc_limit_mb=16 -timeout=25" ;;
    failure) echo "-max_len=8192 -malloc_limit_mb=256 -timeout=25" ;;
    plan) echo "-max_len=16384 -malloc_limit_mb=256 -timeout=25" ;;
    c10d) echo "-max_len=4096 -malloc_limit_mb=16 -timeout=25" ;;
  esac
}

for t in "${targets[@]}"; do sources_of "$t" >/dev/null; done  # unknown names fail here

launcher=()
command -v ccache >/dev/null && launcher=(ccache)
flags=(-std=c++20 -O1 -g -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined
       -fno-sanitize-recover=undefined -DFMT_HEADER_ONLY -I"$root/core/include" -I"$root/store/include")

mkdir -p "$out/obj" "$out/bin"
probe="$out/obj/probe.cpp"
printf '%s\n' '#include <cstddef>' '#include <cstdint>' \
  'extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t*, std::size_t) { return 0; }' > "$probe"
if ! "$cxx" "${flags[@]}" "$probe" -o "$out/bin/probe" >"$out/obj/probe.log" 2>&1; then
  echo "SKIP: $cxx cannot build a libFuzzer binary (see $out/obj/probe.log);" \
       "install libclang-rt-14-dev" >&2
  exit 77
fi

build() {
  local t=$1 objs=() src obj
  for src in "tests/fuzz/fuzz_$t.cpp" $(sources_of "$t"); do
    obj="$out/obj/${src//\//_}.o"
    "${launcher[@]}" "$cxx" "${flags[@]}" -c "$root/$src" -o "$obj"
    objs+=("$obj")
  done
  "$cxx" "${flags[@]}" "${objs[@]}" -o "$out/bin/fuzz_$t"
}

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
sym=$(command -v llvm-symbolizer || command -v llvm-symbolizer-14 || true)
[ -n "$sym" ] && export ASAN_SYMBOLIZER_PATH=$sym

failed=()
for t in "${targets[@]}"; do
  echo "== fuzz_$t: build"
  build "$t"
  work="$out/work/$t"
  artifacts="$out/artifacts/$t"
  rm -rf "$work" "$artifacts"
  mkdir -p "$work" "$artifacts"
  # The copy is what libFuzzer grows; new inputs never land in the repository.
  for d in "$here/corpus/$t" "$here/regressions/$t"; do
    [ -d "$d" ] && find "$d" -maxdepth 1 -type f ! -name '.*' -exec cp {} "$work/" \;
  done
  log="$out/fuzz_$t.log"
  echo "== fuzz_$t: ${secs}s on $(find "$work" -type f | wc -l) seeds (log: $log)"
  read -r -a args <<<"$(options_of "$t")"
  args+=(-max_total_time="$secs" -rss_limit_mb=2048 -print_final_stats=1
         -artifact_prefix="$artifacts/")
  # Parallel jobs write fuzz-N.log into the current directory: keep them in the build dir.
  [ "$jobs" -gt 1 ] && args+=(-jobs="$jobs" -workers="$jobs")
  if (cd "$out" && "$out/bin/fuzz_$t" "${args[@]}" "$work" >"$log" 2>&1); then
    grep -E '^(stat::number_of_executed_units|stat::new_units_added|Done )' "$log" | sed 's/^/   /' || true
  else
    rc=$?
    tail -n 60 "$log"
    echo "FAIL: fuzz_$t exited $rc. Reproducers:" >&2
    find "$artifacts" -type f -printf '   %p\n' >&2
    echo "   replay one with: $out/bin/fuzz_$t FILE   (or the fuzz_replay_$t test binary)" >&2
    failed+=("$t")
  fi
done

if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzzing found failures in: ${failed[*]}" >&2
  exit 1
fi
echo "all fuzz targets ran ${secs}s each without failure"
