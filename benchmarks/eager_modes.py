"""Training-step time of the eager modes (debug, strict, fused) against
PyTorch's CPU eager and inductor, side by side in one run, as ratios; and the
per-op time of a chain of 100 small elementwise ops.

    python benchmarks/eager_modes.py [--configs tiny small cnn] [--steps 10]
"""
import os
import sys
import time

import torch

import torch_tpu  # noqa: F401

sys.path.insert(0, os.path.dirname(__file__))
from common import table  # noqa: E402
from training import parse_args, run_all, seconds_of  # noqa: E402

VARIANTS = ["cpu-eager", "cpu-inductor", "tpu-debug", "tpu-strict", "tpu-fused"]


def chain_latency(n_ops=100, repeat=20):
    """Seconds per op of a chain of small elementwise ops, per mode."""
    results = {}
    for variant in ["cpu", "tpu-strict", "tpu-fused"]:
        device = "cpu" if variant == "cpu" else "tpu"
        mode = "strict" if variant == "cpu" else variant.split("-")[1]
        x = torch.randn(64, 64, device=device)

        def chain():
            y = x
            for i in range(n_ops):
                y = y * 1.0001 + 0.5 if i % 2 else y.relu()
            return y.sum().item()
        with torch.tpu.set_eager_mode(mode):
            for _ in range(3):
                chain()
            start = time.perf_counter()
            for _ in range(repeat):
                chain()
            results[variant] = (time.perf_counter() - start) / repeat / n_ops
    return results


def main():
    args = parse_args(__doc__, VARIANTS)
    print(f"platform: {torch.tpu.get_device_name()}, torch threads: {torch.get_num_threads()}")
    results = run_all(args)
    rows = []
    for config in args.configs:
        base = seconds_of(results, config, "cpu-eager")
        for variant in args.variants:
            r = results[(config, variant)]
            rows.append([config, variant, f"{r.seconds * 1000:.1f}", f"{r.first:.1f}",
                         f"{base / r.seconds:.2f}x" if base else "-", f"{r.alone * 1000:.1f}" if r.alone else "-",
                         f"{r.cpu * 1000:.1f}"])
    print(table(rows, ["config", "variant", "ms/step (median)", "first step s", "speed vs CPU eager",
                       "XLA executables alone ms", "CPU ms/step (all threads)"]))
    chain = chain_latency()
    print(table([[k, f"{v * 1e6:.1f}", f"{chain['cpu'] / v:.2f}x"] for k, v in chain.items()],
                ["100-op chain", "µs/op", "speed vs CPU eager"]))


if __name__ == "__main__":
    main()
