#!/usr/bin/python3
"""Benchmark: ddprun-train samples/s under ddprun with and without --cpu-bind cores.

2 ranks (or --nproc), one epoch of the Fashion-MNIST MLP each run, the two settings interleaved;
prints a Markdown table of the median samples/s (training loop only, as ddprun-train reports it)
and samples per CPU-second. OMP_NUM_THREADS is left to ddprun: 1 per worker without binding (more
than one worker), the cores bound with it.

  /usr/bin/python3 bench/torch_train/cpu_bind.py --ddprun build/launcher/ddprun \
      --trainer build/examples/train/ddprun-train --reps 5
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile


def run(ddprun, trainer, nproc, mode, tmp):
    metrics = os.path.join(tmp, f"m-{mode}.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    cmd = [ddprun, "--standalone", "-q", "--nproc-per-node", str(nproc), "--cpu-bind", mode, "--",
           trainer, "--model", "mlp", "--data", "fashion-mnist", "--epochs", "1", "--metrics-file", metrics]
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    rc = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL).returncode
    if rc != 0:
        sys.exit(f"{' '.join(cmd)} failed with exit {rc}")
    with open(metrics) as f:
        rec = json.loads(f.readline())
    return rec["samples_per_sec"], 60000 / rec["cpu_seconds"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ddprun", required=True)
    ap.add_argument("--trainer", required=True)
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    modes = ["none", "cores"]
    res = {m: [] for m in modes}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(a.reps):
            for m in modes:
                res[m].append(run(a.ddprun, a.trainer, a.nproc, m, tmp))
    print(f"| --cpu-bind | ranks | samples/s (median of {a.reps}) | samples/CPU-s | all runs, samples/s |")
    print("|---|---|---|---|---|")
    for m in modes:
        sps = [r[0] for r in res[m]]
        cps = [r[1] for r in res[m]]
        print(f"| {m} | {a.nproc} | {statistics.median(sps):.0f} | {statistics.median(cps):.0f} | "
              f"{', '.join(f'{s:.0f}' for s in sps)} |")
    print(f"\nload average at the end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
