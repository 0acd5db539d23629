#!/usr/bin/env python3
"""Which units clang-tidy must look at again (scripts/tidy.sh): a unit passed before when its key is in the cache.

The key is what clang-tidy's verdict depends on: the tool's version, the .clang-tidy files, the unit's
compile flags and its preprocessed text with comments (every header it includes, and its NOLINTs), with
the clone's folder written as '.', so that clones in other folders share results. A unit whose key is cached is left out; each other one is
printed as 'KEY<TAB>FILE' for tidy.sh, which records the key once clang-tidy passes the unit. Like ccache,
it can only skip work whose input is byte for byte what passed before.

    tidy_keys.py BUILD_DIR CACHE_DIR CLANG_TIDY FILE...
"""
import concurrent.futures
import hashlib
import json
import os
import shlex
import subprocess
import sys


def compile_args(entry, root):
    args = entry.get("arguments") or shlex.split(entry["command"])
    out = []
    skip = False
    for a in args[1:]:
        if skip:
            skip = False
            continue
        if a in ("-o", "-c"):
            skip = a == "-o"
            continue
        if a == entry["file"]:
            continue
        out.append(a)
    return args[0], out


def key_of(entry, root, base):
    compiler, flags = compile_args(entry, root)
    pre = subprocess.run(
        [compiler, *flags, "-E", "-C", entry["file"]],
        cwd=entry["directory"], capture_output=True, check=False)
    if pre.returncode != 0:
        return None  # let clang-tidy say what is wrong
    h = hashlib.sha256(base)
    h.update("\0".join(a.replace(root, ".") for a in flags).encode())
    h.update(os.path.relpath(entry["file"], root).encode())
    h.update(pre.stdout.replace(root.encode(), b"."))
    return h.hexdigest()


def main():
    build, cache, tidy, *files = sys.argv[1:]
    root = os.getcwd()
    entries = {e["file"]: e for e in json.load(open(os.path.join(build, "compile_commands.json")))}
    version = subprocess.run([tidy, "--version"], capture_output=True, check=True).stdout
    configs = subprocess.run(["git", "ls-files", "-z", "*.clang-tidy", ".clang-tidy"], capture_output=True,
                             check=True).stdout.split(b"\0")
    base = version + b"".join(open(c, "rb").read() for c in sorted(configs) if c)
    todo = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        jobs = {}
        for f in files:
            e = entries.get(os.path.join(root, f))
            jobs[f] = pool.submit(key_of, e, root, base) if e else None
        for f, job in jobs.items():
            key = job.result() if job else None
            if key is None:
                todo.append(f"-\t{f}")
            elif not os.path.exists(os.path.join(cache, key)):
                todo.append(f"{key}\t{f}")
    for line in todo:
        print(line)
    print(f"tidy: {len(files) - len(todo)} of {len(files)} units unchanged since clang-tidy passed them",
          file=sys.stderr)


if __name__ == "__main__":
    main()
