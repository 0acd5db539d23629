#!/usr/bin/env python3
"""From a lost node to new workers running, on loopback (docs/elastic.md, docs/benchmarks.md).

Real ddprun agents with real PyTorch workers (tests/e2e/elastic_worker.py). Each scenario loses one
agent in the middle of the first attempt and reads the survivors' JSON events to break the recovery
down: detection (loss -> the first survivor starts its teardown), teardown (-> restart), new round (->
rendezvous_joined of attempt 1), spawn (-> last worker_started of attempt 1). torchrun's elastic
agent (c10d rendezvous) runs the same shrink in the same run: torchrun 2.x (the project's venv,
scripts/torch2.sh) and Debian's 1.13. The workers run on torch 2.x when the venv is there (--python).
Run it under bench/loopback_hosts.sh (torch 2.x's store looks up the name of every peer address).
Figures only: nothing here passes or fails.

  bench/elastic_recovery.py [--ddprun PATH] [--python PY] [--trials N] [--json FILE]
"""
import argparse
import datetime
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKER = os.path.join(ROOT, "tests", "e2e", "elastic_worker.py")
PY1 = "/usr/bin/python3"  # Debian's torch 1.13


def torch2_python():
    """The project's torch 2.x interpreter (scripts/torch2.sh), or "" without the venv."""
    out = subprocess.run(["bash", "-c", '. "$0" && printf %s "$DDPRUN_TORCH2_PYTHON"',
                          os.path.join(ROOT, "scripts", "torch2.sh")], capture_output=True, text=True)
    return out.stdout if out.returncode == 0 and os.access(out.stdout, os.X_OK) else ""


def torch_version(py):
    return subprocess.run([py, "-c", "import torch; print(torch.__version__)"], capture_output=True,
                          text=True).stdout.strip()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ts(event):
    return datetime.datetime.strptime(event["time"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(
        tzinfo=datetime.timezone.utc).timestamp()


def events(path):
    out = []
    with open(path, errors="replace") as f:
        for line in f:
            if line.startswith("{"):
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass
    return out


def worker_env(d):
    # The workers all-reduce every 50 ms, as training does: a lost peer also fails their collectives.
    return dict(os.environ, DIR=d, ELASTIC_WORKER_COLLECTIVES="1")


def wait_ready(d, n, limit=120):
    end = time.time() + limit
    while time.time() < end:
        if all(os.path.exists(os.path.join(d, f"ready_{r}")) for r in range(n)):
            return True
        time.sleep(0.05)
    return False


def phases(ev, t_loss, d, world):
    """The recovery's phases from the survivors' events (a lost agent's events are not in `ev`)."""
    detect = min(ts(e) for e in ev if e["event"] == "teardown" and ts(e) >= t_loss - 1)
    restart = max(ts(e) for e in ev if e["event"] == "restart")
    joined = max(ts(e) for e in ev if e["event"] == "rendezvous_joined" and e.get("attempt") == 1)
    spawned = max(ts(e) for e in ev if e["event"] == "worker_started" and ts(e) >= joined)
    trained = max(os.path.getmtime(os.path.join(d, f"done_{r}")) for r in range(world))
    return {"detection": detect - t_loss, "teardown": restart - detect, "round": joined - restart,
            "spawn": spawned - joined, "total": spawned - t_loss, "allreduce": trained - t_loss}


def print_row(scenario, t, r):
    if r is None:
        print(f"{scenario:9} {t:5}  did not recover")
    else:
        print(f"{scenario:9} {t:5}  {r['detection']:9.3f}  {r['teardown']:8.3f}  {r['round']:6.3f}  "
              f"{r['spawn']:6.3f}  {r['total']:6.3f}  {r['allreduce']:10.3f}")


def ddprun_trial(ddprun, py, scenario):
    """One loss; returns the phases in seconds, or None when the job did not recover."""
    spec = {"shrink": ("3:4", [0, 1, 2, 3], 2, signal.SIGKILL),
            "master": ("3:4", [0, 1, 2, 3], 0, signal.SIGKILL),
            "silent": ("3:4", [0, 1, 2, 3], 2, signal.SIGSTOP),
            "standby": ("4:4", [0, 4, 1, 2, 3], 1, signal.SIGKILL)}[scenario]
    nnodes, order, victim, sig = spec
    port, master_port = free_port(), free_port()  # not the default 29500, which other jobs here may take
    with tempfile.TemporaryDirectory() as d:
        procs = {}
        for n in order:
            argv = [ddprun, "--log-format", "json", "--nnodes", nnodes, "--node-rank", str(n),
                    "--rdzv-endpoint", f"127.0.0.1:{port}", "--max-restarts", "2", "--term-timeout", "3",
                    "--rdzv-timeout", "120", "--master-port", str(master_port), "--python", py, WORKER]
            log = open(os.path.join(d, f"agent{n}.log"), "w")
            procs[n] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=worker_env(d))
            if n == 4 or (scenario == "standby" and n == 0):
                time.sleep(1.0)  # the standby joins before the round closes
        active = 4
        if not wait_ready(d, active):
            for p in procs.values():
                p.kill()
            return None
        time.sleep(0.5)
        t_loss = time.time()
        procs[victim].send_signal(sig)
        ok = True
        for n, p in procs.items():
            if n == victim:
                continue
            try:
                ok = p.wait(timeout=120) == 0 and ok
            except subprocess.TimeoutExpired:
                p.kill()
                ok = False
        procs[victim].kill()
        procs[victim].wait()
        if not ok:
            return None
        ev = [e for n in procs if n != victim for e in events(os.path.join(d, f"agent{n}.log"))]
        return phases(ev, t_loss, d, 4 if scenario == "standby" else 3)


def torchrun_trial(py, limit):
    """torchrun --nnodes 3:4 (c10d) of the torch at `py`, one agent SIGKILLed: (seconds until the survivors' new
    workers finished their all-reduce, or None; what happened). The agents' last lines go to stderr when they
    did not recover."""
    port = free_port()
    with tempfile.TemporaryDirectory() as d:
        procs = []
        for n in range(4):
            # -r 1 -t 1: Debian's torchrun 1.13 crashes on Python 3.11 without them (harmless in 2.x). Started one
            # by one: every agent on the endpoint's host tries to serve the c10d store.
            argv = [py, "-m", "torch.distributed.run", "-r", "1", "-t", "1", "--nnodes", "3:4", "--nproc_per_node",
                    "1", "--rdzv_backend", "c10d", "--rdzv_endpoint", f"127.0.0.1:{port}", "--rdzv_id", "bench",
                    "--max_restarts", "2", "--monitor_interval", "1", WORKER]
            log = open(os.path.join(d, f"agent{n}.log"), "w")
            procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=worker_env(d),
                                          start_new_session=True))
            time.sleep(0.5)
        got, what = None, "the first attempt's workers were not all ready within 120 s"
        if wait_ready(d, 4):
            what = f"did not recover within {limit} s"
            time.sleep(0.5)
            t_loss = time.time()
            os.killpg(procs[3].pid, signal.SIGKILL)  # the node: its agent and its worker
            end = t_loss + limit
            while time.time() < end and got is None:
                if all(os.path.exists(os.path.join(d, f"done_{r}")) for r in range(3)):
                    got = max(os.path.getmtime(os.path.join(d, f"done_{r}")) for r in range(3)) - t_loss
                time.sleep(0.1)
        for p in procs:  # each agent with its workers (their own session)
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()
        if got is None:
            for n in range(4):
                with open(os.path.join(d, f"agent{n}.log"), errors="replace") as f:
                    tail = f.read().splitlines()[-6:]
                print("".join(f"  agent {n}: {line}\n" for line in tail), end="", file=sys.stderr)
        return got, what if got is None else "recovered"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ddprun", default=os.path.join(ROOT, "build", "launcher", "ddprun"))
    ap.add_argument("--python", default=None, help="the workers' interpreter (default: torch 2.x's, else 1.13's)")
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--scenarios", default="shrink,standby,master,silent", help="comma-separated, of these four")
    ap.add_argument("--json")
    ap.add_argument("--no-torchrun", action="store_true")
    ap.add_argument("--torchrun-only", action="store_true", help="torchrun's trials only")
    ap.add_argument("--torchrun-python", action="append", help="torchrun's interpreter(s) (default: 2.x's and 1.13's)")
    ap.add_argument("--torchrun-limit", type=int, default=150, help="s to wait for torchrun's recovery")
    ap.add_argument("--slurm-out", nargs=4, metavar=("SCENARIO", "OUT", "T_LOSS", "WORLD"),
                    help="(bench/elastic_slurm.sh) the phases from a Slurm job's merged output; DIR beside it")
    a = ap.parse_args()
    if a.slurm_out:
        scenario, out, t_loss, world = a.slurm_out
        ev = events(out)  # the lost agent wrote no event of the recovery
        r = phases(ev, float(t_loss), os.path.dirname(out), int(world))
        print_row(scenario, 0, r)
        if a.json:
            with open(a.json, "a") as f:
                f.write(json.dumps({"launcher": "ddprun", "where": "slurm", "scenario": scenario, **r}) + "\n")
        return 0
    torch2 = torch2_python()
    py = a.python or torch2 or PY1
    print(f"workers: torch {torch_version(py)} ({py}); load average {os.getloadavg()[0]:.2f}")
    rows = []
    print("scenario  trial  detection  teardown  round   spawn   total   all-reduce  (s from the loss; target for "
          "total: heartbeat timeout 5 s + 2 s)")
    for scenario in ([] if a.torchrun_only else a.scenarios.split(",")):
        for t in range(a.trials):
            r = ddprun_trial(a.ddprun, py, scenario)
            rows.append({"launcher": "ddprun", "scenario": scenario, "trial": t, **(r or {"failed": True})})
            print_row(scenario, t, r)
    if not a.no_torchrun:
        for tpy in a.torchrun_python or [p for p in (torch2, PY1) if p]:
            name = f"torchrun {torch_version(tpy).split('+')[0]}"
            for t in range(a.trials):
                got, what = torchrun_trial(tpy, a.torchrun_limit)
                rows.append({"launcher": name, "scenario": "shrink", "trial": t, "total": got, "what": what})
                print(f"{name} shrink: " + (what if got is None else
                                             f"all-reduce at the new world size {got:.3f} s after the loss"),
                      flush=True)
    print(f"load average {os.getloadavg()[0]:.2f}")
    if a.json:
        with open(a.json, "a") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    sys.exit(main())
