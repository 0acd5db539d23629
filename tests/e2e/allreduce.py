"""A real PyTorch worker: gloo process group via env://, one all_reduce, results checked and written."""
import os
import socket
import sys

import torch
import torch.distributed as dist

rank = int(os.environ["RANK"])
world = int(os.environ["WORLD_SIZE"])
dist.init_process_group("gloo", init_method="env://")
assert dist.get_rank() == rank and dist.get_world_size() == world
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
expected = world * (world + 1) / 2
with open(os.path.join(sys.argv[1], f"rank_{rank}.txt"), "w") as f:
    f.write(f"{t.item()} {expected} {socket.gethostname()} {os.environ['MASTER_ADDR']} "
            f"{os.environ['LOCAL_RANK']} {os.environ['GROUP_RANK']} {sys.executable}\n")
dist.barrier()
dist.destroy_process_group()
sys.exit(0 if t.item() == expected else 1)
