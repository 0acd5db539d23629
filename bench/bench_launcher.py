#!/usr/bin/python3
"""Launcher benchmarks: ddprun against torchrun on the same machine, same run: torchrun 2.x (the project's venv,
scripts/torch2.sh; the anchor) and Debian's torchrun 1.13 (the old anchor).

Measures launch of 2/8/32 trivial workers, failure teardown (local and across two agents), SIGTERM to exit,
log throughput and the agent's peak RSS. torchrun 2.x runs at its defaults (its monitor interval is 0.1 s);
torchrun 1.13 at its default interval (5 s) and at 0.1 s, with `-r 1 -t 1`, without which Debian's 1.13 fails
on Python 3.11. Prints a Markdown table and writes it (plus a PNG plot when gnuplot is present) to the output
directory.
Usage: bench/bench_launcher.py BUILD_DIR OUT_DIR [--repeat N] [--quick] [--torch2 PYTHON]
"""
import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

PY1 = "/usr/bin/python3"  # Debian's torch 1.13 is importable only from here
HERE = os.path.dirname(os.path.abspath(__file__))


def torch2_python():
    """The project's torch 2.x interpreter (scripts/torch2.sh), or "" without the venv."""
    out = subprocess.run(["bash", "-c", '. "$0" && printf %s "$DDPRUN_TORCH2_PYTHON"',
                          os.path.join(HERE, "..", "scripts", "torch2.sh")], capture_output=True, text=True)
    return out.stdout if out.returncode == 0 and os.access(out.stdout, os.X_OK) else ""


def torch_version(py):
    return subprocess.run([py, "-c", "import torch; print(torch.__version__)"], capture_output=True,
                          text=True).stdout.strip()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_timed(argv, env=None, stdout=subprocess.DEVNULL, on_start=None):
    """Runs argv; returns (seconds, exit code, peak RSS of the process tree waited for, in MB)."""
    t0 = time.perf_counter()
    p = subprocess.Popen(argv, env=env, stdout=stdout, stderr=subprocess.DEVNULL, start_new_session=True)
    if on_start:
        on_start(p)
    _, status, ru = os.wait4(p.pid, 0)
    dt = time.perf_counter() - t0
    code = os.waitstatus_to_exitcode(status)
    try:
        os.killpg(p.pid, signal.SIGKILL)  # nothing may outlive a measurement
    except ProcessLookupError:
        pass
    return dt, code, ru.ru_maxrss / 1024.0


class Torchrun:
    """One torchrun configuration: its interpreter, its name in the tables, and the flags it always gets."""

    def __init__(self, name, py, flags):
        self.name, self.py, self.flags = name, py, flags

    def argv(self, *args):
        return [self.py, "-m", "torch.distributed.run", *args, *self.flags]


class Launchers:
    def __init__(self, build, torch2):
        self.ddprun = os.path.join(build, "launcher", "ddprun")
        self.fake = os.path.join(build, "tests", "helpers", "fake_worker")
        old = ["-r", "1", "-t", "1"]  # Debian's 1.13 fails on Python 3.11 without them
        self.torchruns = []
        if torch2:
            self.torchruns.append(Torchrun(f"torchrun {torch_version(torch2).split('+')[0]}", torch2, []))
        v1 = torch_version(PY1).split("a")[0]
        self.torchruns += [Torchrun(f"torchrun {v1} (default)", PY1, old),
                           Torchrun(f"torchrun {v1} (--monitor_interval 0.1)", PY1, old + ["--monitor_interval", "0.1"])]
        # The speed-up column is against the newest torchrun at its defaults.
        self.ref = self.torchruns[0].name if torch2 else self.torchruns[-1].name

    def variants(self):
        out = [("ddprun", lambda n, extra=(): [self.ddprun, "-q", "--nproc-per-node", str(n), *extra, "--"])]
        for t in self.torchruns:
            out.append((t.name, lambda n, extra=(), t=t: t.argv("--nproc_per_node", str(n), "--no_python", *extra)))
        return out


def wait_files(paths, limit=60):
    end = time.time() + limit
    while time.time() < end:
        if all(os.path.exists(p) for p in paths):
            return True
        time.sleep(0.002)
    return False


def scenario_launch(L, prefix, n):
    return run_timed(prefix(n) + ["/bin/true"])


def scenario_teardown(L, prefix, _n):
    # Local rank 1 exits 3 at once; rank 0 would sleep for a minute.
    script = 'if [ "$LOCAL_RANK" = 1 ]; then exit 3; fi; exec sleep 60'
    return run_timed(prefix(2) + ["/bin/sh", "-c", script])


def scenario_sigterm(L, prefix, _n):
    d = tempfile.mkdtemp()
    script = f'touch {d}/ready_$LOCAL_RANK; exec sleep 60'
    state = {}

    def send(p):
        wait_files([f"{d}/ready_0", f"{d}/ready_1"])
        state["t"] = time.perf_counter()
        os.kill(p.pid, signal.SIGTERM)

    _, code, rss = run_timed(prefix(2) + ["/bin/sh", "-c", script], on_start=send)
    dt = time.perf_counter() - state["t"]
    shutil.rmtree(d, ignore_errors=True)
    return dt, code, rss


def scenario_logs(L, prefix, _n):
    return run_timed(prefix(4) + [L.fake, "lines", "200000", "out"])


def scenario_teardown_agents(L, name, _n):
    """Two agents on loopback; rank 3 (node 1) exits 3 at once. Time until both agents have exited."""
    port = free_port()
    script = 'if [ "$RANK" = 3 ]; then exit 3; fi; exec sleep 20'
    if name == "ddprun":
        argvs = [[L.ddprun, "-q", "--nnodes", "2", "--node-rank", str(r), "--rdzv-endpoint", f"127.0.0.1:{port}",
                  "--nproc-per-node", "2", "--", "/bin/sh", "-c", script] for r in range(2)]
    else:
        t = next(t for t in L.torchruns if t.name == name)
        argvs = [t.argv("--nnodes", "2", "--node_rank", str(r), "--rdzv_backend", "static", "--master_addr",
                        "127.0.0.1", "--master_port", str(port), "--nproc_per_node", "2", "--no_python",
                        "/bin/sh", "-c", script) for r in range(2)]
    t0 = time.perf_counter()
    procs = [subprocess.Popen(a, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
             for a in argvs]
    codes = []
    for p in procs:
        try:
            # torchrun 2.x's node 0 waits in its exit barrier (300 s by default) for the node that left.
            codes.append(p.wait(timeout=max(1.0, t0 + AGENTS_LIMIT_S - time.perf_counter())))
        except subprocess.TimeoutExpired:
            codes.append("killed")
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return time.perf_counter() - t0, codes, 0.0


AGENTS_LIMIT_S = 60  # the two-agent teardown: an agent still running then is killed and reported so

SCENARIOS = [
    ("launch 2 workers (/bin/true)", scenario_launch, 2),
    ("launch 8 workers", scenario_launch, 8),
    ("launch 32 workers", scenario_launch, 32),
    ("failure teardown, 1 agent (rank 1 exits 3)", scenario_teardown, 2),
    ("SIGTERM to exit (2 workers)", scenario_sigterm, 2),
    ("log throughput: 4 ranks x 200k lines", scenario_logs, 4),
]


def fmt_stats(xs):
    return f"{statistics.median(xs):.3f} ({min(xs):.3f}–{max(xs):.3f})"


def machine(L):
    cpu = "unknown CPU"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    torches = ", ".join(f"torch {torch_version(py)} ({py})" for py in dict.fromkeys(t.py for t in L.torchruns))
    return (f"{os.cpu_count()} cores ({cpu}), {mem:.0f} GiB RAM, Linux {os.uname().release}, {torches}; "
            f"load average before {os.getloadavg()[0]:.2f}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("out")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="skip torchrun 1.13 at its default interval (slow)")
    ap.add_argument("--torch2", default=None, help="torch 2.x interpreter (default: scripts/torch2.sh's venv)")
    a = ap.parse_args()
    torch2 = a.torch2 if a.torch2 is not None else torch2_python()
    if not torch2:
        print("bench_launcher: no torch 2.x venv (scripts/setup.sh installs it): torchrun 1.13 only", file=sys.stderr)
    L = Launchers(a.build, torch2)
    where = machine(L)
    os.makedirs(a.out, exist_ok=True)
    rows = []
    rss = {}
    variants = L.variants()
    if a.quick:
        variants = [v for v in variants if not v[0].endswith("(default)")]
    for title, fn, n in SCENARIOS:
        row = {"title": title}
        for name, prefix in variants:
            times, codes = [], []
            for _ in range(a.repeat):
                dt, code, r = fn(L, prefix, n)
                times.append(dt)
                codes.append(code)
                if title.startswith("launch 2"):
                    rss.setdefault(name, []).append(r)
            row[name] = (times, codes)
            print(f"{title:45s} {name:34s} {fmt_stats(times)} s  exit {sorted(set(codes))}", flush=True)
        rows.append(row)
    row = {"title": "failure teardown, 2 agents (rank 3 exits 3)"}
    for name, _ in variants:
        times, codes = [], []
        for _ in range(a.repeat):
            dt, c, _r = scenario_teardown_agents(L, name, 2)
            times.append(dt)
            codes.append(tuple(c))
        row[name] = (times, codes)
        print(f"{row['title']:45s} {name:34s} {fmt_stats(times)} s  exit {sorted(set(codes), key=str)}", flush=True)
    rows.append(row)

    names = [v[0] for v in variants]
    ref = L.ref
    md = [f"Machine: {where}; load average after {os.getloadavg()[0]:.2f}. Each cell: median (min–max) seconds over {a.repeat} runs; exit codes seen.",
          "",
          "| scenario | " + " | ".join(names) + f" | ddprun speed-up vs {ref} |",
          "|---|" + "---|" * (len(names) + 1)]
    for row in rows:
        cells = []
        for name in names:
            times, codes = row[name]
            killed = any("killed" in (c if isinstance(c, tuple) else (c,)) for c in codes)
            cells.append(f"{'≥ ' if killed else ''}{fmt_stats(times)} s, exit "
                         f"{', '.join(str(c).replace(chr(39), '') for c in sorted(set(codes), key=str))}")
        ratio = statistics.median(row[ref][0]) / statistics.median(row["ddprun"][0])
        md.append(f"| {row['title']} | " + " | ".join(cells) + f" | {ratio:.1f}× |")
    md.append("")
    md.append("| agent peak RSS, 2 workers | " + " | ".join(names) + " |")
    md.append("|---|" + "---|" * len(names))
    md.append("| MB (max over runs, process tree) | " + " | ".join(f"{max(rss[n]):.1f}" for n in names) + " |")
    text = "\n".join(md) + "\n"
    with open(os.path.join(a.out, "launcher.md"), "w") as f:
        f.write(text)
    print(text)
    if shutil.which("gnuplot"):
        data = os.path.join(a.out, "launcher.dat")
        with open(data, "w") as f:
            for i, row in enumerate(rows):
                vals = " ".join(f"{statistics.median(row[n][0]):.4f}" for n in names)
                f.write(f'{i} "{row["title"].split(" (")[0]}" {vals}\n')
        plot = os.path.join(a.out, "launcher.png")
        cols = " , ".join(f"'{data}' using ($1+{0.25 * k - 0.25}):{k + 3} with boxes title '{n}'"
                          for k, n in enumerate(names))
        xtics = ", ".join('"%s" %d' % (r["title"].split(" (")[0], i) for i, r in enumerate(rows))
        script = (f"set terminal png size 1100,550 noenhanced; set output '{plot}'; set logscale y;"
                  f"set style fill solid 0.6; set key outside top center horizontal;"
                  f"set boxwidth 0.25; set ylabel 'seconds (median, log scale)'; set xtics rotate by -20;"
                  f"set xtics ({xtics}); plot {cols}")
        subprocess.run(["gnuplot", "-e", script], check=False)


if __name__ == "__main__":
    sys.exit(main())
