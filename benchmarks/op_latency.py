"""Per-op dispatch latency of small ops: tpu (strict eager) against PyTorch CPU
eager and a bare cached ``jax.jit`` call, in one run, as microseconds and ratios.

    python benchmarks/op_latency.py
"""
import os
import sys

import jax
import jax.numpy as jnp
import torch

import torch_tpu  # noqa: F401

sys.path.insert(0, os.path.dirname(__file__))
from common import best_time, table  # noqa: E402

OPS = {
    "add 64x64": (lambda a, b: a + b, lambda a, b: a + b),
    "mul 64x64": (lambda a, b: a * b, lambda a, b: a * b),
    "matmul 64x64": (lambda a, b: a @ b, lambda a, b: a @ b),
    "sum 64x64": (lambda a, b: a.sum(), lambda a, b: a.sum()),
}


def main():
    a, b = torch.randn(64, 64), torch.randn(64, 64)
    ta, tb = a.to("tpu"), b.to("tpu")
    ja, jb = jnp.asarray(a.numpy()), jnp.asarray(b.numpy())
    rows = []
    for name, (torch_fn, jax_fn) in OPS.items():
        jitted = jax.jit(jax_fn)
        cpu = best_time(lambda: torch_fn(a, b))
        tpu = best_time(lambda: torch_fn(ta, tb), sync=torch.tpu.synchronize)
        raw = best_time(lambda: jitted(ja, jb), sync=lambda: jitted(ja, jb).block_until_ready())
        rows.append([name, f"{cpu * 1e6:.1f}", f"{raw * 1e6:.1f}", f"{tpu * 1e6:.1f}",
                     f"{tpu / cpu:.1f}x", f"{tpu / raw:.2f}x"])
    print(f"platform: {torch.tpu.get_device_name()}, eager mode: {torch.tpu.eager_mode.value}")
    print(table(rows, ["op", "torch CPU µs", "jax.jit µs", "tpu µs", "tpu/CPU", "tpu/jax.jit"]))


if __name__ == "__main__":
    main()
