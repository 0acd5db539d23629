"""Ranks that stop making progress on the GPU, for ddprun --hang-timeout. Modes:
  kernel  every rank waits on a CUDA kernel that spins for minutes (stuck_in_cuda_kernel)
  nccl    rank 1 stops before the collective (stuck_before_allreduce); the others block inside NCCL's all_reduce
          (stuck_in_nccl_allreduce). Needs 2 GPUs or more.
Each rank writes $DIR/started_<rank> once it is about to block, and prints nothing afterwards."""
import os
import sys
import time

import torch

rank, local = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
dev = torch.device("cuda", local % torch.cuda.device_count())
torch.cuda.set_device(dev)


def started():
    open(os.path.join(os.environ["DIR"], f"started_{rank}"), "w").close()


def stuck_in_cuda_kernel():
    # torch.cuda._sleep spins the GPU for a number of clock cycles: 2e12 is about 15 minutes at 2 GHz.
    torch.cuda._sleep(int(2e12))
    started()
    torch.cuda.synchronize()


def stuck_before_allreduce():
    started()
    time.sleep(3600)


def stuck_in_nccl_allreduce(t):
    started()
    torch.distributed.all_reduce(t)
    torch.cuda.synchronize()


mode = sys.argv[1]
print(f"rank {rank} on {torch.cuda.get_device_name(dev)}: {mode}", flush=True)
if mode == "kernel":
    stuck_in_cuda_kernel()
else:
    import torch.distributed as dist
    dist.init_process_group("nccl", device_id=dev)
    t = torch.ones(1, device=dev)
    dist.all_reduce(t)  # everyone is connected before the hang
    torch.cuda.synchronize()
    if rank == 1:
        stuck_before_allreduce()
    else:
        stuck_in_nccl_allreduce(t)
sys.exit(3)  # never reached while the hang lasts
