#!/usr/bin/python3
"""Assembles docs/benchmarks.md from the fragments bench/run_all.sh wrote, with plots (gnuplot).

Usage: bench/assemble.py FRAGMENT_DIR OUTPUT_MD
"""
import os
import re
import shutil
import subprocess
import sys
import time


def read(path):
    with open(path) as f:
        return f.read()


def table_rows(md):
    """{first cell: [cells]} for the data rows of the Markdown tables in md."""
    rows = {}
    for line in md.splitlines():
        if line.startswith("|") and not line.startswith("|---") and not line.startswith("| clients") \
                and not line.startswith("| ranks") and not line.startswith("| scenario"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            rows[cells[0]] = cells[1:]
    return rows


def machine():
    cpu = "unknown CPU"
    for line in read("/proc/cpuinfo").splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    def version(py):
        return subprocess.run([py, "-c", "import torch; print(torch.__version__)"],
                              capture_output=True, text=True).stdout.strip()
    torch2 = subprocess.run(["bash", "-c", '. scripts/torch2.sh && printf %s "$DDPRUN_TORCH2_PYTHON"'],
                            capture_output=True, text=True).stdout
    torches = (f"torch {version(torch2)} (project venv), " if os.access(torch2, os.X_OK) else "") + \
        f"Debian torch {version('/usr/bin/python3')}"
    return (f"{os.cpu_count()} cores ({cpu}), {mem:.0f} GiB RAM, Linux {os.uname().release}, "
            f"{torches}; load average at the end {os.getloadavg()[0]:.2f}")


def store_section(d):
    def rows(name):
        path = os.path.join(d, name)
        return table_rows(read(path)) if os.path.exists(path) else {}
    ours, old, new = rows("store_ddprun_idle.md"), rows("store_c10d_idle.md"), rows("store_c10d2_idle.md")
    ours_n, old_n, new_n = rows("store_ddprun_normal.md"), rows("store_c10d_normal.md"), rows("store_c10d2_normal.md")

    def cell(t, n):
        if n not in t or t[n][0].startswith("skipped"):
            return "did not finish (server crashed)", None
        c = t[n]
        return f"{float(c[0]):.1f} ({c[1]}–{c[2]})", float(c[0])

    # torch 2.x's libuv server is the anchor when it ran; Debian's 1.13 is the old one.
    anchor, anchor_n, name = (new, new_n, "c10d 2.x (libuv)") if new else (old, old_n, "c10d 1.13")
    lines = [f"| clients | ddprun, clients SCHED_IDLE: median ms (min–max) | {name}, same | {name} / ddprun "
             + ("| c10d 1.13, same " if new else "")
             + f"| ddprun, clients SCHED_OTHER | {name}, clients SCHED_OTHER "
             + ("| c10d 1.13, clients SCHED_OTHER |" if new else "|"),
             "|---:|---:|---:|---:|---:|---:|" + ("---:|---:|" if new else "")]
    plot = []
    for n in ours:
        o_txt, o = cell(ours, n)
        t_txt, t = cell(anchor, n)
        old_txt, t_old = cell(old, n)
        on_txt, _ = cell(ours_n, n)
        tn_txt, _ = cell(anchor_n, n)
        oldn_txt, _ = cell(old_n, n)
        ratio = f"{t / o:.1f}×" if t is not None else "—"
        if new:
            lines.append(f"| {n} | {o_txt} | {t_txt} | {ratio} | {old_txt} | {on_txt} | {tn_txt} | {oldn_txt} |")
        else:
            lines.append(f"| {n} | {o_txt} | {t_txt} | {ratio} | {on_txt} | {tn_txt} |")
        plot.append((int(n), o, t, t_old if new else None))
    verdict = ""
    if "2048" in ours:
        v = float(ours["2048"][0])
        per = {int(n): float(c[0]) / int(n) * 1000 for n, c in ours.items()}
        verdict = (f"\n\n2048 clients: {v:.0f} ms against the target of 150 ms "
                   f"({'met' if v <= 150 else 'not met on this machine'}) with clients at SCHED_IDLE; with clients "
                   f"at normal priority "
                   f"{float(ours_n['2048'][0]):.0f} ms. " if "2048" in ours_n else
                   f"\n\n2048 clients: {v:.0f} ms against the target of 150 ms. ")
        verdict += ("Time per client (µs), which stays flat when growth is linear: " +
                    ", ".join(f"{n}: {p:.0f}" for n, p in sorted(per.items())) + ".")
    png = os.path.join(d, "store.png")
    if shutil.which("gnuplot") and plot:
        dat = os.path.join(d, "store.dat")
        nan = lambda v: "NaN" if v is None else v  # noqa: E731
        with open(dat, "w") as f:
            for n, o, t, t_old in plot:
                f.write(f"{n} {nan(o)} {nan(t)} {nan(t_old)}\n")
        subprocess.run(["gnuplot", "-e",
                        f"set terminal png size 800,450 noenhanced; set output '{png}'; set logscale xy;"
                        f"set datafile missing 'NaN'; set xlabel 'clients'; set ylabel 'ms (median)'; set key left top;"
                        f"plot '{dat}' using 1:2 with linespoints title 'ddprun store',"
                        f"'{dat}' using 1:3 with linespoints title '{name}'" +
                        (f",'{dat}' using 1:4 with linespoints title 'c10d 1.13'" if new else "")], check=False)
    return "\n".join(lines) + verdict, png


CPU_BIND_TEXT = """`bench/torch_train/cpu_bind.py`: ddprun launching 2 ranks of ddprun-train (one epoch of the
Fashion-MNIST MLP) with `--cpu-bind none` and `--cpu-bind cores`, interleaved; OMP_NUM_THREADS is
ddprun's (1 per worker either way here: one core each when bound). On a 2-core machine binding can
only stop the two ranks from migrating between the cores; the gain it is for (keeping ranks and
their memory on separate NUMA nodes, near their GPUs) needs a bigger node."""


def main():
    d, out = sys.argv[1], sys.argv[2]
    rel = os.path.relpath(d, os.path.dirname(out))
    parts = [
        "# Benchmarks",
        "",
        f"Generated by `bench/run_all.sh` on {time.strftime('%Y-%m-%d')}. Machine: {machine()}.",
        "Timing never decides a test; these figures are for reading. Every comparison ran in the same run,",
        "side by side on the same machine.",
        "",
        "The rendezvous at scale (up to 16,384 simulated nodes against a real master, and c10d's TCPStore on the",
        "same join) has its own page and script: [scale.md](scale.md), `bench/rdzv_scale.sh`.",
        "",
        "## Launcher against torchrun",
        "",
        "`bench/bench_launcher.py`: trivial workers (`/bin/true`); a failure where local rank 1 exits 3 and",
        "the others sleep; SIGTERM to the launcher once the workers run; 4 ranks printing 200k lines each",
        "(console to /dev/null); the same failure across two agents on loopback; the launcher's peak RSS",
        "(process tree, from wait4). The anchor is torchrun 2.x (the project's venv, `scripts/torch2.sh`;",
        "`python -m torch.distributed.run --no_python` at its defaults, whose monitor interval is 0.1 s).",
        "The old anchor is Debian's torchrun 1.13, at its default monitor interval (5 s) and at 0.1 s, with",
        "`-r 1 -t 1` (its 1.13 fails on Python 3.11 with `-r 0` or `-r 3`). Across two agents torchrun",
        "uses the static rendezvous; it does not tear the other node down (an agent still running after",
        "60 s is killed and the cell starts with ≥).",
        "",
        # The fragment's own first line repeats the machine; keep the rest.
        "\n".join(l for l in read(os.path.join(d, "launcher.md")).strip().splitlines()
                  if not l.startswith("Machine:")).strip(),
    ]
    if os.path.exists(os.path.join(d, "launcher.png")):
        parts += ["", f"![launcher timings]({rel}/launcher.png)"]
    store, png = store_section(d)
    parts += ["", "## Store scaling against c10d::TCPStore", "",
              "`build/bench/store_bench`, `build/bench/torch/torch_store_bench` (Debian's libtorch 1.13) and",
              "`build/bench/torch2_store_bench` (the same source against torch 2.x's wheel: its libuv server) share one harness",
              "(`bench/bench_harness.hpp`): N client threads each connect, set a 64-byte key, add to a",
              "counter, and wait for a `done` key set by the client that brings the counter to N; timed from",
              "releasing the (already created) threads until the last client has closed its connection.",
              "Server and clients share the machine, so on 2 cores the figures include scheduling N client",
              "threads and the kernel's work for both ends of every connection. On a cluster the clients sit",
              "on other nodes and never take the server's CPU; the nearest a shared machine gets to that is",
              "client threads at SCHED_IDLE, which run only when the server thread does not want the CPU.",
              "The first columns are that case. The last two are the same workload with clients at normal",
              "priority, where the server thread is one runnable thread among thousands when they are",
              "released. Every store gets the same treatment in both. c10d runs under `bench/loopback_hosts.sh`:",
              "torch 2.x's clients look up the name of the IPv4-mapped loopback address they connect to, which",
              "without it goes to DNS (a resolver time-out each on a machine without a reachable server).",
              "Server and clients share one process, whose descriptor limit (20,000 here) stops this harness",
              "below 10,000 clients; 16,384 are in [scale.md](scale.md).", "", store]
    if os.path.exists(png):
        parts += ["", f"![store scaling]({rel}/store.png)"]
    trainer = read(os.path.join(d, "trainer.md"))
    table = "\n".join(l for l in trainer.splitlines() if l.startswith("|"))
    eff = "\n".join(l.strip() for l in trainer.splitlines() if l.strip().startswith("scaling efficiency"))
    parts += ["", "## ddprun-train against Python DDP", "",
              "`bench/torch_train/run.py`: one epoch of the Fashion-MNIST MLP (784-256-128-10, Adam, global",
              "batch 64, one thread per rank, CPU) in ddprun-train and in Python",
              "`DistributedDataParallel` (`bench/torch_train/ddp_mlp.py`, launched by torchrun). Samples/s of",
              "the training loop; samples per CPU-second is less sensitive to other load. ddprun-train runs",
              "its default `--allreduce auto`: shared memory on one node (Python DDP uses gloo over",
              "loopback TCP); see docs/trainer.md.", "", table, "",
              eff.replace("\n", "; ") + ".", ""]
    cpu_bind = os.path.join(d, "cpu_bind.md")
    if os.path.exists(cpu_bind):
        parts += ["## ddprun-train with and without --cpu-bind", "", CPU_BIND_TEXT, "",
                  read(cpu_bind).strip(), ""]
    with open(out, "w") as f:
        f.write("\n".join(parts) + "\n")


if __name__ == "__main__":
    main()
