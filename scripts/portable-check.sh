#!/usr/bin/env bash
# The portable stage of the test command (docs/install.md, "The portable build and its checks"): builds dist/
# (scripts/package.sh: the x86_64 and aarch64 wheels and tarballs) and proves on this machine that they run on
# other Linux systems:
#   1. each binary's highest GLIBC_ symbol version is <= 2.28, it references no GLIBCXX_/CXXABI_/GCC_ version, and
#      it NEEDs only libc, libm, libpthread, libdl, librt and the loader (readelf; objdump -T where it reads the ELF);
#   2. `auditwheel show` finds each wheel manylinux_2_28 for its architecture;
#   3. the x86_64 wheel installs into a fresh venv (pip), with `pip install --user` and `uv tool install` too,
#      with the native binary itself on PATH; then the loopback e2e suite's named part runs with it
#      (DDPRUN_TEST_EXE) instead of the Debian build, torch 2.x workers from the project's venv included, and the
#      old-kernel e2e tests (Linux 4.18's system calls, tests/helpers/old_kernel);
#   4. it runs a 2-agent job with shell workers, token auth (OpenSSL 1.1) and --cpu-bind (hwloc 2.4) in a Debian
#      bullseye chroot (glibc 2.31, GCC 10's libstdc++), where the Debian build cannot start;
#   5. in a chroot holding only the binary, the loader and libc it runs a 2-agent job, and what needs a missing
#      library (MUNGE, token auth, --cpu-bind) fails with one line naming it;
#   6. the aarch64 binary runs --version, hostlist and a 2-agent job under qemu-user.
# Needs root for the chroots (CI runs as root); the Debian build's e2e_tests (build/) for step 3.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/portable-env.sh
start=$SECONDS
checks=0
say() { echo "portable: $*"; }
fail() {
  echo "portable: FAILED: $*" >&2
  exit 1
}
ok() {
  checks=$((checks + 1))
  echo "portable: ok: $* ($((SECONDS - start)) s)"
}
free_port() {
  /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

if [ "$(id -u)" -ne 0 ]; then
  fail "the chroot checks need root (CI runs as root); run scripts/test.sh as root"
fi
[ -d "$DDPRUN_BULLSEYE_ROOT/usr" ] || fail "no bullseye chroot at $DDPRUN_BULLSEYE_ROOT: run scripts/setup.sh"

# Both architectures; DDPRUN_PORTABLE_ARCHS=x86_64 (as package.sh reads it) checks one, for a quick look by hand.
read -r -a archs <<<"${DDPRUN_PORTABLE_ARCHS:-x86_64 aarch64}"
has_arch() { [[ " ${archs[*]} " == *" $1 "* ]]; }
has_arch x86_64 || fail "the checks run the x86_64 binary: DDPRUN_PORTABLE_ARCHS must name x86_64"
say "building the artifacts (scripts/package.sh: ${archs[*]})"
bash scripts/package.sh >/dev/null
version=$(sed -n 's/^project(ddprun VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
work=$(mktemp -d /tmp/ddprun-portable.XXXXXX)
cleanup() {
  jobs -p | xargs -r kill 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
for arch in "${archs[@]}"; do
  tar -C "$work" -xzf "dist/ddprun-$version-linux-$arch.tar.gz"
  (cd dist && sha256sum --quiet -c "ddprun-$version-linux-$arch.tar.gz.sha256") || fail "$arch: tarball checksum"
  for f in ddprun LICENSE ddprun.1 README; do
    [ -f "$work/ddprun-$version-linux-$arch/$f" ] || fail "$arch tarball: no $f"
  done
  /usr/bin/python3 -c 'import sys, zipfile; print("\n".join(zipfile.ZipFile(sys.argv[1]).namelist()))' \
    "dist/ddprun-$version-py3-none-manylinux_2_28_$arch.whl" >"$work/whl-$arch.txt"
  grep -q "^ddprun-$version.data/scripts/ddprun\$" "$work/whl-$arch.txt" || fail "$arch wheel: no native ddprun script"
  grep -q "licenses/LICENSE\$" "$work/whl-$arch.txt" || fail "$arch wheel: no LICENSE"
done
x86=$work/ddprun-$version-linux-x86_64/ddprun
arm=$work/ddprun-$version-linux-aarch64/ddprun
ok "artifacts: $(cd dist && echo *.whl *.tar.gz | tr ' ' ',')"

# 1. What the binaries ask of the system.
check_elf() {
  local bin=$1 arch=$2 loader machine needed versions top
  case "$arch" in
    x86_64) loader=ld-linux-x86-64.so.2 machine="X86-64" ;;
    aarch64) loader=ld-linux-aarch64.so.1 machine="AArch64" ;;
  esac
  readelf -h "$bin" | grep -q "Machine:.*$machine" || fail "$arch: not an $arch ELF"
  needed=$(readelf -d "$bin" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | sort | tr '\n' ' ')
  for lib in $needed; do
    case "$lib" in
      libc.so.6 | libm.so.6 | libpthread.so.0 | libdl.so.2 | librt.so.1 | "$loader") ;;
      *) fail "$arch: NEEDED $lib is not glibc's (all: $needed)" ;;
    esac
  done
  versions=$(readelf -V -W "$bin" | sed -n 's/.*Name: \([A-Z_]*[0-9][0-9.]*\).*/\1/p' | sort -u)
  if grep -Eq '^(GLIBCXX|CXXABI|GCC)_' <<<"$versions"; then
    fail "$arch: references $(grep -E '^(GLIBCXX|CXXABI|GCC)_' <<<"$versions" | tr '\n' ' ')"
  fi
  top=$(grep '^GLIBC_' <<<"$versions" | sed 's/^GLIBC_//' | sort -V | tail -1)
  [ "$(printf '%s\n2.28\n' "$top" | sort -V | tail -1)" = 2.28 ] || fail "$arch: needs GLIBC_$top (> 2.28)"
  # objdump -T says the same where this host's binutils read the architecture.
  if objdump -T "$bin" >"$work/objdump.txt" 2>/dev/null; then
    top=$(grep -o 'GLIBC_[0-9.]*' "$work/objdump.txt" | sed 's/GLIBC_//' | sort -Vu | tail -1)
    [ "$(printf '%s\n2.28\n' "$top" | sort -V | tail -1)" = 2.28 ] || fail "$arch: objdump -T: GLIBC_$top"
    ! grep -Eq 'GLIBCXX_|CXXABI_' "$work/objdump.txt" || fail "$arch: objdump -T: libstdc++ symbols"
  fi
  ok "$arch binary: $(stat -c %s "$bin") bytes stripped, GLIBC_$top at most, NEEDED: $needed"
}
check_elf "$x86" x86_64
if has_arch aarch64; then check_elf "$arm" aarch64; fi

# 2. auditwheel's verdict on each wheel.
for arch in "${archs[@]}"; do
  "$DDPRUN_PORTABLE_VENV/bin/auditwheel" show "dist/ddprun-$version-py3-none-manylinux_2_28_$arch.whl" \
    >"$work/auditwheel-$arch.txt" 2>&1 || fail "auditwheel show $arch: $(cat "$work/auditwheel-$arch.txt")"
  # manylinux_2_28 or a lower level (more systems): the wheel is tagged 2_28, the floor we promise.
  tag=$(tr '\n' ' ' <"$work/auditwheel-$arch.txt" | sed -n "s/.*consistent with the following platform tag: \"manylinux_2_\([0-9]*\)_$arch\".*/\1/p")
  [ -n "$tag" ] && [ "$tag" -le 28 ] || fail "auditwheel show $arch: $(cat "$work/auditwheel-$arch.txt")"
  ok "auditwheel show: manylinux_2_${tag}_$arch (at most manylinux_2_28)"
done

# 3. Installed from the wheel: a fresh venv, --user, uv tool; the native binary on PATH each time.
whl=$PWD/dist/ddprun-$version-py3-none-manylinux_2_28_x86_64.whl
native() { # the installed ddprun is the ELF itself, and it runs
  head -c 4 "$1" | grep -q ELF || fail "$1 is not the native binary"
  "$1" --version | sed -n 1p | grep -q "^ddprun $version " || fail "$1 --version"
}
/usr/bin/python3 -m venv "$work/venv"
"$work/venv/bin/pip" install --quiet --no-index --disable-pip-version-check "$whl"
[ "$(PATH=$work/venv/bin:/usr/bin:/bin command -v ddprun)" = "$work/venv/bin/ddprun" ] || fail "venv: ddprun not on its PATH"
native "$work/venv/bin/ddprun"
[ -f "$work/venv/share/man/man1/ddprun.1" ] || fail "venv: no man page"
PYTHONUSERBASE=$work/user /usr/bin/python3 -m pip install --quiet --user --no-index --break-system-packages \
  --disable-pip-version-check "$whl"
native "$work/user/bin/ddprun"
UV_TOOL_DIR=$work/uv-tools UV_TOOL_BIN_DIR=$work/uv-bin UV_CACHE_DIR=$work/uv-cache UV_PYTHON_DOWNLOADS=never \
  "$DDPRUN_PORTABLE_VENV/bin/uv" tool install --quiet --offline --python /usr/bin/python3 "$whl"
native "$work/uv-bin/ddprun"
ok "wheel installs: venv (pip), pip --user, uv tool install: the native ddprun on PATH"

# The loopback e2e suite's named part (20 tests), with the wheel's binary: several agents, failure teardown, an
# elastic shrink, the workers' store with torch 2.x workers (all_reduce), ddprun top, token auth, --cpu-bind.
e2e=build/tests/e2e/e2e_tests
[ -x "$e2e" ] || fail "no $e2e: the Debian build (build/) comes first"
. scripts/torch2.sh
tests=("[teardown]" "[top]" "[auth]" "[cpubind]"
  "elastic: losing a node shrinks the job and the survivors finish at the new world size"
  "real PyTorch workers all_reduce across two agents")
DDPRUN_TEST_EXE=$work/venv/bin/ddprun DDPRUN_TEST_PYTHON=$DDPRUN_TORCH2_PYTHON \
  timeout 900 "$e2e" "$(IFS=,; echo "${tests[*]}")" >"$work/e2e.log" 2>&1 || {
  tail -60 "$work/e2e.log" >&2
  fail "the e2e suite with the wheel's ddprun"
}
ok "e2e with the wheel's ddprun: $(tail -2 "$work/e2e.log" | tr -s '\n' ' ')"
# The same binary as on Linux 4.18 (RHEL 8's kernel: no pidfd_open, close_range, clone3): the old-kernel e2e tests,
# whose agents run under tests/helpers/old_kernel's seccomp filter.
DDPRUN_TEST_EXE=$work/venv/bin/ddprun timeout 300 build/tests/e2e/e2e_old_kernel_tests >"$work/old.log" 2>&1 || {
  tail -60 "$work/old.log" >&2
  fail "the old-kernel e2e tests with the wheel's ddprun"
}
ok "as on Linux 4.18 with the wheel's ddprun: $(tail -2 "$work/old.log" | tr -s '\n' ' ')"

# 4. and 5. Chroots. in-root ROOT CMD... runs CMD inside ROOT, in a private mount namespace (unshare -m) with /proc
# and /dev mounted: they vanish with it, whatever happens.
in_root=$work/in-root
cat >"$in_root" <<'SH'
#!/bin/sh
exec unshare -m /bin/sh -c 'mount -t proc proc "$0/proc" && mount --rbind /dev "$0/dev" && exec chroot "$0" "$@"' "$@"
SH
chmod +x "$in_root"
# job ROOT BIN PORT ARGS...: a 2-agent job on loopback with BIN (a path inside ROOT); both agents must exit 0.
job() {
  local root=$1 bin=$2 port=$3
  shift 3
  local a=("$bin" --nnodes 2 --rdzv-endpoint "127.0.0.1:$port")
  timeout 120 "$in_root" "$root" "${a[@]}" --node-rank 1 "$@" >"$work/job1.log" 2>&1 &
  local p1=$! rc0=0 rc1=0
  timeout 120 "$in_root" "$root" "${a[@]}" --node-rank 0 "$@" >"$work/job0.log" 2>&1 || rc0=$?
  wait "$p1" || rc1=$?
  if [ $rc0 -ne 0 ] || [ $rc1 -ne 0 ]; then
    cat "$work/job0.log" "$work/job1.log" >&2
    fail "job in $root (exit $rc0 and $rc1): $*"
  fi
}

bullseye=$DDPRUN_BULLSEYE_ROOT
# A folder of this run's own in the shared chroot: clones on one machine may check at once.
opt=/opt/ddprun-$$
mkdir -p "$bullseye$opt"
cp "$x86" "$bullseye$opt/ddprun"
trap 'cleanup; rm -rf "${bullseye:?}$opt"' EXIT
# Read whole, not through `head`: ldd killed by SIGPIPE would fail the pipeline (pipefail) at random.
"$in_root" "$bullseye" /bin/sh -c 'ldd --version' >"$work/ldd.txt" 2>&1 || true
grep -q '2\.31$' <(sed -n 1p "$work/ldd.txt") || fail "bullseye chroot: not glibc 2.31: $(cat "$work/ldd.txt")"
if [ -x build/launcher/ddprun ]; then
  # The control: the Debian build does not start there (it needs glibc 2.34 and GCC 12's libstdc++).
  cp build/launcher/ddprun "$bullseye$opt/ddprun-debian"
  ! "$in_root" "$bullseye" "$opt/ddprun-debian" --version >/dev/null 2>&1 || fail "the Debian build ran on bullseye"
fi
"$in_root" "$bullseye" "$opt/ddprun" --version >"$work/version.txt"
for lib in libmunge.so.2 libcrypto.so.1.1 libhwloc.so.15; do
  grep -q "$lib found" "$work/version.txt" || fail "bullseye --version: $lib not found: $(cat "$work/version.txt")"
done
job "$bullseye" "$opt/ddprun" "$(free_port)" --rdzv-auth none --nproc-per-node 2 --no-python -- \
  /bin/sh -c 'echo "rank $RANK of $WORLD_SIZE on glibc $(ldd --version | head -1 | grep -o "[0-9.]*$")"'
grep -q "rank 3 of 4 on glibc 2.31" "$work/job0.log" "$work/job1.log" || fail "bullseye job: $(cat "$work/job0.log")"
export DDPRUN_TOKEN=portable-check
job "$bullseye" "$opt/ddprun" "$(free_port)" --rdzv-auth token --nproc-per-node 1 --no-python -- /bin/true
unset DDPRUN_TOKEN
"$in_root" "$bullseye" "$opt/ddprun" --standalone --nproc-per-node 2 --cpu-bind cores --no-python -- \
  /bin/sh -c 'grep Cpus_allowed_list /proc/self/status' >"$work/bind.log" 2>&1 ||
  fail "bullseye --cpu-bind: $(cat "$work/bind.log")"
ok "bullseye (glibc 2.31): 2-agent jobs (open; token auth with libcrypto.so.1.1), --cpu-bind with hwloc 2.4"

# 5. Nothing but the binary, the loader and libc (bullseye's glibc 2.31: libc, libm, libpthread, libdl, librt).
bare=$work/bare
mkdir -p "$bare/opt/ddprun" "$bare/lib64" "$bare/lib/x86_64-linux-gnu" "$bare/proc" "$bare/dev" "$bare/tmp"
chmod 1777 "$bare/tmp"
cp "$x86" "$bare/opt/ddprun/ddprun"
# The loader from its own folder: /lib64's link in the root is absolute, and cp -L would follow it on the host.
cp -L "$bullseye/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2" "$bare/lib64/"
for lib in libc.so.6 libm.so.6 libpthread.so.0 libdl.so.2 librt.so.1; do
  cp -L "$bullseye/lib/x86_64-linux-gnu/$lib" "$bare/lib/x86_64-linux-gnu/"
done
"$in_root" "$bare" /opt/ddprun/ddprun --version >"$work/version.txt"
for lib in libmunge.so.2 "libcrypto.so.3 or libcrypto.so.1.1" libhwloc.so.15; do
  grep -q "$lib not found" "$work/version.txt" || fail "bare --version: $lib: $(cat "$work/version.txt")"
done
# A token-less job that needs none of them runs; its workers are ddprun itself (there is no shell).
job "$bare" /opt/ddprun/ddprun "$(free_port)" --nproc-per-node 2 --no-python -- /opt/ddprun/ddprun hostlist 'bare[1-2]'
grep -q bare2 "$work/job0.log" || fail "bare job: $(cat "$work/job0.log")"
# What needs a missing library: exit 2 and one line naming it and what to do.
one_line() { # one_line NAME PATTERN CMD...: exit 2, exactly one line on stderr, matching PATTERN
  local name=$1 pattern=$2 rc=0
  shift 2
  timeout 60 "$@" >"$work/out.txt" 2>"$work/err.txt" || rc=$?
  [ $rc -eq 2 ] && [ "$(wc -l <"$work/err.txt")" -eq 1 ] && grep -q -e "$pattern" "$work/err.txt" ||
    fail "$name: exit $rc, stderr: $(cat "$work/err.txt")"
  say "  $name: $(cat "$work/err.txt")"
}
port=$(free_port)
one_line "--cpu-bind without hwloc" "--cpu-bind needs libhwloc.so.15 (hwloc 2.x).*install hwloc" \
  "$in_root" "$bare" /opt/ddprun/ddprun --standalone --nproc-per-node 1 --cpu-bind cores --no-python -- /opt/ddprun/ddprun hostlist a
one_line "token auth without libcrypto" "token authentication needs libcrypto.so.3 or libcrypto.so.1.1" \
  env DDPRUN_TOKEN=t "$in_root" "$bare" /opt/ddprun/ddprun --nnodes 2 --node-rank 0 --rdzv-endpoint "127.0.0.1:$port" \
  --rdzv-auth token --no-python -- /opt/ddprun/ddprun hostlist a
one_line "MUNGE without libmunge" "MUNGE authentication needs libmunge.so.2" \
  "$in_root" "$bare" /opt/ddprun/ddprun --nnodes 2 --node-rank 0 --rdzv-endpoint "127.0.0.1:$port" \
  --rdzv-auth munge --no-python -- /opt/ddprun/ddprun hostlist a
ok "bare chroot (binary, loader, libc): a 2-agent job runs; MUNGE, token auth and --cpu-bind fail in one line each"

# 6. aarch64 under qemu-user (the host's libc6:arm64 as its libc); the shell workers are the host's.
if ! has_arch aarch64; then
  say "all $checks checks passed in $((SECONDS - start)) s (x86_64 only: DDPRUN_PORTABLE_ARCHS)"
  exit 0
fi
qemu=$(command -v qemu-aarch64-static || command -v qemu-aarch64 || true)
[ -n "$qemu" ] && [ -e /lib/ld-linux-aarch64.so.1 ] || fail "no qemu-aarch64 or libc6:arm64: run scripts/setup.sh"
"$qemu" "$arm" --version | sed -n 1p | grep -q "aarch64, glibc 2.28" || fail "aarch64 --version"
[ "$("$qemu" "$arm" hostlist 'gh[001-003]' | tr '\n' ' ')" = "gh001 gh002 gh003 " ] || fail "aarch64 hostlist"
port=$(free_port)
a=("$qemu" "$arm" --nnodes 2 --rdzv-endpoint "127.0.0.1:$port" --rdzv-auth none --nproc-per-node 2 --no-python --
  /bin/sh -c 'echo "rank $RANK of $WORLD_SIZE"')
"${a[@]:0:6}" --node-rank 1 "${a[@]:6}" >"$work/arm1.log" 2>&1 &
p1=$!
timeout 300 "${a[@]:0:6}" --node-rank 0 "${a[@]:6}" >"$work/arm0.log" 2>&1 || fail "aarch64 job: $(cat "$work/arm0.log")"
wait "$p1" || fail "aarch64 job, node 1: $(cat "$work/arm1.log")"
grep -q "rank 3 of 4" "$work/arm0.log" "$work/arm1.log" || fail "aarch64 job output: $(cat "$work/arm0.log")"
ok "aarch64 under qemu-user: --version, hostlist, a 2-agent job"

say "all $checks checks passed in $((SECONDS - start)) s"
