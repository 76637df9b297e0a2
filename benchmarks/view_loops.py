"""Eager loops over views (rows, columns, windows, in-place writes through a
row): XLA executables built for N distinct storage offsets, and CPU/wall time
per iteration once warm.  An op on a view reads its storage offset as a
runtime argument, so such a loop compiles once, not once per offset.

    python benchmarks/view_loops.py [--offsets 20] [--iters 50] [--modes strict,fused,debug]
"""
import argparse
import subprocess
import sys
import time

import torch

import torch_tpu  # noqa: F401
from torch_tpu import profiler

K = 4


def _cases(x, y, w, v):
    """name -> fn(i): one loop iteration over offset ``i``."""
    return {
        "sin(x[i])": lambda i: torch.sin(x[i]),
        "x[i] + y": lambda i: x[i] + y,
        "x[:, i] * 2": lambda i: x[:, i] * 2,
        "x[i:i+k].sum()": lambda i: x[i:i + K].sum(),
        "x.narrow(0, i, k) @ w": lambda i: x.narrow(0, i, K) @ w,
        "x[i].sort()": lambda i: x[i].sort()[0],
        "x[i].mul_(2)": lambda i: x[i].mul_(2),
        "x[i] = v": lambda i: x.__setitem__(i, v),
    }


def run(offsets=20, iters=50, modes=("strict", "fused", "debug")):
    """Rows (mode, loop, executables built, CPU ms of the first pass, CPU us/iter, wall us/iter).  Each
    loop gets tensors of its own width (no executable shared between loops)
    and waits for its result every iteration (fused mode: one chain per
    iteration, as a loop that reads its results runs)."""
    rows = []
    for mode in modes:
        with torch.tpu.set_eager_mode(mode):
            for c, name in enumerate(_cases(*_tensors(offsets, 0))):
                fn = _cases(*_tensors(offsets, 40 + c))[name]
                before, first = profiler.xla_compiles(), time.process_time()
                for i in range(offsets):
                    fn(i)
                    torch.tpu.synchronize()
                compiles, first = profiler.xla_compiles() - before, time.process_time() - first
                cpu, wall = time.process_time(), time.perf_counter()
                for j in range(iters):
                    fn(j % offsets)
                    torch.tpu.synchronize()
                cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
                rows.append((mode, name, compiles, 1e3 * first, 1e6 * cpu / iters, 1e6 * wall / iters))
    return rows


def _tensors(offsets, width):
    x = torch.randn(offsets + K, width).to("tpu")
    return x, torch.randn(width).to("tpu"), torch.randn(width, 8).to("tpu"), torch.randn(width).to("tpu")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--offsets", type=int, default=20)
    p.add_argument("--iters", type=int, default=50)
    p.add_argument("--modes", default="strict,fused,debug")
    p.add_argument("--no-header", action="store_true")
    a = p.parse_args()
    if len(a.modes.split(",")) > 1:
        print(f"| mode | loop | executables for {a.offsets} offsets | CPU ms, first pass | CPU us/iter | wall us/iter |")
        print("|---|---|---|---|---|---|", flush=True)
    for mode in a.modes.split(","):  # each mode in a fresh process: no executable shared
        if len(a.modes.split(",")) > 1:
            subprocess.run([sys.executable, __file__, "--offsets", str(a.offsets), "--iters", str(a.iters),
                            "--modes", mode, "--no-header"], check=True)
            continue
        if not a.no_header:
            print(f"| mode | loop | executables for {a.offsets} offsets | CPU ms, first pass | CPU us/iter | wall us/iter |")
            print("|---|---|---|---|---|---|")
        for _, name, n, first, cpu, wall in run(a.offsets, a.iters, [mode]):
            print(f"| {mode} | `{name}` | {n} | {first:.0f} | {cpu:.0f} | {wall:.0f} |", flush=True)


if __name__ == "__main__":
    main()
