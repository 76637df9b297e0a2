"""Training-step time of the eager modes (debug, strict, fused) against
PyTorch's CPU eager and inductor, side by side in one run, as ratios.

    python benchmarks/eager_modes.py [--configs tiny small cnn] [--steps 10]
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
from models import CNN, GPT, GPT_CONFIGS, cnn_batch, gpt_batch  # noqa: E402


def build(config):
    gen = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    if config == "cnn":
        return CNN(), cnn_batch(16, gen)
    cfg = GPT_CONFIGS[config]
    return GPT(cfg), gpt_batch(cfg, gen)


def make_step(model, opt, batch):
    def step():
        loss = model(*batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.item()  # one host read per step, as a training loop logs its loss
    return step


def time_steps(step, steps, warmup):
    for _ in range(warmup):
        step()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    times.sort()
    return times[len(times) // 2]  # the median step


def run(config, variant, steps, warmup):
    model, batch = build(config)
    if variant.startswith("tpu"):
        mode = variant.split("-")[1]
        model = model.to("tpu")
        batch = tuple(b.to("tpu") for b in batch)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        with torch.tpu.set_eager_mode(mode):
            return time_steps(make_step(model, opt, batch), steps, warmup)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    step = make_step(model, opt, batch)
    if variant == "cpu-inductor":
        step = torch.compile(step, backend="inductor")
    return time_steps(step, steps, warmup)


VARIANTS = ["cpu-eager", "cpu-inductor", "tpu-debug", "tpu-strict", "tpu-fused"]


def chain_latency(n_ops=100, repeat=20):
    """Per-op time of a chain of small elementwise ops, per mode, against CPU eager."""
    results = {}
    for variant in ["cpu", "tpu-strict", "tpu-fused"]:
        device = "cpu" if variant == "cpu" else "tpu"
        mode = "strict" if variant == "cpu" else variant.split("-")[1]
        x = torch.randn(64, 64, device=device)
        with torch.tpu.set_eager_mode(mode):
            def chain():
                y = x
                for i in range(n_ops):
                    y = y * 1.0001 + 0.5 if i % 2 else y.relu()
                return y.sum().item()
            for _ in range(3):
                chain()
            start = time.perf_counter()
            for _ in range(repeat):
                chain()
            results[variant] = (time.perf_counter() - start) / repeat / n_ops
    return results


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--configs", nargs="+", default=["tiny", "small", "cnn"])
    parser.add_argument("--variants", nargs="+", default=VARIANTS)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args()
    print(f"platform: {torch.tpu.get_device_name()}, threads: {torch.get_num_threads()}")
    rows = []
    jobs = [(c, v) for c in args.configs for v in args.variants]
    results = {}
    for config, variant in tqdm(jobs, desc="benchmarks"):
        results[(config, variant)] = run(config, variant, args.steps, args.warmup)
    for config in args.configs:
        base = results.get((config, "cpu-eager"))
        for variant in args.variants:
            t = results[(config, variant)]
            rows.append([config, variant, f"{t * 1000:.1f}",
                         f"{base / t:.2f}x" if base else "-"])
    print(table(rows, ["config", "variant", "ms/step (median)", "speed vs CPU eager"]))
    chain = chain_latency()
    print(table([[k, f"{v * 1e6:.1f}", f"{chain['cpu'] / v:.2f}x"] for k, v in chain.items()],
                ["100-op chain", "µs/op", "speed vs CPU eager"]))


if __name__ == "__main__":
    main()
