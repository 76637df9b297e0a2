"""Host overhead: the CPU time torch_tpu spends per op and per training step
where the compute is negligible, as a ratio to PyTorch CPU eager on one
thread (whose C++ dispatch stands for a native backend's host cost), in the
same run.

- chain: 200 small elementwise ops on 64x64 (``z = z * 1.0001 + y``), one ``.cpu()``;
  its ``jax-jit`` row is the same chain as one bare ``jax.jit`` call per op on
  the JAX device torch_tpu uses: the engine's own cost per launch, the floor
  of any backend that launches op by op (strict mode);
- micro step: a 2-layer GPT (d_model 32, 2 heads, seq 16, vocab 64, batch 2;
  tied embedding; AdamW), the "tiny" model's code, with one ``.item()`` per step;
- host-to-device copy: a (2, 16) int64 CPU tensor (a token batch) moved with
  ``.to("tpu")``, against PyTorch's own copy of it on the CPU
  (``.to("cpu", copy=True)``);
- optimizer step: ``AdamW(fused=True).step()`` (the Hugging Face Trainer's
  default) over the 148 parameters of the micro GPT made 12 layers deep, its
  gradients in place: a list op's host cost per step, per tensor.

CPU time is the whole process's (``time.process_time()``, all threads: XLA's
executables run on the same cores); wall time is shown too but is noisy on a
shared machine.  "Host CPU" counts only the threads that run PyTorch: the
calling thread and autograd's tpu thread (where an eager backward runs), not
XLA:CPU's executor threads, which stand in for the device.  Those do more than
compute: between launches they spin-wait for the next one (Eigen's thread
pool), so while the host spends 20 us on an op, an executor thread spends
about as long spinning, and the whole-process figure of a mode that launches
op by op is about twice its host work.  On a TPU that spinning does not exist.
Variants run round-robin and each keeps the median of its rounds; a ratio
is the median of the rounds' own ratios (each variant against CPU eager's
run of the same round, seconds apart), so the machine's speed drifting
between rounds cancels out.

    python benchmarks/overhead.py [--rounds 5] [--steps 20] [--plot overhead.png]
"""
import argparse
import dataclasses
import os
import statistics
import sys
import threading
import time
import warnings

import torch

import torch_tpu  # noqa: F401

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import table  # noqa: E402
from models import GPT, GPTConfig, gpt_batch  # noqa: E402
from training import make_step  # noqa: E402

MICRO = GPTConfig(layers=2, d_model=32, heads=2, seq=16, vocab=64, batch=2)
CHAIN_OPS = 200
CHAIN_VARIANTS = ["cpu-eager", "jax-jit", "tpu-strict", "tpu-fused"]
STEP_VARIANTS = ["cpu-eager", "cpu-inductor", "tpu-strict", "tpu-fused", "tpu-compiled"]
OPTIMIZER_VARIANTS = ["cpu-eager", "tpu-strict"]
COPY_VARIANTS = ["cpu-eager", "tpu-strict"]
COPIES = 50  # per timed call
OPTIMIZER_LAYERS = 12


def _mode(variant):
    return variant.split("-")[1] if variant in ("tpu-strict", "tpu-fused") else "strict"


def chain_fn(variant):
    """One run of the 200-op chain on the variant's device (a callable)."""
    device = "tpu" if variant.startswith("tpu") else "cpu"
    gen = torch.Generator().manual_seed(0)
    z0 = torch.randn(64, 64, generator=gen).to(device)
    y = torch.randn(64, 64, generator=gen).to(device)
    if variant == "jax-jit":
        return _jax_chain(z0, y)

    def chain():
        z = z0
        for _ in range(CHAIN_OPS // 2):
            z = z * 1.0001 + y
        return z.cpu()
    return chain


def _jax_chain(z0, y):
    """The chain in bare JAX: one jitted call per op on torch_tpu's JAX device."""
    import jax
    import numpy as np
    from torch_tpu import runtime
    mul = jax.jit(lambda z: z * np.float32(1.0001))
    add = jax.jit(lambda z, w: z + w)
    z0, y = (jax.device_put(t.numpy(), runtime.jax_device()) for t in (z0, y))

    def chain():
        z = z0
        for _ in range(CHAIN_OPS // 2):
            z = add(mul(z), y)
        return np.asarray(z)
    return chain


def micro_step_fn(variant):
    """One micro GPT training step on the variant (a callable; ``.item()`` included)."""
    torch.manual_seed(0)
    model = GPT(MICRO)
    batch = gpt_batch(MICRO, torch.Generator().manual_seed(0))
    device = "tpu" if variant.startswith("tpu") else "cpu"
    model = model.to(device)
    batch = tuple(b.to(device) for b in batch)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    step = make_step(model, opt, batch)
    if variant == "cpu-inductor":
        step = torch.compile(step, backend="inductor")
    elif variant == "tpu-compiled":
        step = torch.compile(step, backend="tpu")
    return lambda: step().item()


def copy_fn(variant):
    """COPIES host-to-device copies of a small batch (a callable)."""
    x = torch.randint(0, 64, (2, 16), generator=torch.Generator().manual_seed(0))
    device = "tpu" if variant.startswith("tpu") else "cpu"

    def copies():
        for _ in range(COPIES):
            x.to(device, copy=True)
    return copies


def optimizer_step_fn(variant):
    """One ``AdamW(fused=True)`` step over the deep micro GPT's parameters (a callable)."""
    torch.manual_seed(0)
    config = dataclasses.replace(MICRO, layers=OPTIMIZER_LAYERS)
    device = "tpu" if variant.startswith("tpu") else "cpu"
    model = GPT(config).to(device)
    model(*(b.to(device) for b in gpt_batch(config, torch.Generator().manual_seed(0)))).backward()
    return torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True).step


class HostClock:
    """CPU time of the threads that run PyTorch: this one and autograd's tpu
    thread (found by a hook in one tpu backward), not XLA's executors."""

    def __init__(self):
        idents = {threading.get_ident()}
        p = torch.zeros(1, device="tpu", requires_grad=True)
        p.register_hook(lambda g: idents.add(threading.get_ident()))
        (p * 2).sum().backward()
        self.clocks = [time.pthread_getcpuclockid(i) for i in idents]

    def __call__(self):
        return sum(time.clock_gettime(c) for c in self.clocks)


def measure(makers, calls, warmup, rounds):
    """{variant: (CPU seconds per call, wall seconds per call, host CPU seconds
    per call)}, each the median of ``rounds`` round-robin runs of ``calls``
    calls, and {variant: (CPU ratio, host CPU ratio)} to ``cpu-eager`` (when
    measured), each the median of the rounds' own ratios."""
    fns = {}
    for variant, make in makers.items():
        torch._dynamo.reset()
        fn = make(variant)
        with torch.tpu.set_eager_mode(_mode(variant)):
            for _ in range(warmup):
                fn()
            torch.tpu.synchronize()
        fns[variant] = fn
    host_clock = HostClock()
    samples = {v: ([], [], []) for v in fns}
    for _ in range(rounds):
        for variant, fn in fns.items():
            with torch.tpu.set_eager_mode(_mode(variant)):
                fn()  # back in this mode: one untimed call
                cpu, wall, host = time.process_time(), time.perf_counter(), host_clock()
                for _ in range(calls):
                    fn()
                for kept, start, now in zip(samples[variant], (cpu, wall, host),
                                            (time.process_time(), time.perf_counter(), host_clock())):
                    kept.append((now - start) / calls)
    medians = {v: tuple(statistics.median(k) for k in kept) for v, kept in samples.items()}
    base = samples.get("cpu-eager")
    ratios = {} if base is None else {
        v: tuple(statistics.median(a / b for a, b in zip(kept[i], base[i])) for i in (0, 2))
        for v, kept in samples.items()}
    return medians, ratios


def run(rounds=5, chain_calls=20, steps=20, warmup=3, chain_variants=CHAIN_VARIANTS,
        step_variants=STEP_VARIANTS, optimizer_variants=OPTIMIZER_VARIANTS, copy_variants=COPY_VARIANTS):
    """{"chain": {variant: (CPU s/op, wall s/op, host CPU s/op)}, "copy": (... per
    copy), "micro" and "optimizer": {variant: (... per step)}, "ratios": each's
    ratios}, on one torch thread."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            chain, chain_ratios = measure({v: chain_fn for v in chain_variants}, chain_calls, warmup, rounds)
            micro, micro_ratios = measure({v: micro_step_fn for v in step_variants}, steps, warmup, rounds)
            optimizer, optimizer_ratios = measure({v: optimizer_step_fn for v in optimizer_variants},
                                                  steps, warmup, rounds)
            copy, copy_ratios = measure({v: copy_fn for v in copy_variants}, chain_calls, warmup, rounds)
    finally:
        torch.set_num_threads(threads)
    return {"chain": {v: tuple(t / CHAIN_OPS for t in times) for v, times in chain.items()}, "micro": micro,
            "optimizer": optimizer, "copy": {v: tuple(t / COPIES for t in times) for v, times in copy.items()},
            "ratios": {"chain": chain_ratios, "micro": micro_ratios, "optimizer": optimizer_ratios,
                       "copy": copy_ratios}}


def rows(results):
    """Table rows: benchmark, variant, CPU and wall time, CPU ratio to CPU eager."""
    out = []
    for name, unit, scale in (("chain", "µs/op", 1e6), ("copy", "µs/copy", 1e6), ("micro", "ms/step", 1e3),
                              ("optimizer", "ms/step", 1e3)):
        ratios = results["ratios"][name]
        for variant, (cpu, wall, host) in results[name].items():
            cpu_ratio, host_ratio = ratios.get(variant, (None, None))
            out.append([f"{name} ({unit})", variant, f"{cpu * scale:.1f}", f"{wall * scale:.1f}",
                        f"{cpu_ratio:.1f}x" if cpu_ratio else "-", f"{host * scale:.1f}",
                        f"{host_ratio:.1f}x" if host_ratio else "-"])
    return out


HEADERS = ["benchmark", "variant", "CPU time", "wall time", "CPU time vs CPU eager (1 thread)",
           "host CPU", "host CPU vs CPU eager's"]


def plot(results, path, bar_chart):
    """The CPU-time ratios as a bar chart (``bar_chart``: report.py's)."""
    groups = ["chain (per op)", "copy to tpu", "micro step", "AdamW(fused) step"]
    names = ("chain", "copy", "micro", "optimizer")
    variants = [v for v in dict.fromkeys(CHAIN_VARIANTS + COPY_VARIANTS + STEP_VARIANTS + OPTIMIZER_VARIANTS)
                if any(v in results[name] for name in names)]
    values = {}
    for group, name in zip(groups, names):
        for variant, (ratio, _) in results["ratios"][name].items():
            values[(group, variant)] = ratio
    bar_chart(path, groups, variants, values, "CPU time / PyTorch CPU eager (log)",
              "Host CPU time / PyTorch CPU eager, 1 thread (lower is better)", log=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20, help="micro steps per round")
    parser.add_argument("--chains", type=int, default=20, help="chains per round")
    parser.add_argument("--warmup", type=int, default=3)
    every = list(dict.fromkeys(CHAIN_VARIANTS + STEP_VARIANTS + OPTIMIZER_VARIANTS + COPY_VARIANTS))
    parser.add_argument("--variants", nargs="+", default=every, choices=every,
                        help="the variants to run (default: all)")
    parser.add_argument("--plot", metavar="PNG", help="also draw the ratios (needs matplotlib)")
    args = parser.parse_args()
    results = run(args.rounds, args.chains, args.steps, args.warmup,
                  [v for v in CHAIN_VARIANTS if v in args.variants], [v for v in STEP_VARIANTS if v in args.variants],
                  [v for v in OPTIMIZER_VARIANTS if v in args.variants], [v for v in COPY_VARIANTS if v in args.variants])
    from torch_tpu import native
    print(f"platform: {torch.tpu.get_device_name()}; torch threads: 1; native helper: {native.status()}; "
          "CPU time: all threads of the process; host CPU: the threads running PyTorch (not XLA's executors)")
    print(table(rows(results), HEADERS))
    if args.plot:
        from report import _bar_chart
        plot(results, args.plot, _bar_chart)


if __name__ == "__main__":
    main()
