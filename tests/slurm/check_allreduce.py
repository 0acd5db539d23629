"""Checks the records of allreduce_worker.py: check_allreduce.py OUTDIR WORLD HOST0 [HOST1 ...]
HOSTk is the expected hostname of node rank k; ranks are consecutive per node and MASTER_ADDR is HOST0."""
import json
import os
import sys


def main() -> int:
    outdir, world, hosts = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    per_node = world // len(hosts)
    errors = []
    for r in range(world):
        path = os.path.join(outdir, f"rank{r}.json")
        if not os.path.exists(path):
            errors.append(f"rank {r}: no record {path} (the worker did not finish)")
            continue
        rec = json.load(open(path))
        want_host = hosts[r // per_node]
        checks = [
            ("world", rec["world"], world),
            ("WORLD_SIZE", rec["WORLD_SIZE"], str(world)),
            ("hostname", rec["hostname"], want_host),
            ("LOCAL_RANK", rec["LOCAL_RANK"], str(r % per_node)),
            ("LOCAL_WORLD_SIZE", rec["LOCAL_WORLD_SIZE"], str(per_node)),
            ("MASTER_ADDR", rec["MASTER_ADDR"], hosts[0]),
            ("all_reduce sum", rec["sum"], float(world * (world + 1) // 2)),
        ]
        for name, got, want in checks:
            if got != want:
                errors.append(f"rank {r}: {name} is {got!r}, expected {want!r}")
    for e in errors:
        print("FAIL: " + e, file=sys.stderr)
    if not errors:
        print(f"ok: {world} workers on {len(hosts)} hosts, all_reduce sum {world * (world + 1) // 2}, "
              f"MASTER_ADDR={hosts[0]}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
