"""A training step with collectives inside, eager against torch.compile, on 2
local processes (torch.tpu.ops.all_gather_dim / reduce_scatter_dim).

    python benchmarks/collectives_compile.py [--steps 10] [--warmup 3] [--dim 256] [--rows 64]

The step is sequence-parallel MLP style: each rank holds ``rows`` rows, they
are all-gathered along dim 0, go through two matmuls and a GELU, and are
reduce-scattered back; the loss's backward runs the reverse collectives.
Variants, interleaved in the same two processes:

- ``cpu-gloo-eager``: the same step on CPU tensors over a Gloo group
  (PyTorch's own CPU path: the baseline of the ratio column);
- ``tpu-strict`` / ``tpu-fused``: eager tpu tensors over ``tpu_dist``;
- ``tpu-compiled``: ``torch.compile(backend="tpu", fullgraph=True)`` of the
  step: pieces between the collectives are executables, the collectives
  run through ``tpu_dist`` between them.

Rank 0 prints wall and CPU milliseconds per step (its process's CPU time),
the CPU ratio to the baseline, and XLA executables launched per step.
"""
import argparse
import contextlib
import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from common import launch_local_workers, table  # noqa: E402


def _loss(torch, ops, x, w1, w2, group):
    full = ops.all_gather_dim(x, dim=0, group=group)
    hidden = torch.nn.functional.gelu(full @ w1)
    out = ops.reduce_scatter_dim(hidden @ w2, dim=0, group=group)
    return (out * out).mean()


def _stepper(loss_fn):
    def step(*args):
        loss = loss_fn(*args)
        loss.backward()
        return loss.detach()
    return step


def worker(args):
    import torch
    import torch.distributed as dist

    import torch_tpu  # noqa: F401
    from torch_tpu.eager import pending

    dist.init_process_group("tpu_dist")
    rank = dist.get_rank()
    gloo = dist.new_group(backend="gloo")
    ops = torch.tpu.ops
    launches = [0]
    note = pending.note

    def counting(results):
        launches[0] += 1
        note(results)
    pending.note = counting

    def make(device, group):
        gen = torch.Generator().manual_seed(rank)
        x = torch.randn(args.rows, args.dim, generator=gen).to(device)
        w1 = (torch.randn(args.dim, 4 * args.dim, generator=gen) / args.dim ** 0.5).to(device).requires_grad_()
        w2 = (torch.randn(4 * args.dim, args.dim, generator=gen) / args.dim ** 0.5).to(device).requires_grad_()
        return x, w1, w2, group

    eager = _stepper(lambda *a: _loss(torch, ops, *a))
    compiled = _stepper(torch.compile(lambda *a: _loss(torch, ops, *a), backend="tpu", fullgraph=True))
    variants = {
        "cpu-gloo-eager": (lambda: make("cpu", gloo), eager, None),
        "tpu-strict": (lambda: make("tpu", None), eager, "strict"),
        "tpu-fused": (lambda: make("tpu", None), eager, "fused"),
        "tpu-compiled": (lambda: make("tpu", None), compiled, "strict"),
    }
    results = {}
    for name, (inputs, fn, mode) in variants.items():
        x, w1, w2, group = inputs()
        ctx = torch.tpu.set_eager_mode(mode) if mode else contextlib.nullcontext()
        with ctx:
            for _ in range(args.warmup):
                fn(x, w1, w2, group).item()
            dist.barrier()
            before = launches[0]
            wall, cpu = time.perf_counter(), time.process_time()
            for _ in range(args.steps):
                loss = fn(x, w1, w2, group)
            loss.item()
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        results[name] = (1e3 * wall / args.steps, 1e3 * cpu / args.steps, (launches[0] - before) / args.steps)
    if rank == 0:
        base = results["cpu-gloo-eager"][1]
        rows = [[name, f"{w:.1f}", f"{c:.1f}", f"{c / base:.2f}", f"{n:.1f}" if name != "cpu-gloo-eager" else "-"]
                for name, (w, c, n) in results.items()]
        print(table(rows, ["variant", "wall ms/step", "CPU ms/step", "CPU x cpu-gloo", "executables/step"]))
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    launch_local_workers(__file__, 2, sys.argv[1:])


if __name__ == "__main__":
    main()
