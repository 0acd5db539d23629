# A real PyTorch worker for the elastic tests: the first attempt meets its peers (gloo), starts a
# child the way a DataLoader does and runs until it is torn down; a restart meets the new world,
# all-reduces and records what it saw in $DIR/done_<RANK>.
import os
import subprocess
import sys
import time

import torch
import torch.distributed as dist

rank = int(os.environ["RANK"])
world = int(os.environ["WORLD_SIZE"])
restart = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
out = os.environ["DIR"]

dist.init_process_group("gloo", timeout=__import__("datetime").timedelta(seconds=60))
if restart == 0:
    dist.barrier()
    child = subprocess.Popen(["sleep", "300"])
    open(os.path.join(out, f"ready_{rank}"), "w").close()
    # ELASTIC_WORKER_COLLECTIVES=1 (the bench): all-reduce every 50 ms, as training does, so a lost peer
    # also shows as a failed collective.
    busy = os.environ.get("ELASTIC_WORKER_COLLECTIVES") == "1"
    end = time.time() + 300
    while time.time() < end:
        if busy:
            dist.all_reduce(torch.ones(1))
        time.sleep(0.05 if busy else 1)
    sys.exit(3)
t = torch.ones(1)
dist.all_reduce(t)
with open(os.path.join(out, f"done_{rank}"), "w") as f:
    f.write(f"{world} {restart} {int(t.item())} {os.environ['MASTER_ADDR']}\n")
dist.destroy_process_group()
