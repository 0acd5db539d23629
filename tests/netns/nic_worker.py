"""A worker of the multi-NIC test (test_multi_nic.sh): which address the workers' store is on, which local
address reaches it, whether the host name's (wrong) network has it too, then real torch traffic through it.

argv: OUTDIR MODE (gloo: an all_reduce, IFACE from GLOO_SOCKET_IFNAME; store: a TCPStore exchange) HOST0
(node 0's host name, which resolves to the wrong network)."""
import datetime
import os
import socket
import sys
import time

out, mode, host0 = sys.argv[1], sys.argv[2], sys.argv[3]
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])

family = socket.AF_INET6 if ":" in addr else socket.AF_INET
s = socket.socket(family, socket.SOCK_STREAM)
s.settimeout(30)
s.connect((addr, port))
local = s.getsockname()[0]
s.close()

wrong = socket.gethostbyname(host0)
try:
    socket.create_connection((wrong, port), timeout=10).close()
    on_wrong = "open"
except ConnectionRefusedError:
    on_wrong = "refused"
except OSError as e:
    on_wrong = type(e).__name__

import torch  # noqa: E402  (after the plain checks: they say more when torch fails)
import torch.distributed as dist  # noqa: E402

if mode == "gloo":
    dist.init_process_group("gloo", init_method="env://", timeout=datetime.timedelta(seconds=60))
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)
    ok = t.item() == world * (world + 1) / 2
    dist.barrier()
    dist.destroy_process_group()
else:
    store = dist.TCPStore(addr, port, world, False, datetime.timedelta(seconds=60))
    store.set(f"rank{rank}", str(rank))
    ok = all(store.get(f"rank{r}").decode() == str(r) for r in range(world))
    store.add("done", 1)
    while store.add("done", 0) < world:  # nobody leaves before every rank has read
        time.sleep(0.05)

with open(os.path.join(out, f"rank_{rank}.txt"), "w") as f:
    f.write(f"{addr} {local} {wrong} {on_wrong} {'ok' if ok else 'bad'}\n")
sys.exit(0 if ok else 1)
