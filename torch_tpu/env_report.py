"""``python -m torch_tpu``: what backs the tpu device here, in the spirit of
``python -m torch.utils.collect_env``.  Paste its output into bug reports.

Exits 1 with a one-line reason when the device cannot start (for example
``TORCH_TPU_PLATFORM=gpu`` on a machine without a GPU).
"""
import argparse
import importlib.metadata
import json
import os
import platform
import sys
import time
import warnings

from . import install_hints


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _size(path: str):
    files, total = 0, 0
    for root, _, names in os.walk(path):
        for name in names:
            try:
                total += os.path.getsize(os.path.join(root, name))
                files += 1
            except OSError:
                pass
    return files, total


def _mb(n) -> str:
    return f"{n / 2**20:,.1f} MiB" if n < 2**30 else f"{n / 2**30:,.2f} GiB"


# the release pyproject skips: every ``import torch`` pays its import through the autoload
_SLOW_ML_DTYPES = "0.7.0"


def _ml_dtypes_version() -> str:
    v = _version("ml_dtypes")
    if v == _SLOW_ML_DTYPES:
        return f"{v} (takes ~0.6 s to import, in every `import torch`: pip install 'ml_dtypes!={v}')"
    return v


def versions() -> dict:
    import torch
    import torch_tpu
    return {
        "torch_tpu": f"{torch_tpu.__version__} ({os.path.dirname(torch_tpu.__file__)})",
        "torch": torch.__version__,
        "jax": _version("jax"),
        "jaxlib": _version("jaxlib"),
        "libtpu": _version("libtpu"),
        "ml_dtypes": _ml_dtypes_version(),
        "python": sys.version.split()[0],
        "os": platform.platform(),
    }


def device_info() -> dict:
    """Starts the device (RuntimeError if it cannot)."""
    import jax
    import torch
    from . import runtime
    d = runtime.jax_device()
    free, total = torch.tpu.mem_get_info()
    try:
        stats = d.memory_stats() or {}
    except Exception:
        stats = {}
    same = jax.devices(d.platform)
    info = {
        "requested platform": os.environ.get("TORCH_TPU_PLATFORM") or "(auto: tpu if libtpu, else cpu)",
        "PJRT platform": f"{d.platform} ({getattr(d.client, 'platform_version', '?')})",
        "tpu:0": f"{torch.tpu.get_device_name()} = jax device {d} (kind {d.device_kind!r}, id {d.id})",
        "devices on platform": f"{len(same)}: " + ", ".join(str(x) for x in same[:8])
                               + (" ..." if len(same) > 8 else ""),
        "device memory": f"{_mb(free)} free of {_mb(total)}"
                         + ("" if stats.get("bytes_limit") else " (host RAM: the platform reports no limit)"),
        "tpu tensors allocated": _mb(torch.tpu.memory_allocated()),
    }
    advice = install_hints.hint(d.platform)
    if advice:
        info["install hint"] = advice
    return info


def settings() -> dict:
    import torch
    from . import native, runtime
    cache = runtime.cache_dir()
    if cache and os.path.isdir(cache):
        files, total = _size(cache)
        cache_text = f"{cache} ({files} files, {_mb(total)})"
    else:
        cache_text = f"{cache} (empty)" if cache else "off (TORCH_TPU_CACHE_DIR='')"
    env = {k: v for k, v in sorted(os.environ.items())
           if k.startswith(("TORCH_TPU_", "TPU_", "JAX_", "XLA_")) or k in ("PJRT_DEVICE",)}
    return {
        "eager mode": torch.tpu.eager_mode.value,
        "compilation cache": cache_text,
        "native helper": native.status(),
        "environment": ", ".join(f"{k}={v}" for k, v in env.items()) or "(no TORCH_TPU_*/JAX_*/XLA_* set)",
    }


def self_test() -> dict:
    """A few common ops and one training step on tpu; which ops fell back."""
    import torch
    import torch_tpu
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # fallbacks are reported below instead
        x = torch.randn(4, 8, device="tpu")
        checks = [
            x @ x.T, torch.softmax(x, -1), x.cumsum(0), x.topk(3).values, x[x > 0],
            torch.nn.functional.embedding(torch.tensor([1, 3], device="tpu"), x),
        ]
        for c in checks:
            c.cpu()
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2)).to("tpu")
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        target = torch.tensor([0, 1, 1, 0], device="tpu")
        losses = []
        for _ in range(2):
            loss = torch.nn.functional.cross_entropy(model(x), target)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
    fell_back = torch_tpu.fallback_ops()
    return {
        "ops and a training step": f"ok in {time.perf_counter() - start:.2f}s "
                                   f"(loss {losses[0]:.3f} -> {losses[-1]:.3f})",
        "CPU fallbacks": ", ".join(f"{k} x{v}" for k, v in sorted(fell_back.items()))
                         or "none (every op ran on the device)",
    }


def report(run_self_test: bool = True) -> dict:
    sections = {"Versions": versions()}
    sections["Device"] = device_info()
    sections["Settings"] = settings()
    if run_self_test:
        sections["Self-test"] = self_test()
    return sections


def format_report(sections: dict) -> str:
    width = max(len(k) for s in sections.values() for k in s)
    lines = ["torch_tpu environment report", ""]
    for title, items in sections.items():
        lines.append(f"{title}:")
        lines += [f"  {k.ljust(width)} : {v}" for k, v in items.items()]
        lines.append("")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m torch_tpu", description=__doc__.split("\n\n")[0])
    parser.add_argument("--no-self-test", action="store_true", help="skip the ops and training-step check")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(argv)
    try:
        sections = report(run_self_test=not args.no_self_test)
    except RuntimeError as e:
        from . import runtime
        print(f"torch_tpu: the tpu device cannot start: {e}", file=sys.stderr)
        advice = install_hints.hint(runtime.platform_name())
        if advice:
            print(f"  {advice}", file=sys.stderr)
        print("  check TORCH_TPU_PLATFORM (tpu, gpu or cpu) and that the matching extra is installed "
              '(pip install "torch_tpu[tpu]", "torch_tpu[cuda12]" or "torch_tpu[cuda13]"); '
              "`python -m torch_tpu` with it unset uses the CPU.", file=sys.stderr)
        return 1
    print(json.dumps(sections, indent=2) if args.json else format_report(sections))
    return 0
