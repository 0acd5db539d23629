"""Differential test of the workers' store: torch's own Python TCPStore client runs the same
operations against torch's own server (1.13: its legacy server; 2.x: libuv, the default since 2.4)
and against ddprun's (tests/helpers/c10d_serve), and every answer must be the same: values,
counters, and the class of every exception (messages name addresses and may differ).

    python3 differential.py PATH/TO/c10d_serve

Exits 0 when both agree, 1 with the differences listed, 77 (skip) when torch is missing.
"""
import subprocess
import sys
import threading
import time
from datetime import timedelta

try:
    import torch
    import torch.distributed as dist
except ImportError:
    print("SKIP: no torch in", sys.executable)
    sys.exit(77)

VERSION = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
TIMEOUT = timedelta(seconds=10)


def client(port, world_size=None):
    # Positional: 1.13 has no keyword for every argument.
    return dist.TCPStore("127.0.0.1", port, world_size, False, TIMEOUT)


def run(port):
    """The operations; returns [(name, outcome)]."""
    out = []

    def rec(name, fn):
        try:
            out.append((name, repr(fn())))
        except Exception as e:  # the class is compared; torch's messages name addresses
            out.append((name, "raised " + type(e).__name__))

    a = client(port, world_size=2)  # counts itself in init/ (ADD without the "/" prefix)
    b = client(port)
    rec("num_keys after connect", a.num_keys)
    rec("set", lambda: a.set("k", "v"))
    rec("get", lambda: b.get("k"))
    rec("set bytes with NULs", lambda: a.set("bin", b"\x00\xff\x00"))
    rec("get bytes", lambda: b.get("bin"))
    rec("set empty", lambda: a.set("empty", b""))
    rec("get empty", lambda: b.get("empty"))
    rec("overwrite", lambda: a.set("k", "v2"))
    rec("get overwritten", lambda: b.get("k"))
    rec("add new", lambda: a.add("n", 5))
    rec("add negative", lambda: b.add("n", -7))
    rec("add zero", lambda: a.add("n", 0))
    rec("get counter text", lambda: a.get("n"))
    rec("add to a set number", lambda: (a.set("tn", " 41"), a.add("tn", 1))[1])
    rec("compare_set missing, expected given", lambda: a.compare_set("cs", "exp", "new"))
    rec("compare_set missing, nothing expected", lambda: a.compare_set("cs", "", "v1"))
    rec("compare_set equal", lambda: a.compare_set("cs", "v1", "v2"))
    rec("compare_set different", lambda: a.compare_set("cs", "nope", "v3"))
    rec("get after compare_set", lambda: b.get("cs"))
    rec("wait existing", lambda: a.wait(["k", "n"]))
    rec("num_keys", a.num_keys)
    rec("delete_key present", lambda: a.delete_key("k"))
    rec("delete_key absent", lambda: a.delete_key("k"))
    rec("num_keys after delete", a.num_keys)
    big = bytes(range(256)) * 4096  # 1 MiB
    rec("set 1 MiB", lambda: a.set("big", big))
    rec("get 1 MiB", lambda: b.get("big") == big)

    # A get that waits for another client's set (WAIT deferred, then GET).
    def later():
        time.sleep(0.3)
        b.set("late", "arrived")

    t = threading.Thread(target=later)
    t.start()
    rec("get blocks until set", lambda: a.get("late"))
    t.join()
    # A wait on several keys, the last set by another client.
    t = threading.Thread(target=lambda: (time.sleep(0.2), b.set("w1", "1"), time.sleep(0.2), b.set("w2", "2")))
    t.start()
    rec("wait for two keys", lambda: a.wait(["w1", "w2"]))
    t.join()

    if VERSION >= (2, 0):
        rec("check present", lambda: a.check(["w1", "w2"]))
        rec("check missing", lambda: a.check(["w1", "nothing"]))
    if hasattr(a, "append"):
        rec("append new", lambda: a.append("ap", "x"))
        rec("append more", lambda: a.append("ap", "yz"))
        rec("get appended", lambda: b.get("ap"))
    if hasattr(a, "multi_set"):
        rec("multi_set", lambda: a.multi_set(["m1", "m2", "m3"], ["1", "", "3"]))
        rec("multi_get", lambda: b.multi_get(["m1", "m2", "m3"]))
    if hasattr(a, "queue_push"):
        rec("queue_len empty", lambda: a.queue_len("q"))
        rec("queue_push", lambda: a.queue_push("q", "first"))
        rec("queue_push 2", lambda: a.queue_push("q", "second"))
        rec("queue_len", lambda: b.queue_len("q"))
        rec("queue_pop", lambda: b.queue_pop("q"))
        rec("queue_pop non-blocking", lambda: b.queue_pop("q", block=False))
        rec("queue_pop empty non-blocking", lambda: b.queue_pop("q", block=False))
        t = threading.Thread(target=lambda: (time.sleep(0.3), a.queue_push("q2", "woken")))
        t.start()
        rec("queue_pop blocks until push", lambda: b.queue_pop("q2"))
        t.join()
    if hasattr(a, "list_keys"):
        rec("list_keys", lambda: sorted(a.list_keys()))
    if VERSION >= (2, 1):
        # Timed out: the client sends CANCEL_WAIT; the connection must stay usable.
        rec("wait times out", lambda: a.wait(["never"], timedelta(milliseconds=300)))
        rec("get after a timed-out wait", lambda: a.get("w1"))
        rec("get times out", lambda: b.get("never2") if b.set_timeout(timedelta(milliseconds=300)) is None else 0)
        b.set_timeout(TIMEOUT)
        rec("set after a timed-out get", lambda: b.set("after", "ok"))
        rec("get after a timed-out get", lambda: b.get("after"))
    # A second store object for the same server (a clone, a second process group's store).
    c = client(port)
    rec("third client sees the keys", lambda: c.get("w2"))
    rec("num_keys at the end", c.num_keys)
    # Errors close the connection on both servers; the client raises.
    rec("add to text", lambda: c.add("bin", 1))
    rec("a fresh client after an error", lambda: client(port).get("w1"))
    if VERSION < (2, 1):
        # 1.x has no CANCEL_WAIT: a timed-out wait leaves the connection unusable on any server;
        # only the timeout itself is compared, last.
        rec("wait times out", lambda: a.wait(["never"], timedelta(milliseconds=300)))
    return out


def torch_server():
    s = dist.TCPStore("127.0.0.1", 0, None, True, TIMEOUT)
    return s, s.port


def main():
    server_bin = sys.argv[1]
    theirs, port = torch_server()
    expected = run(port)
    del theirs
    proc = subprocess.Popen([server_bin], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        ours = int(proc.stdout.readline())
        got = run(ours)
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)
    bad = [(e, g) for e, g in zip(expected, got) if e != g]
    if len(expected) != len(got):
        bad.append((("operations", len(expected)), ("operations", len(got))))
    print(f"torch {torch.__version__}: {len(expected)} operations compared")
    for e, g in bad:
        print(f"DIFFERENT {e[0]}: torch's server {e[1]}, ddprun's {g[1]}")
    if not bad:
        for name, outcome in expected:
            print(f"  same: {name}: {outcome}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
