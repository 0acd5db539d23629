#!/usr/bin/env bash
# clang-tidy (the checks in .clang-tidy) over the libraries' units: core/ store/ rendezvous/ agent/ launcher/.
# Configures the `tidy` preset (compile_commands.json only, nothing is built) and runs one clang-tidy per unit,
# -j$(nproc) at a time; any finding fails. Units unchanged since they passed are skipped (below). About 5 to 7 s of CPU a unit, 11 min for all 99 (docs/install.md).
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
# Units clang-tidy passed before, byte for byte the same after preprocessing, are not looked at again
# (scripts/tidy_keys.py); DDPRUN_TIDY_CACHE=off looks at every one.
cache=${DDPRUN_TIDY_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ddprun/tidy}
if [ "$cache" = off ]; then
  cache=$(mktemp -d)
  trap 'rm -rf "$cache"' EXIT
fi
mkdir -p "$cache"
todo=$(python3 scripts/tidy_keys.py build-tidy "$cache" "$tidy" "${files[@]}")
# GCC's warning flags from the compile database that clang does not know are not findings. A unit that
# passes has its key recorded.
export tidy cache
if [ -n "$todo" ]; then
  printf '%s\n' "$todo" | tr '\t\n' '\0\0' |
    xargs -0 -n 2 -P "$(nproc)" sh -c '"$tidy" -p build-tidy --quiet --extra-arg=-Wno-unknown-warning-option "$2" &&
      { [ "$1" = - ] || touch "$cache/$1"; }' tidy 2> >(grep -v 'warnings generated' >&2)
fi
echo "tidy: ${#files[@]} units clean"
