#!/usr/bin/python3
"""The rendezvous workload of bench/rdzv_scale against PyTorch's c10d TCPStore, of whichever torch runs it:
Debian's 1.13 (/usr/bin/python3: the old server, one thread polling every connection) or the project's 2.x
(scripts/torch2.sh: the libuv server, its default since 2.4; --no-libuv for the old one). Run 2.x under
bench/loopback_hosts.sh: its clients look up the name of the peer address, which DNS would answer otherwise.

For N nodes: a server process hosts TCPStore(is_master=True) and plays the master (waits until
N-1 clients joined, then publishes a plan of PLAN_BYTES(N) bytes); N-1 clients, as threads spread
over several processes, each connect, set their join record, add to a counter, wait for the
plan key and get it. Timed from releasing the clients (threads already created) until the last
one holds the plan. Prints one JSON line per N; a run that fails or times out says so.

Usage: c10d_scale.py [--procs P] [--timeout S] [--plan-bytes-per-node B] [--no-libuv] N...
"""
import argparse
import datetime
import json
import multiprocessing as mp
import os
import resource
import socket
import sys
import threading
import time

import torch
import torch.distributed as dist

# TCPStore(use_libuv=...) exists from torch 2.2; 1.13's store has one server.
LIBUV_ARG = "use_libuv" in (dist.TCPStore.__init__.__doc__ or "")


def raise_fd_limit():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def proc_usage(pid):
    """CPU seconds and peak RSS (VmHWM, MB) of a live process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        with open(f"/proc/{pid}/status") as f:
            hwm = next(int(l.split()[1]) for l in f if l.startswith("VmHWM:")) / 1024
        return {"cpu_s": cpu, "hwm_mb": hwm}
    except (OSError, StopIteration, IndexError, ValueError):
        return {}


def server(port, others, plan_bytes, timeout, libuv, ready, out):
    raise_fd_limit()
    try:
        kw = {"use_libuv": libuv} if LIBUV_ARG else {}
        store = dist.TCPStore("127.0.0.1", port, others + 1, True,
                              datetime.timedelta(seconds=timeout), wait_for_workers=False, **kw)
        out.put({"libuv": bool(getattr(store, "libuvBackend", False))})
        ready.set()
        store.wait(["all_joined"])
        store.set("plan", b"p" * plan_bytes)
        time.sleep(timeout)  # keep serving until the parent ends us
    except Exception as e:  # noqa: BLE001 - reported, not hidden
        out.put({"error": f"server: {e}"})


def client_proc(port, ranks, others, timeout, go, out):
    raise_fd_limit()
    threading.stack_size(512 * 1024)
    done = []
    errors = []
    lock = threading.Lock()

    def client(rank):
        go.wait()
        try:
            s = dist.TCPStore("127.0.0.1", port, others + 1, False, datetime.timedelta(seconds=timeout))
            s.set(f"node/{rank}", json.dumps({"node_rank": rank, "hostname": f"sim{rank}", "addr": "127.0.0.1",
                                              "local_world_size": 8, "gpus": []}))
            if s.add("arrivals", 1) == others:
                s.set("all_joined", "1")
            s.wait(["plan"])
            plan = s.get("plan")
            with lock:
                done.append((time.monotonic(), len(plan)))
            hold.wait()  # keep the connection until every client is done
        except Exception as e:  # noqa: BLE001
            with lock:
                errors.append(str(e).splitlines()[0] if str(e) else type(e).__name__)

    hold = threading.Event()
    threads = [threading.Thread(target=client, args=(r,), daemon=True) for r in ranks]
    for t in threads:
        t.start()
    out.put(("ready", len(threads)))
    deadline = time.monotonic() + timeout + 30
    while time.monotonic() < deadline:
        with lock:
            if len(done) + len(errors) >= len(ranks):
                break
        time.sleep(0.01)
    with lock:
        out.put(("result", [d[0] for d in done], errors[:3], len(errors), max([d[1] for d in done], default=0)))
    hold.set()
    time.sleep(1)
    os._exit(0)


def run(n, procs, timeout, plan_bytes, libuv):
    others = n - 1
    load_before = os.getloadavg()[0]
    port = free_port()
    ctx = mp.get_context("fork")
    out = ctx.Queue()
    ready = ctx.Event()
    srv = ctx.Process(target=server, args=(port, others, plan_bytes, timeout, libuv, ready, out))
    srv.start()
    if not ready.wait(30):
        srv.kill()
        return {"store": "c10d", "torch": torch.__version__, "n": n, "note": "server did not start"}
    go = ctx.Event()
    ranks = list(range(1, n))
    procs = max(1, min(procs, others))
    kids = []
    for p in range(procs):
        kids.append(ctx.Process(target=client_proc, args=(port, ranks[p::procs], others, timeout, go, out)))
        kids[-1].start()
    results, server_info, ready_count = [], {}, 0
    while ready_count < procs:
        msg = out.get(timeout=120)
        if isinstance(msg, tuple) and msg[0] == "ready":
            ready_count += 1
        elif isinstance(msg, dict):
            server_info.update(msg)
    t0 = time.monotonic()
    go.set()
    deadline = t0 + timeout + 60
    while len(results) < procs and time.monotonic() < deadline:
        try:
            msg = out.get(timeout=1)
        except Exception:  # noqa: BLE001 - queue.Empty
            continue
        if isinstance(msg, tuple) and msg[0] == "result":
            results.append(msg)
        elif isinstance(msg, dict):
            server_info.update(msg)
    server_info.update(proc_usage(srv.pid))  # the store thread's work is done by now
    for k in kids:
        k.join(5)
        if k.is_alive():
            k.kill()
    srv.kill()
    srv.join()
    ends = [t for r in results for t in r[1]]
    failed = sum(r[3] for r in results) + (others - len(ends) - sum(r[3] for r in results))
    errs = [e for r in results for e in r[2]]
    rec = {"store": "c10d", "torch": torch.__version__, "libuv": server_info.get("libuv", False),
           "load_before": load_before, "n": n, "plan_bytes": plan_bytes, "clients": others, "holding_plan": len(ends),
           "failed": failed, "plan_s": (max(ends) - t0) if len(ends) == others else -1,
           "master_cpu_s": server_info.get("cpu_s", -1), "master_hwm_mb": server_info.get("hwm_mb", -1),
           "error": errs[0] if errs else server_info.get("error", "")}
    if len(ends) < others:
        rec["note"] = f"{len(ends)} of {others} clients got the plan within {timeout} s"
    return rec


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("sizes", nargs="*", type=int, default=[256, 1024, 4096, 16384])
    ap.add_argument("--procs", type=int, default=16)
    ap.add_argument("--timeout", type=int, default=60)
    ap.add_argument("--plan-bytes-per-node", type=int, default=64)
    ap.add_argument("--json", default="")
    ap.add_argument("--no-libuv", action="store_true", help="torch 2.x: the old server instead of libuv")
    a = ap.parse_args()
    raise_fd_limit()
    for n in a.sizes:
        rec = run(n, a.procs, a.timeout, a.plan_bytes_per_node * n, not a.no_libuv)
        line = json.dumps(rec)
        print(line, flush=True)
        if a.json:
            with open(a.json, "a") as f:
                f.write(line + "\n")


if __name__ == "__main__":
    sys.exit(main())
