#!/usr/bin/python3
"""Benchmark: ddprun-train vs Python DDP (torchrun) on the Fashion-MNIST MLP, CPU + gloo.

Both train one epoch of the same MLP (784-256-128-10, Adam 1e-3, global batch 64, one
intra-op thread per rank) on 1 and 2 ranks; samples/s counts the training loop only.
Prints a Markdown table (median of --reps runs, implementations interleaved) with the
C++/Python ratio and the scaling efficiency sps(2) / (2 * sps(1)).

  /usr/bin/python3 bench/torch_train/run.py --trainer build-train/examples/train/ddprun-train

torch 2.x: the trainer built against the venv's libtorch and the venv's Python on the other side:

  /usr/bin/python3 bench/torch_train/run.py --trainer build-gpu-kit-obj/examples/train/ddprun-train \
      --python "$(. scripts/torch2.sh && echo "$DDPRUN_TORCH2_PYTHON")"

--python names the interpreter (and so the torch and torchrun) of the Python side; the default is Debian's
python3-torch 1.13. Debian's torchrun 1.13 crashes on Python 3.11 unless -r/-t are non-zero, hence `-r 1 -t 1`
below (torchrun 2.x takes them too).
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_cpp(trainer, n, data_dir, batch, tmp, allreduce="auto"):
    metrics = os.path.join(tmp, f"m{n}.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    port = str(free_port())
    procs = []
    for r in range(n):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(n), LOCAL_RANK=str(r),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=port, OMP_NUM_THREADS="1")
        procs.append(subprocess.Popen(
            [trainer, "--model", "mlp", "--epochs", "1", "--data-dir", data_dir,
             "--threads", "1", "--batch-size", str(batch), "--metrics-file", metrics,
             "--allreduce", allreduce],
            env=env, stdout=subprocess.DEVNULL, start_new_session=True))
    rcs = [p.wait(timeout=600) for p in procs]
    if any(rcs):
        sys.exit(f"ddprun-train failed with {rcs}")
    with open(metrics) as f:
        rec = json.loads(f.readline())
    return rec["samples_per_sec"], 60000 / rec["cpu_seconds"]


def run_python(python, n, data_dir, batch):
    cmd = [python, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1",
           "--nproc_per_node", str(n), "-r", "1", "-t", "1",
           os.path.join(HERE, "ddp_mlp.py"), "--data-dir", data_dir, "--threads", "1",
           "--batch-size", str(batch)]
    # One thread per rank on both sides: torchrun sets OMP_NUM_THREADS=1 only for more than one
    # process, and without it a single Python rank's BLAS would use every core.
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600,
                         env=dict(os.environ, OMP_NUM_THREADS="1"))
    for line in out.stdout.splitlines():
        if '"python-ddp"' in line:
            rec = json.loads(line[line.index("{"):])
            return rec["samples_per_sec"], 60000 / rec["cpu_seconds"]
    sys.exit("python DDP run failed:\n" + out.stdout + out.stderr)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trainer", required=True, help="path of ddprun-train")
    ap.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--ranks", default="1,2")
    ap.add_argument("--batch-size", type=int, default=64, help="global batch")
    ap.add_argument("--python", default="/usr/bin/python3",
                    help="interpreter of the Python DDP side (its torch and torchrun)")
    args = ap.parse_args()
    trainer = os.path.abspath(args.trainer)
    ranks = [int(x) for x in args.ranks.split(",")]
    res = {("cpp", n): [] for n in ranks}
    res.update({("py", n): [] for n in ranks})
    torch_version = subprocess.run([args.python, "-c", "import torch; print(torch.__version__)"],
                                   capture_output=True, text=True, check=True).stdout.strip()
    print(f"python {args.python} (torch {torch_version}), trainer {trainer}", flush=True)
    print(f"cores {os.cpu_count()}, global batch {args.batch_size}, "
          f"load average before {os.getloadavg()}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.reps):
            for n in ranks:
                res[("cpp", n)].append(run_cpp(trainer, n, args.data_dir, args.batch_size, tmp))
                res[("py", n)].append(run_python(args.python, n, args.data_dir, args.batch_size))
                c, p = res[("cpp", n)][-1], res[("py", n)][-1]
                print(f"rep {rep} ranks {n}: ddprun-train {c[0]:.0f} python {p[0]:.0f} samples/s; "
                      f"per CPU-second {c[1]:.0f} vs {p[1]:.0f}", flush=True)
    print(f"load average after {os.getloadavg()}\n")
    # Wall-clock samples/s is what users see; samples per CPU-second (all ranks' process CPU
    # time in the training loop) is far less sensitive to other load on a shared machine.
    med = {k: statistics.median(x[0] for x in v) for k, v in res.items()}
    cpu = {k: statistics.median(x[1] for x in v) for k, v in res.items()}
    print("| ranks | ddprun-train samples/s | Python DDP samples/s | C++ / Python "
          "| ddprun-train samples/CPU-s | Python samples/CPU-s | C++ / Python |")
    print("|---|---|---|---|---|---|---|")
    for n in ranks:
        print(f"| {n} | {med[('cpp', n)]:.0f} | {med[('py', n)]:.0f} | "
              f"{med[('cpp', n)] / med[('py', n)]:.2f}x | {cpu[('cpp', n)]:.0f} | "
              f"{cpu[('py', n)]:.0f} | {cpu[('cpp', n)] / cpu[('py', n)]:.2f}x |")
    if 1 in ranks:
        for n in ranks:
            if n > 1:
                for impl, name in (("cpp", "ddprun-train"), ("py", "Python DDP")):
                    eff = med[(impl, n)] / (n * med[(impl, 1)])
                    print(f"\nscaling efficiency {name} 1 -> {n} ranks: {eff:.2f}", end="")
        print()


if __name__ == "__main__":
    main()
