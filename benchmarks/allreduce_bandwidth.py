"""all_reduce bandwidth between 2 local processes: tpu_dist vs torch's Gloo.

    python benchmarks/allreduce_bandwidth.py [--sizes-mb 1 4 16 64 256] [--iters 3]

The parent launches the workers itself (as torchrun would).  tpu_dist runs on
tpu tensors; Gloo on CPU tensors, through a Gloo subgroup of the same world.
Figures are algorithm bandwidth: tensor bytes / time per all_reduce.
"""
import argparse
import os
import socket
import subprocess
import sys
import time


def _worker(sizes_mb, iters):
    import torch
    import torch.distributed as dist
    import torch_tpu  # noqa: F401
    dist.init_process_group("tpu_dist")
    gloo = dist.new_group(backend="gloo")
    rank = dist.get_rank()
    rows = []
    for mb in sizes_mb:
        n = int(mb * 2**20) // 4
        row = [mb]
        for name, dev, group in (("tpu_dist", "tpu", None), ("gloo", "cpu", gloo)):
            t = torch.ones(n, device=dev)
            dist.all_reduce(t, group=group)  # warm-up: compile, connect
            dist.barrier()
            start = time.perf_counter()
            for _ in range(iters):
                dist.all_reduce(t, group=group)
            if dev == "tpu":
                torch.tpu.synchronize()
            row.append(mb * 2**20 / 1e9 / ((time.perf_counter() - start) / iters))
        rows.append(row)
    if rank == 0:
        print(f"{'size':>8} {'tpu_dist GB/s':>14} {'gloo GB/s':>10} {'ratio':>7}")
        for mb, ours, theirs in rows:
            print(f"{mb:>6g}MB {ours:>14.3f} {theirs:>10.3f} {ours / theirs:>7.2f}")
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--sizes-mb", type=float, nargs="+", default=[1, 4, 16, 64, 256])
    p.add_argument("--iters", type=int, default=3)
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        _worker(args.sizes_mb, args.iters)
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    procs = []
    for rank in range(args.nproc):
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(args.nproc),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), TF_CPP_MIN_LOG_LEVEL="3",
                   PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--iters", str(args.iters),
               "--sizes-mb", *map(str, args.sizes_mb)]
        procs.append(subprocess.Popen(cmd, env=env, stderr=subprocess.DEVNULL if rank else None))
    sys.exit(max(p.wait() for p in procs))


if __name__ == "__main__":
    main()
