"""torch.compile(backend="tpu") training steps against PyTorch CPU eager and
inductor, side by side in one run: step time, ratios, compile time, and the
model FLOP rate against this machine's measured fp32 GEMM rate.

    python benchmarks/compile.py [--configs tiny small cnn] [--steps 10]
"""
import argparse
import os
import sys
import time

import torch
from tqdm import tqdm

import torch_tpu  # noqa: F401

sys.path.insert(0, os.path.dirname(__file__))
from common import table  # noqa: E402
from models import GPT, GPT_CONFIGS  # noqa: E402
from training import run  # noqa: E402

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
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--configs", nargs="+", default=["tiny", "small", "cnn"])
    parser.add_argument("--variants", nargs="+", default=VARIANTS)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args()
    peak = gemm_rate()
    print(f"platform: {torch.tpu.get_device_name()}; measured fp32 GEMM: {peak / 1e9:.1f} GFLOP/s")
    results = {}
    for config, variant in tqdm([(c, v) for c in args.configs for v in args.variants], desc="benchmarks"):
        results[(config, variant)] = run(config, variant, args.steps, args.warmup)
    rows = []
    for config in args.configs:
        flops = GPT(GPT_CONFIGS[config]).flops_per_step() if config in GPT_CONFIGS else None
        eager = results[(config, "cpu-eager")][0] if (config, "cpu-eager") in results else None
        inductor = results[(config, "cpu-inductor")][0] if (config, "cpu-inductor") in results else None
        for variant in args.variants:
            t, first = results[(config, variant)]
            rate = f"{flops / t / 1e9:.1f} ({flops / t / peak:.0%})" if flops else "-"
            rows.append([config, variant, f"{t * 1000:.1f}", f"{first:.1f}",
                         f"{eager / t:.2f}x" if eager else "-",
                         f"{inductor / t:.2f}x" if inductor else "-", rate])
    print(table(rows, ["config", "variant", "ms/step", "first call s", "vs CPU eager",
                       "vs inductor", "model GFLOP/s (of GEMM peak)"]))


if __name__ == "__main__":
    main()
