#!/usr/bin/env bash
# clang-tidy (the checks in .clang-tidy) over the libraries' units: core/ store/ rendezvous/ agent/ launcher/.
# Configures the `tidy` preset (compile_commands.json only, nothing is built) and runs one clang-tidy per unit,
# -j$(nproc) at a time; any finding fails. About 5 to 7 s of CPU a unit, 11 min for all 99 (docs/install.md).
#
#   scripts/tidy.sh [LAYER|FILE...]    (a LAYER such as agent: its src/ units; default: all five layers)
set -euo pipefail
cd "$(dirname "$0")/.."
tidy=${CLANG_TIDY:-clang-tidy}
if ! command -v "$tidy" >/dev/null 2>&1; then
  echo "tidy: $tidy not found: install clang-tidy (scripts/setup.sh does), or set CLANG_TIDY" >&2
  exit 1
fi
args=("$@")
[ ${#args[@]} -gt 0 ] || args=(core store rendezvous agent launcher)
files=()
for a in "${args[@]}"; do
  case "$a" in
    core | store | rendezvous | agent | launcher) mapfile -t -O "${#files[@]}" files < <(git ls-files "$a/src/*.cpp") ;;
    *.cpp) files+=("$a") ;;
    *)
      echo "tidy: '$a' is neither a layer (core store rendezvous agent launcher) nor a .cpp file" >&2
      exit 2
      ;;
  esac
done
cmake --preset tidy >/dev/null
# GCC's warning flags from the compile database that clang does not know are not findings.
printf '%s\0' "${files[@]}" |
  xargs -0 -n 1 -P "$(nproc)" "$tidy" -p build-tidy --quiet --extra-arg=-Wno-unknown-warning-option 2> >(grep -v \
    'warnings generated' >&2)
echo "tidy: ${#files[@]} units clean"
