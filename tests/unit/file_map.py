#!/usr/bin/python3
"""docs/architecture.md's file map names every source file of the five layers (ctest docs_file_map).

Reads the map (the first ``` block after "## Files") and the tree at test time, so a file added by any
branch shows up. Each layer's part of the map starts with a line "LAYER/" at column 0. A file
LAYER/src/[SUB/]STEM.cpp or .hpp counts as named when that part holds the token STEM.cpp (or .hpp) or
STEM.*, and, for a file in a subfolder, "SUB/" too. It also fails when the map names a file that no
longer exists: a STEM.* or STEM.cpp of a layer's part must match a file of that layer (src/ or
include/), and a token with a folder (core/command.*, tests/unit/...) a file at that path. And every
file of the layers that starts a thread (std::thread or std::jthread constructed with a function) is
named by its path in the "## Threads and loops" section.
Usage: file_map.py SOURCE_DIR
"""
import glob
import os
import re
import sys

LAYERS = ("core", "store", "rendezvous", "agent", "launcher")
TOKEN = re.compile(r"(?<![\w./-])((?:[\w-]+/)*)(\w+)\.(\*|cpp|hpp)(?![\w])")


STARTS_THREAD = re.compile(r"std::j?thread(?:\s+\w+)?\s*[({]")


def architecture(source):
    return open(os.path.join(source, "docs", "architecture.md"), encoding="utf-8").read()


def map_block(source):
    text = architecture(source)
    at = text.find("\n## Files\n")
    if at < 0:
        sys.exit("docs/architecture.md has no '## Files' section")
    m = re.search(r"```\n(.*?)```", text[at:], re.S)
    if not m:
        sys.exit("docs/architecture.md's '## Files' section has no ``` block")
    return m.group(1)


def sections(block):
    """{layer: its part of the map}; a column-0 line that is no layer ends a part."""
    parts, layer = {}, None
    for line in block.splitlines():
        head = re.match(r"^(\S+)", line)
        if head:
            name = head.group(1).rstrip("/")
            layer = name if name in LAYERS else None
            line = line[len(head.group(1)):]
        if layer:
            parts[layer] = parts.get(layer, "") + line + "\n"
    return parts


def sources(source, layer):
    """Paths relative to LAYER/src of its .cpp and .hpp files."""
    root = os.path.join(source, layer, "src")
    out = []
    for folder, _, files in os.walk(root):
        for f in files:
            if f.endswith((".cpp", ".hpp")):
                out.append(os.path.relpath(os.path.join(folder, f), root))
    return sorted(out)


def exists(source, layer, folder, stem, ext):
    pattern = stem + (".*" if ext == "*" else "." + ext)
    if folder:
        first = folder.split("/")[0]
        if first in LAYERS:
            rest = folder[len(first) + 1:]
            return bool(glob.glob(os.path.join(source, first, "**", rest + pattern), recursive=True))
        return bool(glob.glob(os.path.join(source, folder + pattern)))
    return bool(glob.glob(os.path.join(source, layer, "**", pattern), recursive=True))


def unnamed_thread_starters(source):
    """Files of the layers that start a thread and are not named in '## Threads and loops'."""
    text = architecture(source)
    at = text.find("\n## Threads and loops\n")
    section = ""
    if at >= 0:
        end = text.find("\n## ", at + 1)
        section = text[at:end if end > 0 else len(text)]
    out = []
    for layer in LAYERS:
        for folder, _, files in os.walk(os.path.join(source, layer)):
            for f in sorted(files):
                if not f.endswith((".cpp", ".hpp")):
                    continue
                path = os.path.join(folder, f)
                rel = os.path.relpath(path, source)
                if STARTS_THREAD.search(open(path, encoding="utf-8").read()) and rel not in section:
                    out.append(rel)
    return sorted(out)


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: file_map.py SOURCE_DIR")
    source = sys.argv[1]
    parts = sections(map_block(source))
    missing, stale = [], []
    for layer in LAYERS:
        part = parts.get(layer, "")
        named = set()
        for folder, stem, ext in TOKEN.findall(part):
            if not exists(source, layer, folder, stem, ext):
                stale.append(f"{folder or layer + ' part: '}{stem}.{ext}")
            if not folder:
                named.add((stem, ext))
        for rel in sources(source, layer):
            sub, name = os.path.split(rel)
            stem, ext = os.path.splitext(name)
            ok = (stem, ext[1:]) in named or (stem, "*") in named
            if sub and not re.search(r"(?<![\w/])" + re.escape(sub) + "/", part):
                ok = False
            if not ok:
                missing.append(f"{layer}/src/{rel}")
    if missing:
        print("docs/architecture.md's file map (## Files) does not name these files; add a line for each "
              "under its layer, saying what it holds:")
        for f in missing:
            print(f"  {f}")
    if stale:
        print("docs/architecture.md's file map names files that do not exist; rename or remove them:")
        for f in stale:
            print(f"  {f}")
    threads = unnamed_thread_starters(source)
    if threads:
        print("docs/architecture.md's '## Threads and loops' does not name these files that start a "
              "thread; add a row for each thread (where, started by, touches, stops, never waits on):")
        for f in threads:
            print(f"  {f}")
    if missing or stale or threads:
        return 1
    print(f"file map: every .cpp and .hpp under {', '.join(l + '/src' for l in LAYERS)} is named, "
          "and every file that starts a thread is in '## Threads and loops'")
    return 0


if __name__ == "__main__":
    sys.exit(main())
