#!/usr/bin/env bash
# The main job: builds ddprun and launches the bundled example with 2 ranks on this machine.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake --preset default >/dev/null
cmake --build build -j"$(nproc)" --target ddprun ddprun-hello
exec build/launcher/ddprun --nproc-per-node 2 -- build/examples/ddprun-hello
