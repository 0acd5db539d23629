#!/usr/bin/python3
"""Side-by-side table and plot for bench/rdzv_scale.sh: reads the JSON lines rdzv_scale and
c10d_scale wrote, prints a Markdown table (docs/bench/scale.md) and draws docs/bench/scale.png. The c10d
columns are the newest torch's c10d run; with runs of several torch versions (rdzv_scale.sh runs 2.x and
1.13), NAME_c10d.md sets them side by side with ddprun's.
Usage: scale_table.py JSONL OUT_DIR [NAME [BASELINE_JSONL]]
NAME names the outputs (default scale); BASELINE_JSONL adds another ddprun run's plan times to the plot
(e.g. today's main against a branch)."""
import json
import os
import shutil
import subprocess
import sys


def sec(v):
    return "-" if v is None or v < 0 else f"{v:.3f}"


def c10d_name(version, recs):
    libuv = any(r.get("libuv") for r in recs.values())
    return f"c10d {version.split('+')[0]}{' (libuv)' if libuv else ''}"


def side_by_side(ours, c10d, versions):
    """ddprun's last plan beside every c10d run's: last plan (s), server CPU (s), server peak RSS (MB)."""
    head = "| nodes | ddprun: last plan (s) | ddprun master CPU (s) | " + " | ".join(
        f"{c10d_name(v, c10d[v])}: last plan (s) | CPU (s) | peak RSS (MB)" for v in versions) + " | notes |"
    lines = [head, "|---|" + "---|" * (2 + 3 * len(versions) + 1)]
    for n in sorted(set(ours) | {n for v in versions for n in c10d[v]}):
        both = [x for x in (ours.get(n, {}).get("abort"), ours.get(n, {}).get("barrier")) if x]
        plans = [x["plan_s"] for x in both if x.get("plan_s", -1) >= 0]
        cells = [sec(max(plans)) if plans and len(plans) == len(both) else "-",
                 " / ".join(f"{x['master_cpu_s']:.2f}" for x in both) or "-"]
        notes = []
        for v in versions:
            c = c10d[v].get(n, {})
            cells += [sec(c.get("plan_s")), sec(c.get("master_cpu_s")),
                      f"{c['master_hwm_mb']:.0f}" if c.get("master_hwm_mb", -1) >= 0 else "-"]
            if c.get("note"):
                notes.append(f"{c10d_name(v, c10d[v])}: {c['note']} {c.get('error', '')[:90]}".strip())
        lines.append(f"| {n} | " + " | ".join(cells) + f" | {'; '.join(notes)} |")
    return "\n".join(lines)


def main():
    src, out = sys.argv[1], sys.argv[2]
    name = sys.argv[3] if len(sys.argv) > 3 else "scale"
    base = {}
    if len(sys.argv) > 4:
        for line in open(sys.argv[4]):
            r = json.loads(line) if line.strip() else None
            if r and r["store"] == "ddprun":
                prev = base.get(r["n"])
                ok = r["plan_s"] if r["plan_s"] >= 0 else None
                base[r["n"]] = ok if prev is None else (None if ok is None else max(prev, ok))
    recs = [json.loads(line) for line in open(src) if line.strip()]
    ours = {}
    for r in recs:
        if r["store"] == "ddprun":
            ours.setdefault(r["n"], {})[r["scenario"]] = r
    # c10d runs by torch version ("1.13" for records from before the field), the newest first.
    c10d = {}
    for r in recs:
        if r["store"] == "c10d":
            c10d.setdefault(r.get("torch", "1.13"), {})[r["n"]] = r
    versions = sorted(c10d, key=lambda v: [int(x) for x in v.split("+")[0].split("a")[0].split(".")], reverse=True)
    theirs = c10d[versions[0]] if versions else {}
    lines = [
        "| nodes | ddprun: last plan (s) | abort to all (s) | exit barrier (s) | master CPU (s) | master peak RSS (MB) "
        "| agent peak RSS (MB) | idle master CPU (core) | plan bytes | bytes/agent (max) | real agent: bytes received | agents failed | c10d: last plan (s) | c10d master CPU (s) | notes |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    plot = []
    for n in sorted(set(ours) | set(theirs)):
        a, b = ours.get(n, {}).get("abort", {}), ours.get(n, {}).get("barrier", {})
        both = [x for x in (a, b) if x]
        c = theirs.get(n, {})
        plans = [x["plan_s"] for x in both if x.get("plan_s", -1) >= 0]
        plan = max(plans) if len(plans) == len(both) and plans else -1
        notes = [f"{x['scenario']}: {x['note']} {x.get('error', '')[:90]}".strip() for x in both if x.get("note")]
        if c.get("note"):
            notes.append(f"c10d: {c['note']} {c.get('error', '')[:90]}".strip())
        # Idle means idle: not while the master was already handling an abort or lost agents.
        idle = [x["idle_cpu"] for x in both
                if x.get("idle_cpu", -1) >= 0 and not x.get("early_aborts") and not x.get("failed")]
        cpu = " / ".join(f"{x['master_cpu_s']:.2f}" for x in both) or "-"
        # The real agent at node rank 1 (rdzv_scale --real-agent), when there was one.
        agents = [x["agent_hwm_mb"] for x in both if x.get("agent_hwm_mb", 0) > 0]
        agent_rss = f"{max(agents):.1f}" if agents else "-"
        # What it received from the store (counted by the relay in front of it), beside the simulated agents'.
        rx = [x["agent_rx"] for x in both if x.get("agent_rx", 0) > 0]
        agent_rx = str(max(rx)) if rx else "-"
        if not both:
            lines.append(f"| {n} | - | - | - | - | - | - | - | - | - | - | - | {sec(c.get('plan_s'))} "
                         f"| {sec(c.get('master_cpu_s'))} | {'; '.join(notes)} |")
            plot.append((n, None, c.get("plan_s") if c.get("plan_s", -1) >= 0 else None))
            continue
        lines.append(
            f"| {n} | {sec(plan)} | {sec(a.get('end_s'))} | {sec(b.get('end_s'))} "
            f"| {cpu} "
            f"| {max((x['master_hwm_mb'] for x in both), default=0):.0f} "
            f"| {agent_rss} "
            f"| {(max(idle) if idle else -1):.3f} | {max((x['plan_bytes'] for x in both), default=0)} "
            f"| {max((x['bytes_max'] for x in both), default=0)} | {agent_rx} | {' / '.join(str(x['failed']) for x in both)} "
            f"| {sec(c.get('plan_s'))} | {sec(c.get('master_cpu_s'))} | {'; '.join(notes)} |".replace("| -1.000 |", "| - |"))
        plot.append((n, plan if plan >= 0 else None, c.get("plan_s") if c.get("plan_s", -1) >= 0 else None))
    os.makedirs(out, exist_ok=True)
    table = "\n".join(lines)
    with open(os.path.join(out, f"{name}.md"), "w") as f:
        f.write(table + "\n")
    print(table)
    if len(versions) > 1:
        side = side_by_side(ours, c10d, versions)
        with open(os.path.join(out, f"{name}_c10d.md"), "w") as f:
            f.write(side + "\n")
        print()
        print(side)
    if shutil.which("gnuplot") and plot:
        dat, png = os.path.join(out, f"{name}.dat"), os.path.join(out, f"{name}.png")
        nan = lambda v: "NaN" if v is None else v  # noqa: E731
        with open(dat, "w") as f:
            for n, o, t in plot:
                f.write(f"{n} {nan(o)} {nan(t)} {nan(base.get(n))}\n")
        subprocess.run(["gnuplot", "-e",
                        f"set terminal png size 800,450 noenhanced; set output '{png}'; set logscale xy; set datafile missing 'NaN';"
                        "set xlabel 'nodes (8 workers each)'; set ylabel 'seconds until the last agent holds the plan';"
                        "set key left top;"
                        f"plot '{dat}' using 1:2 with linespoints title '{os.environ.get('SCALE_TITLE', 'ddprun')}',"
                        f"'{dat}' using 1:3 with linespoints title 'c10d TCPStore (same workload)'" +
                        (f",'{dat}' using 1:4 with linespoints title '{os.environ.get('SCALE_BASE_TITLE', 'baseline')}'" if base else "")], check=False)


if __name__ == "__main__":
    main()
