#!/usr/bin/python3
"""Benchmark: ddprun-train's pipeline split (DDPRUN_MP_SIZE = P stages) on the CPU.

One epoch of a Fashion-MNIST model (default: the 4-layer MLP 784-256-128-128-10; --model ae: the
autoencoder 784-128-128-128-784, whose two halves cost the same), Adam, global batch 64, one thread
per process, as P = 1 (one process, the whole model), 2 and 4 stages, each with M = 1, 4 and 16
micro-batches, one replica (no data parallelism). Prints a Markdown table of the median samples/s
of the training loop (runs interleaved), the ideal GPipe bubble (P - 1) / (M + P - 1) and the
measured one: the share of the ranks' training time spent waiting for a neighbouring stage
(`pipeline_wait_fraction` of the metrics record), and samples per CPU-second of all ranks together.

  /usr/bin/python3 bench/torch_train/pipeline.py --trainer build/examples/train/ddprun-train

The ranks are started directly with the variables ddprun --procs-per-replica P exports.
Figures are for reading; no test depends on them.
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(trainer, model, stages, micro, data_dir, batch, layers, tmp):
    metrics = os.path.join(tmp, f"p{stages}m{micro}.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    port = str(free_port())
    procs = []
    for r in range(stages):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(stages), LOCAL_RANK=str(r),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=port, OMP_NUM_THREADS="1",
                   DDPRUN_MP_SIZE=str(stages), DDPRUN_MP_RANK=str(r), DDPRUN_DP_SIZE="1", DDPRUN_DP_RANK="0")
        procs.append(subprocess.Popen(
            [trainer, "--model", model, "--layers", str(layers), "--epochs", "1", "--data-dir", data_dir,
             "--threads", "1", "--batch-size", str(batch), "--micro-batches", str(micro),
             "--metrics-file", metrics],
            env=env, stdout=subprocess.DEVNULL, start_new_session=True))
    rcs = [p.wait(timeout=1800) for p in procs]
    if any(rcs):
        sys.exit(f"ddprun-train failed with {rcs} (P={stages}, M={micro})")
    with open(metrics) as f:
        rec = json.loads(f.readline())
    # Samples per CPU-second (all ranks' CPU time) moves less with other load than samples/s does.
    per_cpu = rec["samples_per_sec"] * rec["epoch_seconds"] / rec["cpu_seconds"] if rec["cpu_seconds"] > 0 else 0.0
    return (rec["samples_per_sec"], rec.get("pipeline_wait_fraction", 0.0),
            rec.get("test_accuracy", rec["test_loss"]), per_cpu)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trainer", required=True)
    ap.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--model", default="mlp", choices=["mlp", "ae"])
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--stages", default="1,2,4")
    ap.add_argument("--micro", default="1,4,16")
    a = ap.parse_args()
    configs = [(p, m) for p in map(int, a.stages.split(",")) for m in map(int, a.micro.split(","))]
    results = {c: [] for c in configs}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(a.reps):
            for c in configs:
                results[c].append(run(a.trainer, a.model, c[0], c[1], a.data_dir, a.batch_size, a.layers, tmp))
    print(f"| stages P | micro-batches M | samples/s (median of {a.reps}) | vs P = 1 | ideal bubble "
          f"(P-1)/(M+P-1) | measured wait share | samples/CPU-s | {'test accuracy' if a.model == 'mlp' else 'test loss'} |")
    print("|---|---|---|---|---|---|---|---|")
    base = {}
    for p, m in configs:
        sps = statistics.median(r[0] for r in results[(p, m)])
        base.setdefault(m, sps if p == 1 else None)
        ref = base.get(m)
        wait = statistics.median(r[1] for r in results[(p, m)])
        ideal = (p - 1) / (m + p - 1)
        per_cpu = statistics.median(r[3] for r in results[(p, m)])
        acc = results[(p, m)][0][2]
        ratio = f"{sps / ref:.2f}x" if ref else "-"
        print(f"| {p} | {m} | {sps:.0f} | {ratio} | {ideal:.0%} | {wait:.0%} | {per_cpu:.0f} | {acc:.4f} |")
    print()
    print("all runs (samples/s): " + "; ".join(
        f"P={p} M={m}: " + ", ".join(f"{r[0]:.0f}" for r in results[(p, m)]) for p, m in configs))
    print(f"load average at the end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
