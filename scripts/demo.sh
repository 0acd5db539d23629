#!/usr/bin/env bash
# The main job: builds ddprun and the bundled libtorch trainer, then runs ddprun launching ddprun-train
# on Fashion-MNIST with 2 ranks (gloo, CPU) and prints the test accuracy.
set -euo pipefail
cd "$(dirname "$0")/.."
# ccache hits across clones in different directories (CI builds a fresh clone every time).
export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=true
# Only the packages the demo needs; no torch 2.x virtual environment (that is for the tests and the CUDA trainer).
bash scripts/setup.sh --demo
cmake --preset default >/dev/null
cmake --build build -j"$(nproc)" --target ddprun ddprun-train
metrics=$(mktemp /tmp/ddprun-demo-metrics.XXXXXX)
build/launcher/ddprun --nproc-per-node 2 -- \
  build/examples/train/ddprun-train --model mlp --data fashion-mnist --epochs 1 --metrics-file "$metrics"
/usr/bin/python3 - "$metrics" <<'PY'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
last = recs[-1]
print(f"demo: {last['world_size']} ranks, {len(recs)} epoch(s), test accuracy {last['test_accuracy']:.4f}, "
      f"{last['samples_per_sec']:.0f} samples/s")
PY
rm -f "$metrics"
