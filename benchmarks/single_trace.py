"""A tiny-GPT training step (AdamW) four ways, in one run: PyTorch CPU eager
(the baseline), tpu fused eager, ``torch.compile(backend="tpu")`` of the same
step, and ``torch.tpu.optimizers.SingleTraceTrainer`` (forward, backward and
update as one executable).  Reports wall and CPU seconds per step, the CPU
ratio to the baseline, XLA executables launched per step, and the first
step's seconds (compile included).

    OMP_NUM_THREADS=1 python benchmarks/single_trace.py [--config tiny] [--steps 10] [--warmup 3]

(On a small shared machine, OMP_NUM_THREADS=1 keeps PyTorch's CPU baseline
from oversubscribing the cores.)
"""
import argparse
import os
import sys
import time

import torch

import torch_tpu  # noqa: F401
from torch_tpu.eager import pending

sys.path.insert(0, os.path.dirname(__file__))
from common import table  # noqa: E402
from models import GPT, GPT_CONFIGS, gpt_batch  # noqa: E402
from training import make_step  # noqa: E402


class Launches:
    """Executables launched: every launch notes its results for synchronize."""

    def __init__(self):
        self.count = 0
        self._note = pending.note

        def note(results):
            self.count += 1
            self._note(results)
        pending.note = note


def _model(config, device):
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    cfg = GPT_CONFIGS[config]
    batch = tuple(t.to(device) for t in gpt_batch(cfg, gen))
    return GPT(cfg).to(device), batch


def eager_step(config, device):
    model, batch = _model(config, device)
    return make_step(model, torch.optim.AdamW(model.parameters(), lr=1e-3), batch)


def compiled_step(config):
    return torch.compile(eager_step(config, "tpu"), backend="tpu")


def single_trace_step(config):
    model, batch = _model(config, "tpu")
    trainer = torch.tpu.optimizers.SingleTraceTrainer(
        model, torch.tpu.optimizers.AdamW(lr=1e-3, use_bfloat16_moments=False))
    train_step = trainer.make_compiled_train_step(batch)
    return lambda: train_step(batch)


def measure(step, steps, warmup, launches):
    start = time.perf_counter()
    step().item()
    first = time.perf_counter() - start
    for _ in range(warmup):
        step().item()
    before = launches.count
    walls = []
    cpu_start = time.process_time()
    for _ in range(steps):
        start = time.perf_counter()
        step().item()  # one host read per step, as a loop logging its loss
        walls.append(time.perf_counter() - start)
    cpu = (time.process_time() - cpu_start) / steps
    walls.sort()
    return walls[len(walls) // 2], cpu, (launches.count - before) / steps, first


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="tiny", choices=sorted(GPT_CONFIGS))
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args()
    launches = Launches()
    variants = {
        "cpu-eager": lambda: eager_step(args.config, "cpu"),
        "tpu-fused-eager": lambda: eager_step(args.config, "tpu"),
        "tpu-torch.compile": lambda: compiled_step(args.config),
        "tpu-SingleTraceTrainer": lambda: single_trace_step(args.config),
    }
    rows, baseline = [], None
    for name, make in variants.items():
        mode = "fused" if name == "tpu-fused-eager" else "strict"
        with torch.tpu.set_eager_mode(mode):
            wall, cpu, per_step, first = measure(make(), args.steps, args.warmup, launches)
        baseline = baseline or cpu
        rows.append([name, f"{wall * 1e3:.1f}", f"{cpu * 1e3:.1f}", f"{cpu / baseline:.2f}",
                     "-" if name.startswith("cpu") else f"{per_step:g}", f"{first:.2f}"])
    print(f"GPT {args.config}, AdamW, {args.steps} timed steps after {args.warmup} warm-up; "
          f"platform: {torch.tpu.get_device_name()}")
    print(table(rows, ["variant", "wall ms/step", "CPU ms/step", "CPU x cpu-eager", "executables/step",
                       "first step s"]))


if __name__ == "__main__":
    main()
