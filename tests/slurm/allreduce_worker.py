"""A real PyTorch worker for the Slurm tests: gloo process group via env://, one all_reduce, and a JSON
record of what it saw (written to OUTDIR/rank<RANK>.json)."""
import datetime
import json
import os
import socket
import sys

import torch
import torch.distributed as dist


def main() -> int:
    outdir = sys.argv[1]
    dist.init_process_group("gloo", init_method="env://", timeout=datetime.timedelta(seconds=120))
    rank = dist.get_rank()
    world = dist.get_world_size()
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)
    names = ["RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT",
             "CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS", "SLURM_PROCID", "SLURM_STEP_NODELIST", "SLURM_JOB_ID"]
    record = {k: os.environ.get(k) for k in names}
    record.update(hostname=socket.gethostname(), rank=rank, world=world, sum=t.item())
    dist.barrier()
    dist.destroy_process_group()
    tmp = os.path.join(outdir, f".rank{rank}.json")
    with open(tmp, "w") as f:
        json.dump(record, f)
    os.rename(tmp, os.path.join(outdir, f"rank{rank}.json"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
