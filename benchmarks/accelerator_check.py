"""One command for a machine with an accelerator: is torch_tpu healthy there,
and how fast is it?  Writes one markdown report.

    python benchmarks/accelerator_check.py                          # a TPU VM
    TORCH_TPU_PLATFORM=gpu python benchmarks/accelerator_check.py   # an NVIDIA GPU
    python benchmarks/accelerator_check.py --quick                  # reduced form (CPU, CI)

Sections, each timed and kept within --budget seconds (default 290: under 5
minutes), a failing one reported without stopping the others:

1. the environment report and self-test (``python -m torch_tpu``);
2. a representative slice of the test suite (pytest, in a subprocess);
3. the built-in Pallas kernels compiled for real (on a TPU; interpreted
   elsewhere, where Mosaic cannot run) against the XLA composite:
   max difference and time, forward and backward;
4. the TPU lowering check of the kernels for every TPU generation;
5. per-op and per-step host overhead (benchmarks/overhead.py when present);
6. tiny/small GPT training steps in every eager mode and compiled, against
   PyTorch on the same accelerator where it exists (CUDA), and PyTorch CPU.

Put the report of a real run in docs/benchmarks/.
"""
import argparse
import math
import os
import subprocess
import sys
import time
import traceback
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import torch  # noqa: E402

import torch_tpu  # noqa: E402,F401

# a representative slice: device basics, eager modes, Pallas and jax_op, training, compile
TEST_SLICE = ["tests/test_device.py", "tests/test_modes.py", "tests/test_pallas.py",
              "tests/test_training.py", "tests/test_lowering_check.py", "tests/test_readiness.py"]
SECTIONS = ("env", "tests", "kernels", "lowering", "overhead", "training")
QUICK_TEST_SLICE = ["tests/test_readiness.py::test_int64_stays_exact_past_32_bits_on_a_tpu"]


class Report:
    def __init__(self, budget):
        self.sections = []
        self.deadline = time.perf_counter() + budget

    def left(self):
        return self.deadline - time.perf_counter()

    def section(self, title, fn, *args, need=5):
        """Run ``fn(*args) -> markdown``; record its time, or its error, or that
        the budget ran out before it."""
        if self.left() < need:
            self.sections.append((title, None, f"skipped: the time budget ran out ({need:.0f}s needed)"))
            return
        start = time.perf_counter()
        try:
            body = fn(*args)
        except Exception as e:
            body = (f"**failed**: `{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}`\n\n"
                    f"```\n{traceback.format_exc()[-3000:]}```")
        self.sections.append((title, time.perf_counter() - start, body))
        print(f"[accelerator_check] {title}: {time.perf_counter() - start:.1f}s", file=sys.stderr)

    def markdown(self, header):
        out = [header]
        for title, seconds, body in self.sections:
            took = f" ({seconds:.1f} s)" if seconds is not None else ""
            out += [f"## {title}{took}", "", body.rstrip(), ""]
        return "\n".join(out)


def _table(headers, rows):
    out = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


# ---- 1. environment ----------------------------------------------------------------

def environment():
    from torch_tpu import env_report
    return "```\n" + env_report.format_report(env_report.report(run_self_test=True)) + "\n```"


# ---- 2. tests ------------------------------------------------------------------------

def test_slice(paths, timeout):
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *paths]
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
        tail = proc.stdout[-2500:]
        verdict = "passed" if proc.returncode == 0 else f"**failed** (exit code {proc.returncode})"
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        tail, verdict = out[-2500:], f"**failed** (stopped after {timeout:.0f}s)"
    summary = [line for line in tail.splitlines() if line.strip()][-1:] or ["(no output)"]
    return (f"`{' '.join(['python', '-m', 'pytest', '-q', *paths])}`: {verdict} ({summary[0]})\n\n"
            f"```\n{tail}\n```")


# ---- 3. Pallas kernels against the XLA composite ------------------------------------

def _timed(fn, *args, repeat=3):
    import jax
    jax.block_until_ready(fn(*args))  # compile
    best = math.inf
    for _ in range(repeat):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        best = min(best, time.perf_counter() - start)
    return best


def _reference_attention(q, k, v, causal):
    import jax
    import jax.numpy as jnp
    s = jnp.einsum("bhqd,bhkd->bhqk", q.astype(jnp.float32), k.astype(jnp.float32)) / math.sqrt(q.shape[-1])
    if causal:
        lq, lk = s.shape[-2:]
        s = jnp.where(jnp.tril(jnp.ones((lq, lk), bool)), s, -jnp.inf)
    return jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(s, axis=-1), v.astype(jnp.float32)).astype(q.dtype)


def _reference_rms_norm(x, w, eps):
    import jax
    import jax.numpy as jnp
    xf = x.astype(jnp.float32)
    return (xf * jax.lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + eps)
            * w.astype(jnp.float32)).astype(x.dtype)


def kernels_vs_composite(quick):
    from torch_tpu.pallas import interpret
    with interpret.context():  # off a TPU: every trace (backward rules too) interprets
        return _kernels_vs_composite(quick)


def _kernels_vs_composite(quick):
    import jax
    import jax.numpy as jnp
    from torch_tpu import runtime
    from torch_tpu.pallas import interpret
    from torch_tpu.pallas.kernels import flash_attention as fa, rms_norm as rn
    platform = runtime.jax_device().platform
    how = "compiled by Mosaic" if not interpret.enabled() else "interpreted (Mosaic runs only on a TPU)"
    quick = quick or interpret.enabled()  # interpreted kernels: small shapes only
    key = jax.random.PRNGKey(0)
    attn_shapes = [(1, 2, 128, 64, jnp.float32)] if quick else [
        (4, 8, 1024, 128, jnp.bfloat16), (2, 8, 2048, 128, jnp.bfloat16), (4, 8, 1024, 64, jnp.float32)]
    rows = []
    for b, h, n, d, dtype in attn_shapes:
        q, k, v = (jax.random.normal(kk, (b, h, n, d), dtype) for kk in jax.random.split(key, 3))
        for causal in (True,) if quick else (False, True):
            def pallas_fwd(q, k, v, causal=causal):
                return fa.flash_attention(q, k, v, causal=causal)

            def composite_fwd(q, k, v, causal=causal):
                return _reference_attention(q, k, v, causal)

            def loss_of(f):
                return jax.jit(jax.grad(lambda q, k, v: f(q, k, v).astype(jnp.float32).sum(), argnums=(0, 1, 2)))
            pf, cf = jax.jit(pallas_fwd), jax.jit(composite_fwd)
            err = float(jnp.max(jnp.abs(pf(q, k, v).astype(jnp.float32) - cf(q, k, v).astype(jnp.float32))))
            pb, cb = loss_of(pallas_fwd), loss_of(composite_fwd)
            gerr = max(float(jnp.max(jnp.abs(a.astype(jnp.float32) - c.astype(jnp.float32))))
                       for a, c in zip(pb(q, k, v), cb(q, k, v)))
            tp, tc = _timed(pf, q, k, v), _timed(cf, q, k, v)
            tpb, tcb = _timed(pb, q, k, v), _timed(cb, q, k, v)
            rows.append([f"flash attention {b}x{h}x{n}x{d} {jnp.dtype(dtype).name}{' causal' if causal else ''}",
                         f"{tp * 1e3:.3f}", f"{tc * 1e3:.3f}", f"{tc / tp:.2f}x", f"{err:.1e}",
                         f"{tpb * 1e3:.3f}", f"{tcb * 1e3:.3f}", f"{tcb / tpb:.2f}x", f"{gerr:.1e}"])
    rms_shapes = [(256, 256, jnp.float32)] if quick else [(8192, 4096, jnp.bfloat16), (4096, 1024, jnp.float32)]
    for rows_, n, dtype in rms_shapes:
        x = jax.random.normal(key, (rows_, n), dtype)
        w = jnp.ones((n,), dtype)

        def pallas_rms(x, w):
            return rn.rms_norm(x, w, 1e-6)
        pf, cf = jax.jit(pallas_rms), jax.jit(lambda x, w: _reference_rms_norm(x, w, 1e-6))
        err = float(jnp.max(jnp.abs(pf(x, w).astype(jnp.float32) - cf(x, w).astype(jnp.float32))))
        tp, tc = _timed(pf, x, w), _timed(cf, x, w)
        rows.append([f"rms_norm {rows_}x{n} {jnp.dtype(dtype).name}", f"{tp * 1e3:.3f}", f"{tc * 1e3:.3f}",
                     f"{tc / tp:.2f}x", f"{err:.1e}", "-", "-", "-", "-"])
    head = ["kernel", "Pallas fwd ms", "XLA composite fwd ms", "speedup", "max abs diff",
            "Pallas fwd+bwd ms", "composite fwd+bwd ms", "speedup", "max grad diff"]
    return (f"Platform {platform}; Pallas kernels {how}.  Best of 3, after a compile.\n\n"
            + _table(head, rows))


# ---- 4. lowering check -------------------------------------------------------------

def lowering_check(quick):
    from torch_tpu.lowering_check import DEFAULT_CHIPS, Report as CheckReport, kernels, lower_jax
    cases = kernels.representative_cases()
    chips = ("v5e",) if quick else DEFAULT_CHIPS
    graphs = [g for c in (cases[:1] + cases[-1:] if quick else cases)
              for g in lower_jax(c.fn, *c.specs, chips=chips, name=c.name).graphs]
    report = CheckReport(chips, graphs)
    verdict = "all lowered" if report.ok else "**some failed**"
    return f"Built-in kernels, representative cases: {verdict}.\n\n" + report.markdown()


# ---- 5. overhead ---------------------------------------------------------------------

def overhead(quick, timeout):
    script = os.path.join(HERE, "overhead.py")
    if os.path.exists(script):
        # quick: no compiled variants (a cold compile cache makes them take minutes)
        args = ["--rounds", "1", "--steps", "2", "--chains", "2", "--warmup", "1",
                "--variants", "cpu-eager", "jax-jit", "tpu-strict", "tpu-fused"] if quick else \
               ["--rounds", "3", "--steps", "10", "--chains", "10"]
        cmd = [sys.executable, script, *args]
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                              env=dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")))
        if proc.returncode != 0:
            raise RuntimeError(f"benchmarks/overhead.py exited {proc.returncode}: {proc.stderr[-1500:]}")
        return f"`python benchmarks/overhead.py {' '.join(args)}`\n\n```\n{proc.stdout.strip()}\n```"
    return inline_chain(20 if quick else 200)


def inline_chain(calls):
    """benchmarks/overhead.py's chain, when that script is absent: 200 small
    ops then one read, CPU time per op against PyTorch CPU eager."""
    rows = []
    base = None
    for variant in ("cpu-eager", "tpu-strict", "tpu-fused"):
        device = "tpu" if variant.startswith("tpu") else "cpu"
        z0, y = torch.randn(64, 64).to(device), torch.randn(64, 64).to(device)
        mode = variant.split("-")[1] if device == "tpu" else "strict"

        def chain():
            z = z0
            for _ in range(100):
                z = z * 1.0001 + y
            return z.cpu()
        with torch.tpu.set_eager_mode(mode):
            chain()
            start = time.process_time()
            for _ in range(max(1, calls // 10)):
                chain()
            per_op = (time.process_time() - start) / (max(1, calls // 10) * 200)
        base = base or per_op
        rows.append([variant, f"{per_op * 1e6:.1f}", f"{per_op / base:.1f}x"])
    return "benchmarks/overhead.py is absent: inline 200-op chain.\n\n" + _table(
        ["variant", "CPU µs/op", "vs CPU eager"], rows)


# ---- 6. training steps ---------------------------------------------------------------

def training_steps(configs, steps, warmup, variants, deadline):
    import models
    import training
    rows, skipped = [], []
    for config in configs:
        runs = [(v, lambda v=v: training.run(config, v, steps, warmup).seconds) for v in variants]
        runs.append(("pytorch-cpu", lambda: training.run(config, "cpu-eager", steps, warmup).seconds))
        if torch.cuda.is_available():
            runs.append(("pytorch-cuda", lambda: _cuda_step(config, steps, warmup, compiled=False)))
            runs.append(("pytorch-cuda-inductor", lambda: _cuda_step(config, steps, warmup, compiled=True)))
        results = {}
        for variant, run in runs:
            if time.perf_counter() > deadline:
                skipped.append(f"{config} {variant}")
                continue
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                results[variant] = run()
        flops = models.GPT(models.GPT_CONFIGS[config]).flops_per_step()
        base = results.get("pytorch-cpu")
        for variant, seconds in results.items():
            rows.append([config, variant, f"{seconds * 1e3:.1f}", f"{flops / seconds / 1e12:.3g}",
                         f"{base / seconds:.2f}x" if base else "-"])
    if skipped:
        rows.append(["(time budget)", "skipped: " + ", ".join(skipped), "-", "-", "-"])
    note = "" if torch.cuda.is_available() else "PyTorch has no CUDA device here: no same-accelerator baseline.\n\n"
    return (note + f"Median ms per AdamW step ({steps} steps after {warmup} warm-up), one `.item()` per step.\n\n"
            + _table(["model", "variant", "ms/step", "TFLOP/s", "vs PyTorch CPU"], rows))


def _cuda_step(config, steps, warmup, compiled):
    import training
    model, batch = training.build(config)
    model = model.to("cuda")
    batch = tuple(b.to("cuda") for b in batch)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    step = training.make_step(model, opt, batch)
    torch._dynamo.reset()
    if compiled:
        step = torch.compile(step)
    return training.time_steps(step, steps, warmup)[0]


# ---- main -----------------------------------------------------------------------------

def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("--quick", action="store_true", help="the reduced form: small shapes, a micro model")
    parser.add_argument("--budget", type=float, default=None, help="seconds for all sections (290; quick: 120)")
    parser.add_argument("--out", default=None, help="the markdown report (accelerator-check-<platform>.md)")
    parser.add_argument("--skip", nargs="*", default=[], choices=SECTIONS, help="sections to leave out")
    args = parser.parse_args(argv)
    from torch_tpu import runtime
    import models
    platform = runtime.jax_device().platform
    budget = args.budget if args.budget is not None else (120 if args.quick else 290)
    out = args.out or f"accelerator-check-{platform}{'-quick' if args.quick else ''}.md"
    report = Report(budget)
    if args.quick:
        models.GPT_CONFIGS.setdefault("micro", models.GPTConfig(layers=1, d_model=32, heads=2, seq=16,
                                                                vocab=64, batch=2))
    q = args.quick
    plan = {
        "env": ("Environment and self-test", environment, ()),
        "tests": ("Test slice", test_slice, (QUICK_TEST_SLICE if q else TEST_SLICE, 30 if q else 100)),
        "kernels": ("Pallas kernels against the XLA composite", kernels_vs_composite, (q,)),
        "lowering": ("TPU lowering check", lowering_check, (q,)),
        "overhead": ("Host overhead", overhead, (q, 45 if q else 90)),
        # quick: the eager modes only (compiling a step takes the longest on a busy CPU)
        "training": ("Training steps", training_steps,
                     (["micro"] if q else ["tiny", "small"], 2 if q else 10, 1 if q else 3,
                      ["tpu-strict", "tpu-fused"] if q else ["tpu-debug", "tpu-strict", "tpu-fused", "tpu-compiled"],
                      report.deadline - 5)),
    }
    for name, (title, fn, fn_args) in plan.items():
        if name not in args.skip:
            report.section(title, fn, *fn_args, need=5 if name in ("env", "lowering") else 10)
    header = (f"# Accelerator check: {torch.tpu.get_device_name()} ({platform})\n\n"
              f"`python benchmarks/accelerator_check.py{' --quick' if args.quick else ''}` on "
              f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; torch {torch.__version__}, "
              f"jax {__import__('jax').__version__}, torch_tpu {torch_tpu.__version__}.\n")
    text = report.markdown(header)
    with open(out, "w") as f:
        f.write(text)
    print(f"wrote {out}")
    failed = [t for t, _, body in report.sections if "**failed**" in body or "**some failed**" in body]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
