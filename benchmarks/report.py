"""All benchmarks side by side in one run: training-step time of each model
config on tpu (debug, strict, fused eager and torch.compile) against PyTorch
CPU eager and inductor, first-step (compile) time, per-op latency, and
Hugging Face ``generate()`` (benchmarks/generate.py: cold and warm calls).
Writes benchmarks/results/report.md and PNG plots; ``--publish`` copies them
to docs/benchmarks/ (what the README shows).

    python benchmarks/report.py [--quick] [--publish]
"""
import argparse
import datetime
import os
import platform
import shutil
import sys
import time
import warnings

import torch

import torch_tpu  # noqa: F401

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from common import best_time  # noqa: E402
from eager_modes import chain_latency  # noqa: E402
import first_call  # noqa: E402
import generate as generation  # noqa: E402
from op_latency import OPS  # noqa: E402
import overhead  # noqa: E402
from training import run_rounds, seconds_of  # noqa: E402

VARIANTS = ["cpu-eager", "cpu-inductor", "tpu-debug", "tpu-strict", "tpu-fused", "tpu-compiled"]
COLORS = {"cpu-eager": "#888888", "cpu-inductor": "#444444", "tpu-debug": "#f4a582",
          "tpu-strict": "#d6604d", "tpu-fused": "#4393c3", "tpu-compiled": "#2166ac",
          "torch CPU": "#888888", "jax.jit": "#1b7837", "tpu debug": "#f4a582", "tpu strict": "#d6604d"}
PLOTS = ["step_time.png", "first_step.png", "op_latency.png", "overhead.png"]


def op_latencies(number, repeat):
    """µs per call of small ops: torch CPU, a bare jax.jit call, tpu in each eager mode."""
    import jax
    import jax.numpy as jnp
    a, b = torch.randn(64, 64), torch.randn(64, 64)
    ta, tb = a.to("tpu"), b.to("tpu")
    ja, jb = jnp.asarray(a.numpy()), jnp.asarray(b.numpy())
    out = {}
    for name, (torch_fn, jax_fn) in OPS.items():
        jitted = jax.jit(jax_fn)
        row = {"torch CPU": best_time(lambda: torch_fn(a, b), repeat=repeat, number=number),
               "jax.jit": best_time(lambda: jitted(ja, jb), repeat=repeat, number=number,
                                    sync=lambda: jitted(ja, jb).block_until_ready())}
        for mode in ("debug", "strict"):
            with torch.tpu.set_eager_mode(mode):
                row[f"tpu {mode}"] = best_time(lambda: torch_fn(ta, tb), sync=torch.tpu.synchronize,
                                               repeat=repeat, number=number)
        out[name] = {k: v * 1e6 for k, v in row.items()}
    return out


def _bar_chart(path, groups, series, values, ylabel, title, log=False):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(groups) * max(1, len(series)) / 3), 4))
    width = 0.8 / len(series)
    for i, s in enumerate(series):
        xs = [g + (i - (len(series) - 1) / 2) * width for g in range(len(groups))]
        ys = [values.get((grp, s), 0) or 0 for grp in groups]
        ax.bar(xs, ys, width, label=s, color=COLORS.get(s))
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels(groups)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if log:
        ax.set_yscale("log")
    ax.legend(fontsize=8, ncol=min(3, len(series)))
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _md_table(rows, headers):
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="tiny GPT and the CNN, fewer steps")
    parser.add_argument("--configs", nargs="+")
    parser.add_argument("--variants", nargs="+", default=VARIANTS)
    parser.add_argument("--steps", type=int)
    parser.add_argument("--warmup", type=int)
    parser.add_argument("--rounds", type=int, help="interleaved repeats of each training run (median)")
    parser.add_argument("--generate-configs", nargs="*", default=["tiny"], choices=list(generation.CONFIGS),
                        help="model configs for the generate() section (llama-100m takes minutes; none: skip)")
    parser.add_argument("--out", default=os.path.join(HERE, "results"))
    parser.add_argument("--publish", action="store_true",
                        help="also copy report.md and the plots to docs/benchmarks/")
    args = parser.parse_args()
    try:  # the plots come last: fail before the measuring, not after it
        import matplotlib  # noqa: F401
    except ImportError:
        sys.exit("benchmarks/report.py draws its plots with matplotlib: pip install -e '.[bench]'")
    configs = args.configs or (["tiny", "cnn"] if args.quick else ["tiny", "small", "cnn"])
    steps = args.steps or (5 if args.quick else 10)
    warmup = args.warmup if args.warmup is not None else (2 if args.quick else 3)
    rounds = args.rounds or (1 if args.quick else 3)
    command = "python benchmarks/report.py" + "".join(f" {a}" for a in sys.argv[1:])
    os.makedirs(args.out, exist_ok=True)
    started = time.time()

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        jobs = [(c, v) for c in configs for v in args.variants]
        train, errors = run_rounds(jobs, steps, warmup, rounds, keep_going=True)
        ops = op_latencies(number=50 if args.quick else 200, repeat=3 if args.quick else 5)
        chain = chain_latency(repeat=5 if args.quick else 20)
        first_calls = first_call.run(shapes=3 if args.quick else 5, modes="strict" if args.quick else "strict,fused,debug")
        generated = [generation.run(c, v, repeat=2 if args.quick else 3)
                     for c in args.generate_configs for v in generation.VARIANTS]
        host = overhead.run(rounds=3 if args.quick else 5, chain_calls=10 if args.quick else 20,
                            steps=10 if args.quick else 20)

    # ---- tables --------------------------------------------------------------
    rows = []
    for config in configs:
        base = seconds_of(train, config, "cpu-eager")
        ind = seconds_of(train, config, "cpu-inductor")
        for variant in args.variants:
            if (config, variant) not in train:
                rows.append([config, variant, "failed", "-", "-", "-", "-", "-"])
                continue
            r = train[(config, variant)]
            t = r.seconds
            rows.append([config, variant, f"{t * 1000:.1f}", f"{r.first:.2f}",
                         f"{base / t:.2f}x" if base else "-", f"{ind / t:.2f}x" if ind else "-",
                         f"{r.alone * 1000:.1f}" if r.alone else "-", f"{r.cpu * 1000:.1f}"])
    step_table = _md_table(rows, ["config", "variant", "ms/step (median)", "first step s (compile)",
                                  "speed vs CPU eager", "speed vs inductor", "XLA executables alone ms",
                                  "CPU ms/step (all threads)"])
    op_cols = ["torch CPU", "jax.jit", "tpu debug", "tpu strict"]
    op_table = _md_table([[name] + [f"{row[c]:.1f}" for c in op_cols] for name, row in ops.items()],
                         ["op (µs per call)"] + op_cols)
    generate_table = _md_table(generation.rows(generated), generation.HEADERS) if generated else "(skipped)"
    host_table = _md_table(overhead.rows(host), overhead.HEADERS)
    chain_table = _md_table([[k, f"{v * 1e6:.1f}", f"{chain['cpu'] / v:.2f}x"] for k, v in chain.items()],
                            ["100-op elementwise chain", "µs per op", "speed vs CPU eager"])

    # ---- plots -----------------------------------------------------------------
    step_ms = {k: v.seconds * 1000 for k, v in train.items()}
    first_s = {k: v.first for k, v in train.items()}
    _bar_chart(os.path.join(args.out, "step_time.png"), configs, args.variants, step_ms,
               "ms per training step (log)", "Training step time (median; lower is better)", log=True)
    _bar_chart(os.path.join(args.out, "first_step.png"), configs, args.variants, first_s,
               "seconds (log)", "First step: compilation included (lower is better)", log=True)
    op_values = {(name, c): row[c] for name, row in ops.items() for c in op_cols}
    for k, v in chain.items():
        op_values[("100-op chain (per op)", {"cpu": "torch CPU", "tpu-strict": "tpu strict"}.get(k, k))] = v * 1e6
    _bar_chart(os.path.join(args.out, "op_latency.png"), list(ops) + ["100-op chain (per op)"],
               op_cols + ["tpu-fused"], op_values, "µs per op (log)", "Per-op latency (lower is better)", log=True)

    overhead.plot(host, os.path.join(args.out, "overhead.png"), _bar_chart)

    # ---- markdown ----------------------------------------------------------------
    load = os.getloadavg() if hasattr(os, "getloadavg") else ("?",)
    md = f"""# torch_tpu benchmark report

Made by `{command}` on {datetime.date.today()} in {time.time() - started:.0f} s.

- platform behind tpu: **{torch.tpu.get_device_name()}**; torch {torch.__version__}, torch_tpu {torch_tpu.__version__}
- host: {platform.machine()}, {os.cpu_count()} cores, torch threads {torch.get_num_threads()}, load average {', '.join(f'{x:.1f}' for x in load)}
- steps per run: {steps} timed after {warmup} warm-up (median reported); one `.item()` per step, as a loop logging its loss
- rounds: {rounds}, every run repeated round-robin; the table gives the median of the rounds' medians

**Noise.** This machine is shared with other jobs while the report runs, so
absolute numbers and small ratios are noisy (repeat runs differ by tens of
percent); read the orders of magnitude and the ordering of modes, not the digits.
On the CPU platform the tpu device and PyTorch share the same cores, so CPU
results say how much overhead torch_tpu adds, not what a TPU would do.
Runs share one process in the order of the table, round after round; first-step
times come from round 1, where a variant skips kernels an earlier variant
already compiled (and the on-disk XLA cache).

## Training step

![step time](step_time.png)

{step_table}

"XLA executables alone" replays one step's whole-graph executables back to
back with no Python between them: the floor as host overhead goes to zero.
"CPU ms/step" is the CPU time of all the process's threads per step. On the
CPU platform host Python and XLA's executables share the cores, so no step
takes less wall time than its CPU time divided by the cores.

## First step (compilation)

![first step](first_step.png)

## Per-op latency

![op latency](op_latency.png)

{op_table}

{chain_table}

## First call of an op with a new shape

Each op on shapes the process has not seen, against a bare `jax.jit` of the
same jnp function, each in a fresh process on an empty persistent cache
(`benchmarks/first_call.py`; `--warm-cache` adds a second run).

{first_calls.replace("### ", "#### ")}

## Text generation (Hugging Face `generate()`)

{generation.describe(1, False, 1)}. Each variant runs in a fresh process with
JAX's on-disk cache off, so the cold call includes every compile; "XLA
compiles" counts executables built during the call. Details and more
options: `python benchmarks/generate.py --help`.

{generate_table}
## Host overhead

![host overhead](overhead.png)

{host_table}

CPU time of the whole process (all threads: XLA's executables run on the same
cores) per op of a 200-op elementwise chain on 64x64, per training step of
a "micro" GPT (2 layers, d_model 32), whose compute is negligible, per
host-to-device copy of a small batch (`.to("tpu")`, against PyTorch's own
copy of it on the CPU), and per `AdamW(fused=True)` step over 148 small
parameters, against
PyTorch CPU eager on one thread (`benchmarks/overhead.py`): the host work each
mode adds over a native backend's dispatch. "Host CPU" counts only the threads
that run PyTorch (the caller and autograd's tpu thread), not XLA:CPU's
executor threads, which stand in for the device: between launches they
spin-wait for the next one, so for modes that launch op by op the
whole-process figure is about twice the host's work. Each ratio is the
median over rounds of that round's own ratio to CPU eager's run of the same
round, so the machine's speed drifting between rounds cancels out.
"""
    if errors:
        md += "\n## Failed runs\n\n" + "\n".join(f"- {c} {v}: {e}" for (c, v), e in errors.items()) + "\n"
    report_path = os.path.join(args.out, "report.md")
    with open(report_path, "w") as f:
        f.write(md)
    print(md)
    print(f"wrote {report_path} and {', '.join(PLOTS)}")
    if args.publish:
        docs = os.path.join(HERE, os.pardir, "docs", "benchmarks")
        os.makedirs(docs, exist_ok=True)
        for name in ["report.md"] + PLOTS:
            shutil.copy(os.path.join(args.out, name), os.path.join(docs, name))
        print(f"copied to {os.path.normpath(docs)}")


if __name__ == "__main__":
    main()
