"""torch.compile(backend="tpu") training steps against PyTorch CPU eager and
inductor, side by side in one run: step time, ratios, compile time, and the
model FLOP rate against this machine's measured fp32 GEMM rate.

    python benchmarks/compile.py [--configs tiny small cnn] [--steps 10]
"""
import os
import sys
import time

import torch

import torch_tpu  # noqa: F401

sys.path.insert(0, os.path.dirname(__file__))
from common import table  # noqa: E402
from models import GPT, GPT_CONFIGS  # noqa: E402
from training import parse_args, run_all, seconds_of  # noqa: E402

VARIANTS = ["cpu-eager", "cpu-inductor", "tpu-compiled"]


def gemm_rate(n=1024, repeat=5):
    """fp32 FLOP/s of a square matmul on this machine's CPU (PyTorch)."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - start)
    return 2 * n ** 3 / best


def main():
    args = parse_args(__doc__, VARIANTS)
    peak = gemm_rate()
    print(f"platform: {torch.tpu.get_device_name()}; measured fp32 GEMM: {peak / 1e9:.1f} GFLOP/s")
    results = run_all(args)
    rows = []
    for config in args.configs:
        flops = GPT(GPT_CONFIGS[config]).flops_per_step() if config in GPT_CONFIGS else None
        eager = seconds_of(results, config, "cpu-eager")
        inductor = seconds_of(results, config, "cpu-inductor")
        for variant in args.variants:
            r = results[(config, variant)]
            t = r.seconds
            rate = f"{flops / t / 1e9:.1f} ({flops / t / peak:.0%})" if flops else "-"
            rows.append([config, variant, f"{t * 1000:.1f}", f"{r.first:.1f}",
                         f"{eager / t:.2f}x" if eager else "-",
                         f"{inductor / t:.2f}x" if inductor else "-", rate,
                         f"{r.alone * 1000:.1f}" if r.alone else "-", f"{r.cpu * 1000:.1f}"])
    print(table(rows, ["config", "variant", "ms/step", "first call s", "vs CPU eager",
                       "vs inductor", "model GFLOP/s (of GEMM peak)", "XLA executables alone ms",
                       "CPU ms/step (all threads)"]))


if __name__ == "__main__":
    main()
