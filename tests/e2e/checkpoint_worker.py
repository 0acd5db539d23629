# A real PyTorch training loop that checkpoints when stopped, as preemptible jobs do: SIGTERM or SIGUSR2
# sets a flag, the ranks agree on it in the next all-reduce (so all stop at the same step, none left
# waiting in a collective), rank 0 saves with torch.save to $DIR/ckpt.pt, and every rank exits 128+signal.
# Writes $DIR/ready_<RANK> once training runs.
import datetime
import os
import signal
import sys
import time

import torch
import torch.distributed as dist

caught = {"signal": 0}


def on_signal(signum, _frame):
    caught["signal"] = signum


signal.signal(signal.SIGTERM, on_signal)
signal.signal(signal.SIGUSR2, on_signal)
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
rank = dist.get_rank()
out = os.environ["DIR"]
weights = torch.zeros(4)
step = 0
while True:
    stop = torch.tensor([float(caught["signal"])])
    dist.all_reduce(stop, op=dist.ReduceOp.MAX)
    if stop.item():
        break
    grad = torch.full((4,), float(rank + 1))
    dist.all_reduce(grad)
    weights += grad
    step += 1
    if step == 1:
        open(os.path.join(out, f"ready_{rank}"), "w").close()
    time.sleep(0.05)
if rank == 0:
    path = os.path.join(out, "ckpt.pt")
    torch.save({"step": step, "weights": weights}, path + ".tmp")
    os.rename(path + ".tmp", path)
dist.barrier()  # nobody leaves before the checkpoint is written
dist.destroy_process_group()
sys.exit(128 + int(stop.item()))
