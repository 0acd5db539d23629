#!/usr/bin/python3
"""The byte figures the docs quote for the dry run at scale still hold (ctest cli_doc_figures).

Reads every dry-run output size quoted in docs/scale.md (the table after "bench/dryrun_scale.sh") and
docs/cli.md ("16,384 nodes x 8 workers (N MB of JSON)"), recomputes them with the same command,
`bench/dryrun_scale.sh --bytes BUILD_DIR N...` (sizes are deterministic; timings and RSS are never
checked, the docs give their date and command instead), and fails when a quoted figure is off by more
than 2 % plus half a unit of its last printed digit. MB here is 10^6 bytes, as in the docs.
Usage: doc_figures.py SOURCE_DIR BUILD_DIR
"""
import re
import subprocess
import sys

TOLERANCE = 0.02


def figures(source):
    """[(doc, nodes, format, quoted MB text)] found in the docs."""
    found = []
    scale = open(f"{source}/docs/scale.md", encoding="utf-8").read()
    # The dry-run table: | nodes × 8 | format | wall | peak RSS | output | before |
    for m in re.finditer(r"^\| (\d+) \| (json|text) \| [^|]* \| [^|]* \| ([\d.]+) MB \|", scale, re.M):
        found.append(("docs/scale.md", int(m.group(1)), m.group(2), m.group(3)))
    cli = open(f"{source}/docs/cli.md", encoding="utf-8").read()
    for m in re.finditer(r"([\d,]+) nodes × 8 workers\s+\(([\d.]+) MB of JSON\)", cli):
        found.append(("docs/cli.md", int(m.group(1).replace(",", "")), "json", m.group(2)))
    return found


def measured(source, build, sizes):
    """{(nodes, format): bytes} from bench/dryrun_scale.sh --bytes."""
    out = subprocess.run(["bash", f"{source}/bench/dryrun_scale.sh", "--bytes", build, *map(str, sizes)],
                         check=True, capture_output=True, text=True).stdout
    got = {}
    for line in out.splitlines()[1:]:
        n, fmt, size = line.split()
        got[(int(n), fmt)] = int(size)
    return got


def main():
    source, build = sys.argv[1], sys.argv[2]
    quoted = figures(source)
    # Both docs quote figures; finding none means the pattern no longer matches the prose.
    for doc in ("docs/scale.md", "docs/cli.md"):
        if not any(q[0] == doc for q in quoted):
            print(f"doc_figures: no dry-run output size found in {doc}; keep the figure's form "
                  "(see tests/cli/doc_figures.py) or change this test with the doc")
            return 1
    got = measured(source, build, sorted({q[1] for q in quoted}))
    bad = 0
    for doc, n, fmt, text in quoted:
        mb = float(text)
        digits = len(text.split(".")[1]) if "." in text else 0
        slack = mb * TOLERANCE + 0.5 * 10 ** -digits
        real = got[(n, fmt)] / 1e6
        ok = abs(real - mb) <= slack
        bad += not ok
        print(f"{'ok ' if ok else 'BAD'} {doc}: {n} nodes x 8, {fmt}: quoted {text} MB, "
              f"measured {real:.2f} MB ({got[(n, fmt)]} bytes)")
    if bad:
        print(f"doc_figures: {bad} figure(s) drifted; rerun `bench/dryrun_scale.sh build "
              f"{' '.join(map(str, sorted({q[1] for q in quoted})))}` and update the docs with its date")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
