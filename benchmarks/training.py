"""One training step of each benchmark model, timed the same way for every
variant: PyTorch CPU eager or inductor, or tpu in an eager mode or compiled."""
import argparse
import statistics
import time
from typing import NamedTuple

import jax
import torch
from tqdm import tqdm

from models import CNN, GPT, GPT_CONFIGS, cnn_batch, gpt_batch


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
        return loss
    return step


class StepResult(NamedTuple):
    seconds: float                 # median wall seconds per step
    first: float                   # seconds of the first step: compile included
    alone: float | None = None  # the step's whole-graph XLA executables alone (executables_alone)
    cpu: float = 0.0               # CPU seconds per step, all the process's threads together


def time_steps(step, steps, warmup):
    """(median seconds per step, seconds of the first call: compile included,
    CPU seconds per step of all threads: what a step needs of the cores)."""
    start = time.perf_counter()
    step().item()  # one host read per step, as a training loop logs its loss
    first = time.perf_counter() - start
    for _ in range(warmup):
        step().item()
    times = []
    cpu_start = time.process_time()
    for _ in range(steps):
        start = time.perf_counter()
        step().item()
        times.append(time.perf_counter() - start)
    cpu = (time.process_time() - cpu_start) / steps
    times.sort()
    return times[len(times) // 2], first, cpu


def executables_alone(step, repeat=5):
    """Seconds per step that the step's whole-graph XLA executables (fused
    chains, compiled graphs) take on their own: one step's calls are captured
    with copies of their inputs, then replayed back to back, each waited for,
    with no Python in between.  The floor the step time reaches as host
    overhead goes to zero.  A compiled step donates the buffers it replaces
    (parameters, optimizer state), so each replay gets fresh copies, made
    before it is timed."""
    calls, original = [], jax.stages.Compiled.__call__

    def capture(exe, *args):
        calls.append((exe, [_copy(a) for a in args]))  # (before the call donates them)
        return original(exe, *args)
    jax.stages.Compiled.__call__ = capture
    try:
        step().item()
    finally:
        jax.stages.Compiled.__call__ = original
    best = float("inf")
    for _ in range(repeat + 1):  # the first replay warms up
        replay = [(exe, [_copy(a) for a in args]) for exe, args in calls]
        jax.block_until_ready([args for _, args in replay])
        start = time.perf_counter()
        for exe, args in replay:
            jax.block_until_ready(exe(*args))
        best = min(best, time.perf_counter() - start)
    return best


def _copy(x):
    return x.copy() if isinstance(x, jax.Array) else x


# the variants whose step runs as whole-graph executables (see executables_alone)
WHOLE_GRAPH_VARIANTS = ("tpu-fused", "tpu-compiled")


def run(config, variant, steps, warmup):
    """variant: cpu-eager, cpu-inductor, tpu-debug, tpu-strict, tpu-fused, tpu-compiled.
    Returns a StepResult."""
    model, batch = build(config)
    device = "tpu" if variant.startswith("tpu") else "cpu"
    model = model.to(device)
    batch = tuple(b.to(device) for b in batch)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    step = make_step(model, opt, batch)
    torch._dynamo.reset()
    if variant == "cpu-inductor":
        step = torch.compile(step, backend="inductor")
    elif variant == "tpu-compiled":
        step = torch.compile(step, backend="tpu")
    mode = variant.split("-")[1] if variant in ("tpu-debug", "tpu-strict", "tpu-fused") else "strict"
    with torch.tpu.set_eager_mode(mode):
        median, first, cpu = time_steps(step, steps, warmup)
        alone = executables_alone(step) if variant in WHOLE_GRAPH_VARIANTS else None
    return StepResult(median, first, alone, cpu)


def parse_args(doc, variants):
    parser = argparse.ArgumentParser(description=doc)
    parser.add_argument("--configs", nargs="+", default=["tiny", "small", "cnn"])
    parser.add_argument("--variants", nargs="+", default=variants)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3,
                        help="repeat every run this many times, interleaved (median of the rounds)")
    return parser.parse_args()


def run_rounds(jobs, steps, warmup, rounds, keep_going=False):
    """Run every (config, variant) job ``rounds`` times, round-robin, so a
    burst of load on a shared machine hits one round of every variant rather
    than all rounds of one.  Returns ({job: StepResult, the median of the
    rounds (the first step: round 1's)}, {job: error text}); with
    ``keep_going`` a failing job is recorded instead of raised."""
    rounds_of, errors = {}, {}
    with tqdm(total=len(jobs) * rounds, desc="benchmarks", unit="run") as bar:
        for _ in range(rounds):
            for job in jobs:
                if job not in errors:
                    try:
                        result = run(*job, steps, warmup)
                    except Exception as e:
                        if not keep_going:
                            raise
                        errors[job] = f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"
                        rounds_of.pop(job, None)  # (a job that failed in any round is reported as failed)
                    else:
                        rounds_of.setdefault(job, []).append(result)
                bar.update()
    return {job: _median_of(results) for job, results in rounds_of.items()}, errors


def _median_of(results):
    alone = [r.alone for r in results if r.alone is not None]
    return StepResult(statistics.median(r.seconds for r in results), results[0].first,
                      statistics.median(alone) if alone else None,
                      statistics.median(r.cpu for r in results))


def seconds_of(results, config, variant):
    """The median step seconds of a (config, variant) run, or None if it did not run."""
    result = results.get((config, variant))
    return result.seconds if result is not None else None


def run_all(args):
    """{(config, variant): StepResult} with a progress bar."""
    jobs = [(c, v) for c in args.configs for v in args.variants]
    return run_rounds(jobs, args.steps, args.warmup, args.rounds)[0]
