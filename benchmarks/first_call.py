"""The first call of an op with a new input shape: what an eager program with
changing shapes (and a test suite) pays per op, against a bare ``jax.jit`` of
the equivalent jnp function compiled for the same kind of fresh shape, in the
same process under the same XLA flags.

Each op runs on ``--shapes`` shapes this process has never seen (tpu and jax
each get their own), timed from the call to the end of
``torch.tpu.synchronize()`` (resp. ``block_until_ready``): wall and CPU time
(``time.process_time``: all threads, so XLA's compile threads count; wall time
is noisy on a loaded machine) and the XLA executables built.

The run happens in a child process with a fresh, empty persistent
compilation cache (``TORCH_TPU_CACHE_DIR``), so neither side finds anything on
disk.  ``--warm-cache`` also runs a second child on the cache the first one
left, as a user's second run of the same program would (the same shapes each
run): with ``TORCH_TPU_CACHE_MIN_COMPILE_SECS`` at its default (0.2 s of wall
time) only slow compiles are written, so most small ops compile again, and
which ones cross the threshold depends on the machine's load;
``--cache-min-secs 0`` writes every executable (both sides, as the setting is
process-wide) and shows what loading one costs.

Small exact programs compile with cheaper XLA:CPU options
(``runtime.FAST_COMPILE_OPTIONS``); the "jax.jit +options" column is the
bare ``jax.jit`` given the same options by the same rule
(``runtime.compile_options``), so both comparisons stay honest.
``--fast-compile both`` runs a first child with them off
(``TORCH_TPU_FAST_COMPILE=0``: before) and one with them on (after);
``--fast-compile emitters`` a first child without the level-0 tier for tiny
programs (``runtime.TINY_COMPILE_OPTIONS``), which only shapes of at most
``runtime.TINY_COMPILE_MAX_ELEMENTS`` elements get: ``--rows 20 --cols 8``.

    python benchmarks/first_call.py [--shapes 5] [--modes strict,fused,debug] [--warm-cache [--cache-min-secs 0]]
                                    [--fast-compile on|off|both|emitters] [--rows 1000 --cols 24]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def ops(cols=24):
    """name -> (make inputs on the CPU for shape (n, cols), torch function, jnp function).
    The jnp function is what a user would jit for the same result."""
    import jax.numpy as jnp
    import torch

    def two(n):
        return torch.randn(n, cols), torch.randn(n, cols)

    def index_inputs(n):
        return torch.randn(n, cols), torch.randint(0, n, (n // 2,))

    return {
        "add": (two, lambda a, b: a + b, lambda a, b: a + b),
        "sin": (two, lambda a, b: torch.sin(a), lambda a, b: jnp.sin(a)),
        "sum(dim=1)": (two, lambda a, b: a.sum(1), lambda a, b: a.sum(1)),
        "abs().max()": (two, lambda a, b: a.abs().max(), lambda a, b: jnp.abs(a).max()),
        "cumsum(0)": (two, lambda a, b: a.cumsum(0), lambda a, b: jnp.cumsum(a, 0)),
        "index (tensor)": (index_inputs, lambda a, i: a[i], lambda a, i: a[i]),
        "t().contiguous()": (two, lambda a, b: a.t().contiguous(), lambda a, b: a.T),
        "mm": (two, lambda a, b: a @ b.t(), lambda a, b: a @ b.T),
        "zeros": (two, lambda a, b: torch.zeros(a.shape[0], 5, device=a.device),
                  lambda a, b: jnp.zeros((a.shape[0], 5), jnp.float32)),
        # reading a view back: jax compiles the slice, then copies to the host
        "view .cpu()": (two, lambda a, b: a[1:, ::2].cpu(), lambda a, b: a[1:, ::2]),
    }


class _Shapes:
    """Row counts never used before in this process (each child starts at the
    same number, so a second run sees the same shapes as the first)."""

    def __init__(self, start=1000):
        self.n = start

    def fresh(self):
        self.n += 1
        return self.n


def measure(k, modes, names=None, rows=1000, cols=24):
    """{op: {side: {"wall": [s], "cpu": [s], "compiles": [n]}}} for ``k`` fresh shapes
    (``rows`` + 1, + 2, ... by ``cols``) each."""
    import jax
    import torch
    import torch_tpu  # noqa: F401
    from torch_tpu import profiler, runtime

    table = ops(cols)
    shapes = _Shapes(rows)
    warm = torch.ones(3, device="tpu")
    (warm + warm).cpu()  # start the platform and the op table outside the timings
    results = {}
    for name, (make, torch_fn, jnp_fn) in table.items():
        if names and name not in names:
            continue
        row = results[name] = {}
        for _ in range(k):
            for side in ["jax.jit", "jax.jit +options"] + [f"tpu {m}" for m in modes]:
                inputs = make(shapes.fresh())
                if side.startswith("jax.jit"):
                    args = [jax.device_put(x.numpy()) for x in inputs]
                    jax.block_until_ready(args)
                    # the options torch_tpu would give this program (none: plain jit)
                    options = runtime.compile_options(jax.make_jaxpr(jnp_fn)(*args)) if "+" in side else None
                    fn = jax.jit(jnp_fn, compiler_options=options)

                    def call():
                        jax.block_until_ready(fn(*args))
                else:
                    mode = side.split()[1]
                    with torch.tpu.set_eager_mode(mode):
                        args = [x.to("tpu") for x in inputs]
                        if name == "index (tensor)":  # an index computed on the device: no host copy of it
                            args[1] = args[1] + 0
                    torch.tpu.synchronize()

                    def call():
                        with torch.tpu.set_eager_mode(mode):
                            out = torch_fn(*args)  # kept alive: fused mode drops dead results
                            torch.tpu.synchronize()
                        return out
                c0, w0, p0 = profiler.xla_compiles(), time.perf_counter(), time.process_time()
                call()
                cell = row.setdefault(side, {"wall": [], "cpu": [], "compiles": []})
                cell["wall"].append(time.perf_counter() - w0)
                cell["cpu"].append(time.process_time() - p0)
                cell["compiles"].append(profiler.xla_compiles() - c0)
    return results


def render(results, title):
    sides = list(next(iter(results.values())))
    bases = [b for b in ("jax.jit", "jax.jit +options") if b in sides]
    pairs = [(s, b) for b in bases for s in sides if s not in bases or (b == "jax.jit" and s != b)]
    lines = [f"### {title}", "",
             "median ms per first call (CPU time / wall time), XLA executables built; ratio: CPU time", "",
             "| op | " + " | ".join(sides) + " | " + " | ".join(f"{s} / {b}" for s, b in pairs) + " |",
             "|" + "---|" * (1 + len(sides) + len(pairs))]
    totals = {s: 0.0 for s in sides}
    for name, row in results.items():
        cells = []
        med = {s: statistics.median(row[s]["cpu"]) for s in sides}
        for s in sides:
            totals[s] += med[s]
            cells.append(f"{med[s] * 1e3:.0f} / {statistics.median(row[s]['wall']) * 1e3:.0f} ms, "
                         f"{max(row[s]['compiles'])} exe")
        ratios = [f"{med[s] / med[b]:.2f}x" for s, b in pairs]
        lines.append(f"| {name} | " + " | ".join(cells) + " | " + " | ".join(ratios) + " |")
    lines.append("| **all (CPU ms)** | " + " | ".join(f"{totals[s] * 1e3:.0f}" for s in sides) + " | "
                 + " | ".join(f"{totals[s] / totals[b]:.2f}x" for s, b in pairs) + " |")
    return "\n".join(lines)


_FAST_ENV = {"off": "0", "emitters": "emitters"}  # --fast-compile -> TORCH_TPU_FAST_COMPILE


def _child(shapes, modes, ops, cache_dir, min_secs=None, fast="on", rows=1000, cols=24):
    env = dict(os.environ, TORCH_TPU_CACHE_DIR=cache_dir)
    if fast in _FAST_ENV:
        env["TORCH_TPU_FAST_COMPILE"] = _FAST_ENV[fast]
    if min_secs is not None:
        env["TORCH_TPU_CACHE_MIN_COMPILE_SECS"] = str(min_secs)
    cmd = [sys.executable, os.path.abspath(__file__), "--child", "--shapes", str(shapes),
           "--modes", modes, "--rows", str(rows), "--cols", str(cols)] + (["--ops", ops] if ops else [])
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def run(shapes=5, modes="strict,fused,debug", ops="", warm_cache=False, min_secs=None, fast="on",
        rows=1000, cols=24) -> str:
    """The markdown tables: a first run on an empty persistent cache (and a
    second run on what it left, with ``warm_cache``), each in a fresh process.
    ``fast="both"``: first a run with the cheaper compile options off, on its
    own empty cache; "emitters": the cheaper emitters without the level-0 tier."""
    out = []
    shape = f"shapes ({rows}+k, {cols})"
    if fast in ("off", "both", "emitters"):
        with tempfile.TemporaryDirectory() as cache:
            before = "off" if fast != "emitters" else "emitters"
            out.append(render(_child(shapes, modes, ops, cache, min_secs, before, rows, cols),
                              f"empty persistent cache, {shape}, TORCH_TPU_FAST_COMPILE={_FAST_ENV[before]}"))
        if fast == "off":
            return out[0]
    with tempfile.TemporaryDirectory() as cache:
        out.append(render(_child(shapes, modes, ops, cache, min_secs, "on", rows, cols),
                          f"empty persistent cache (first run), {shape}"))
        if warm_cache:
            out.append(render(_child(shapes, modes, ops, cache, min_secs, "on", rows, cols),
                              "second run, same shapes, on the cache the first run wrote"))
    return "\n\n".join(out)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", type=int, default=5, help="fresh shapes per op and side")
    p.add_argument("--modes", default="strict,fused,debug", help="eager modes to time (comma-separated)")
    p.add_argument("--ops", default="", help="only these ops (comma-separated names)")
    p.add_argument("--warm-cache", action="store_true",
                   help="also time a second run on the persistent cache the first run wrote")
    p.add_argument("--cache-min-secs", type=float,
                   help="TORCH_TPU_CACHE_MIN_COMPILE_SECS for both runs (0: every executable is written)")
    p.add_argument("--fast-compile", default="on", choices=["on", "off", "both", "emitters"],
                   help="cheaper XLA:CPU options for small exact programs: on (default), off, or both "
                        "(before/after); emitters: a first run without the level-0 tier, then on")
    p.add_argument("--rows", type=int, default=1000, help="fresh shapes are (rows + 1, cols), (rows + 2, cols)...")
    p.add_argument("--cols", type=int, default=24)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    modes = [m for m in args.modes.split(",") if m]
    names = [n for n in args.ops.split(",") if n]
    if args.child:
        print(json.dumps(measure(args.shapes, modes, names, args.rows, args.cols)))
        return
    print(run(args.shapes, args.modes, args.ops, args.warm_cache, args.cache_min_secs, args.fast_compile,
              args.rows, args.cols))


if __name__ == "__main__":
    main()
