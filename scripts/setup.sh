#!/usr/bin/env bash
# Installs every Debian package ddprun needs. Idempotent: does nothing when all are present,
# and runs `apt-get update` at most once per invocation. Installing needs root: run it as root, or as a
# user with sudo; without either it names the missing packages and exits 1.
#
# `scripts/setup.sh --demo` (what scripts/demo.sh runs) installs only what the demo builds and runs with: the
# packages of DEMO_PACKAGES, and no torch 2.x virtual environment. Without it (the test command), everything.
set -euo pipefail

mode=all
case "${1:-}" in
  "") ;;
  --demo) mode=demo ;;
  *)
    echo "setup: unknown argument '$1': run scripts/setup.sh (everything) or scripts/setup.sh --demo" >&2
    exit 2
    ;;
esac

# What scripts/demo.sh needs to build ddprun and ddprun-train and to train on Fashion-MNIST.
DEMO_PACKAGES=(
  # build
  build-essential cmake ccache pkg-config git
  # core libraries (catch2: the default preset configures the tests, though the demo builds none)
  libboost1.81-dev libcli11-dev nlohmann-json3-dev libfmt-dev catch2
  # CPU/NUMA binding (--cpu-bind): the node's topology
  libhwloc-dev
  # rendezvous authentication: SHA-256 for HMAC-SHA256 (libcrypto); MUNGE credentials (libmunge)
  libssl-dev libmunge-dev
  # trainer: Debian's CPU libtorch, gloo and a threaded BLAS
  libtorch-dev libgloo-dev libopenblas0-pthread zlib1g-dev
  # the demo's data, and the python3 that prints its result
  dataset-fashion-mnist python3
)

# The rest, for the tests, benchmarks and tools.
TEST_PACKAGES=(
  # Slurm (hostlist oracle, local test cluster) and the MUNGE daemon
  libslurm-dev slurm-wlm munge
  # tests: real PyTorch workers, torchrun; a real tqdm progress bar (tests/e2e/test_bars.cpp)
  python3-torch python3-tqdm
  # the torch 2.x virtual environment below
  python3-venv
  # tools: fuzzing, formatting, static analysis (clang-tidy), process inspection in tests
  clang libclang-rt-14-dev clang-format clang-tidy procps iproute2
  # native stacks of hung workers (ddprun --hang-timeout runs eu-stack when present)
  elfutils
  # benchmarks: plots
  gnuplot-nox
  # the portable build's checks (scripts/portable-check.sh): a Debian bullseye chroot, the aarch64 binary under
  # qemu-user with arm64's glibc
  debootstrap qemu-user-static libc6:arm64
)

PACKAGES=("${DEMO_PACKAGES[@]}")
if [ "$mode" = all ]; then
  PACKAGES+=("${TEST_PACKAGES[@]}")
fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#PACKAGES[@]} packages present"
else
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then
    # apt-get needs root: through sudo when there is one, else say what to install and stop.
    if ! command -v sudo >/dev/null 2>&1; then
      echo "setup: installing packages needs root, and there is no sudo: as root, run: apt-get install ${missing[*]}" >&2
      exit 1
    fi
    SUDO="sudo"
    echo "setup: not root: installing through sudo"
  fi
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # libc6:arm64 is a package of a foreign architecture: apt lists arm64's packages once it is added.
  if [[ " ${missing[*]} " == *":arm64 "* ]] && ! dpkg --print-foreign-architectures | grep -qx arm64; then
    $SUDO dpkg --add-architecture arm64
  fi
  $SUDO apt-get update -qq
  # dpkg syncs every file it unpacks; on a fresh machine that is 40% of the install (3.3 min vs 1.9 min for the
  # demo's packages, docs/install.md). Unsynced, a power loss mid-install can leave a package to reinstall;
  # DDPRUN_APT_SAFE_IO=1 keeps dpkg's default.
  unsafe_io=(-o Dpkg::Options::=--force-unsafe-io)
  [ "${DDPRUN_APT_SAFE_IO:-0}" = 1 ] && unsafe_io=()
  $SUDO apt-get install -y -qq --no-install-recommends "${unsafe_io[@]}" "${missing[@]}" >/dev/null
  echo "setup: packages done"
fi

# torch 2.x from PyPI, pinned, in the project's own virtual environment (scripts/torch2.sh says where): the second
# torch the tests run against, and the libtorch of the CUDA trainer build. PyPI's Linux wheel is a CUDA build: a
# 2.7 GB download (4.7 GB on disk) with its nvidia-* and cuda-* dependencies (docs/install.md). Without network
# access, set DDPRUN_SKIP_TORCH2=1: the torch 2.x tests and the CUDA trainer build are then skipped, saying so.
. "$(dirname "$0")/torch2.sh"
if [ "$mode" = demo ]; then
  echo "setup: torch $DDPRUN_TORCH2_VERSION not needed by the demo (scripts/setup.sh without --demo installs it)"
elif [ "${DDPRUN_SKIP_TORCH2:-0}" = 1 ]; then
  echo "setup: torch $DDPRUN_TORCH2_VERSION skipped (DDPRUN_SKIP_TORCH2=1)"
elif "$DDPRUN_TORCH2_PYTHON" -c "import sys, torch; sys.exit(torch.__version__.split('+')[0] != '$DDPRUN_TORCH2_VERSION')" \
  2>/dev/null; then
  echo "setup: torch $DDPRUN_TORCH2_VERSION present in $DDPRUN_TORCH2_VENV"
else
  echo "setup: installing torch $DDPRUN_TORCH2_VERSION from PyPI into $DDPRUN_TORCH2_VENV (a 2.7 GB download, 4.7 GB on disk)"
  rm -rf "$DDPRUN_TORCH2_VENV"
  /usr/bin/python3 -m venv "$DDPRUN_TORCH2_VENV"
  "$DDPRUN_TORCH2_VENV/bin/pip" install --quiet --disable-pip-version-check "torch==$DDPRUN_TORCH2_VERSION" numpy
  echo "setup: torch $("$DDPRUN_TORCH2_PYTHON" -c 'import torch; print(torch.__version__)') installed"
fi
# The portable build's tools and chroot (scripts/portable-env.sh says where): PyPI's zig, scikit-build-core, build,
# auditwheel and uv, pinned (scripts/portable-requirements.txt), in a venv of their own outside the clone (about
# 500 MB); and a Debian bullseye root (glibc 2.31) with OpenSSL 1.1, hwloc and MUNGE's libraries, made once with
# debootstrap from the mirror apt uses (about 220 MB, 2 minutes). DDPRUN_SKIP_PORTABLE=1 skips both (the test
# command then skips its portable stage, saying so).
. "$(dirname "$0")/portable-env.sh"
requirements="$(dirname "$0")/portable-requirements.txt"
if [ "$mode" = demo ] || [ "${DDPRUN_SKIP_PORTABLE:-0}" = 1 ]; then
  echo "setup: the portable build's tools not installed (--demo or DDPRUN_SKIP_PORTABLE=1)"
else
  if "$DDPRUN_PORTABLE_PYTHON" -m pip freeze --disable-pip-version-check 2>/dev/null | sort |
    cmp -s - <(grep -v '^#' "$requirements" | sort); then
    echo "setup: the portable build's tools present in $DDPRUN_PORTABLE_VENV"
  else
    echo "setup: installing the portable build's tools (zig, scikit-build-core, auditwheel, uv) into $DDPRUN_PORTABLE_VENV"
    rm -rf "$DDPRUN_PORTABLE_VENV"
    /usr/bin/python3 -m venv "$DDPRUN_PORTABLE_VENV"
    "$DDPRUN_PORTABLE_VENV/bin/pip" install --quiet --disable-pip-version-check --no-deps -r "$requirements"
  fi
  if [ -e "$DDPRUN_BULLSEYE_ROOT/usr/lib/x86_64-linux-gnu/libcrypto.so.1.1" ]; then
    echo "setup: the bullseye chroot present in $DDPRUN_BULLSEYE_ROOT"
  elif [ "$(id -u)" -ne 0 ]; then
    echo "setup: the bullseye chroot ($DDPRUN_BULLSEYE_ROOT) needs root to make: run scripts/setup.sh as root" >&2
    exit 1
  else
    # The mirror apt already uses (deb822 or one-line sources).
    mirror=$(sed -n 's/^URIs: *\([^ ]*\).*/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null | grep -v security | head -1)
    [ -n "$mirror" ] || mirror=$(awk '$1 == "deb" && $2 !~ /security/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null)
    echo "setup: making a Debian bullseye chroot in $DDPRUN_BULLSEYE_ROOT (debootstrap from $mirror)"
    rm -rf "$DDPRUN_BULLSEYE_ROOT.new"
    mkdir -p "$(dirname "$DDPRUN_BULLSEYE_ROOT")"
    debootstrap --variant=minbase --include=libssl1.1,libhwloc15,libmunge2 bullseye "$DDPRUN_BULLSEYE_ROOT.new" \
      "$mirror" >"$DDPRUN_BULLSEYE_ROOT.log" 2>&1 || {
      tail -20 "$DDPRUN_BULLSEYE_ROOT.log" >&2
      echo "setup: debootstrap failed (log: $DDPRUN_BULLSEYE_ROOT.log)" >&2
      exit 1
    }
    rm -rf "$DDPRUN_BULLSEYE_ROOT"
    mv "$DDPRUN_BULLSEYE_ROOT.new" "$DDPRUN_BULLSEYE_ROOT"
  fi
fi
echo "setup: done"
