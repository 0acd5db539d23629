#!/usr/bin/env bash
# Installs every Debian package ddprun needs. Idempotent: does nothing when all are present,
# and runs `apt-get update` at most once per invocation.
set -euo pipefail

PACKAGES=(
  # build
  build-essential cmake ccache pkg-config git
  # core libraries
  libboost1.81-dev libcli11-dev nlohmann-json3-dev libfmt-dev catch2
  # CPU/NUMA binding (--cpu-bind): the node's topology
  libhwloc-dev
  # rendezvous authentication: SHA-256 for HMAC-SHA256 (libcrypto); nonces come from getrandom(2)
  libssl-dev
  # Slurm (hostlist oracle, local test cluster) and MUNGE
  libslurm-dev slurm-wlm munge libmunge-dev
  # trainer: Debian's CPU libtorch, gloo and a threaded BLAS
  libtorch-dev libgloo-dev libopenblas0-pthread zlib1g-dev
  # tests and demo: real PyTorch workers, torchrun, Fashion-MNIST
  python3-torch dataset-fashion-mnist
  # tools: fuzzing, formatting, process inspection in tests
  clang libclang-rt-14-dev clang-format procps iproute2
  # native stacks of hung workers (ddprun --hang-timeout runs eu-stack when present)
  elfutils
  # benchmarks: plots
  gnuplot-nox
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#PACKAGES[@]} packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "setup: done"
