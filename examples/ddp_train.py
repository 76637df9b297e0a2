"""Data-parallel training over the tpu_dist backend: one process per chip.

    torchrun --nproc-per-node 2 examples/ddp_train.py [--steps 20]
"""
import argparse

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

import torch_tpu  # noqa: F401  (also autoloaded by `import torch`)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()

    dist.init_process_group("tpu_dist")  # before the first tpu tensor: XLA collectives need it
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)  # the same initial weights on every rank
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 4)).to("tpu")
    # the gradients as views of DDP's buckets: no copy into them and back each step (docs/guide.md)
    ddp = nn.parallel.DistributedDataParallel(model, gradient_as_bucket_view=True)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)

    gen = torch.Generator().manual_seed(1)
    x_all, y_all = torch.randn(64, 16, generator=gen), torch.randint(0, 4, (64,), generator=gen)
    x, y = x_all.chunk(world)[rank].to("tpu"), y_all.chunk(world)[rank].to("tpu")  # this rank's shard
    for step in range(args.steps):
        loss = F.cross_entropy(ddp(x), y)
        opt.zero_grad()
        loss.backward()  # DDP all-reduces the gradients over tpu_dist
        opt.step()
        if rank == 0 and step % 5 == 0:
            print(f"step {step}: loss {loss.item():.4f}")
    total = loss.detach().clone()
    dist.all_reduce(total)
    if rank == 0:
        print(f"{world} ranks on {torch.tpu.get_device_name()}; mean final loss {total.item() / world:.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
