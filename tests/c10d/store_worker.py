"""A real PyTorch worker for the workers' store tests (tests/c10d/test_worker_store.cpp).

    store_worker.py MODE DIR

MODE:
  init     init_process_group (gloo), an all_reduce, and a record of who serves MASTER_PORT: this process
           (worker rank 0 hosting torch's store) or someone else (the agent). DIR/init_<rank>.
  outlive  rank 0 leaves right after init; the others then use the store through a client of their own
           for a few seconds: the store must outlive worker rank 0. DIR/outlive_<rank>.
  fresh    a counter every rank adds 1 to, read after a barrier; the first attempt's rank 0 then fails
           (exit 3) so that the job restarts: a fresh keyspace starts the counter again. DIR/fresh_<attempt>_<rank>.
  failover the first attempt meets and waits to be torn down (DIR/ready_<rank>); a later one meets again,
           all-reduces and records MASTER_ADDR, MASTER_PORT and the pid that listens there.
           DIR/failover_<rank>.
"""
import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

mode, out = sys.argv[1], sys.argv[2]
rank = int(os.environ["RANK"])
world = int(os.environ["WORLD_SIZE"])
attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])


def write(name, text):
    tmp = os.path.join(out, name + ".tmp")
    with open(tmp, "w") as f:
        f.write(text)
    os.rename(tmp, os.path.join(out, name))


def listener_is_mine():
    """Whether a socket listening on MASTER_PORT belongs to this process."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = open(table).read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if f[3] == "0A" and int(f[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(f[9])
    mine = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            link = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            mine.add(link[8:-1])
    return bool(inodes & mine), len(inodes)


def listener_pid():
    """The pid of the process listening on MASTER_PORT (by its socket's inode), or 0."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = open(table).read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if f[3] == "0A" and int(f[1].rsplit(":", 1)[1], 16) == port:
                inodes.add("socket:[" + f[9] + "]")
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") in inodes:
                    return int(pid)
            except OSError:
                pass
    return 0


def client():
    return dist.TCPStore(addr, port, None, False, timedelta(seconds=30))


dist.init_process_group("gloo", timeout=timedelta(seconds=60))
assert dist.get_rank() == rank and dist.get_world_size() == world

if mode == "init":
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)
    mine, listeners = listener_is_mine()
    write(f"init_{rank}", f"{t.item()} {world * (world + 1) // 2} {os.environ['TORCHELASTIC_USE_AGENT_STORE']} "
          f"{int(mine)} {listeners} {sys.executable}\n")
    dist.barrier()
elif mode == "outlive":
    dist.barrier()
    if rank == 0:
        write("outlive_0", "left\n")
        os._exit(0)  # no destroy_process_group: gone, as a crashed or finished rank 0 is
    while not os.path.exists(os.path.join(out, "outlive_0")):
        time.sleep(0.05)
    time.sleep(2)  # rank 0's process is gone by now
    s = client()
    s.set(f"after_rank0_{rank}", "x")
    n = s.add("after_rank0", 1)
    s.wait([f"after_rank0_{r}" for r in range(1, world)])
    write(f"outlive_{rank}", f"ok {n}\n")
elif mode == "fresh":
    s = client()
    s.add("fresh_counter", 1)
    dist.barrier()
    total = int(s.get("fresh_counter"))
    write(f"fresh_{attempt}_{rank}", f"{total}\n")
    dist.barrier()
    if attempt == 0 and rank == 0:
        sys.exit(3)
    if attempt == 0:
        time.sleep(60)  # torn down by ddprun once rank 0 failed
elif mode == "failover":
    if attempt == 0:
        dist.barrier()
        write(f"ready_{rank}", "\n")
        time.sleep(300)  # torn down once node 0 is lost
        sys.exit(3)
    t = torch.ones(1)
    dist.all_reduce(t)
    write(f"failover_{rank}", f"{world} {attempt} {int(t.item())} {addr} {port} "
          f"{os.environ['TORCHELASTIC_USE_AGENT_STORE']} {listener_pid()}\n")
    dist.barrier()
else:
    sys.exit(f"unknown mode {mode}")
sys.exit(0)
