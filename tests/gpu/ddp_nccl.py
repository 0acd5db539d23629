"""A torch 2.x DDP worker on NCCL, as users write it: init_process_group with device_id, a DDP model, a few
optimizer steps, one all_reduce whose value is known. Writes "<rank> <allreduce> <expected> <device> <loss>" to
$DIR/ddp_<rank>.txt and exits 0 only when the all_reduce is right and the replicas agree on the parameters."""
import os
import sys

import torch
import torch.distributed as dist

rank, world, local = (int(os.environ[k]) for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK"))
dev = torch.device("cuda", local % torch.cuda.device_count())
torch.cuda.set_device(dev)
dist.init_process_group("nccl", device_id=dev)
torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(
    torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)).to(dev), device_ids=[dev])
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
g = torch.Generator(device="cpu").manual_seed(rank)
for _ in range(20):
    x = torch.randn(32, 64, generator=g).to(dev)
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
t = torch.tensor([float(rank + 1)], device=dev)
dist.all_reduce(t)
expected = world * (world + 1) / 2
# Replicas must hold the same parameters after DDP's gradient averaging.
flat = torch.cat([p.detach().flatten() for p in model.parameters()])
ref = flat.clone()
dist.broadcast(ref, 0)
same = torch.equal(flat, ref)
with open(os.path.join(os.environ["DIR"], f"ddp_{rank}.txt"), "w") as f:
    f.write(f"{rank} {t.item()} {expected} {torch.cuda.get_device_name(dev)} {loss.item():.6f} {same}\n")
dist.destroy_process_group()
sys.exit(0 if t.item() == expected and same else 1)
