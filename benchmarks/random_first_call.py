"""Random draws on new shapes: the first-call CPU time of each random op (and
torch.testing.make_tensor, which draws on the device) on shapes this process
has never seen, against ``a + a`` on new shapes; then the steady-state
per-call CPU time of ``torch.rand(64, 64)`` and of a dropout training step.

Runs with a fresh, empty persistent compilation cache (a temporary
``TORCH_TPU_CACHE_DIR``).  CPU time is ``time.process_time`` (XLA's compile
threads count), the number to compare on a loaded machine.

    python benchmarks/random_first_call.py [--shapes 12] [--steady 300]
"""
import argparse
import os
import tempfile
import time

os.environ["TORCH_TPU_CACHE_DIR"] = tempfile.mkdtemp(prefix="tpu-cache-")

import torch  # noqa: E402
import torch_tpu  # noqa: E402,F401
from torch.testing import make_tensor  # noqa: E402


def first_calls(name, op, n):
    """Mean CPU ms of ``op(shape)`` over ``n`` new shapes (each synchronized)."""
    total = 0.0
    for i in range(n):
        shape = (n * OPS.index(name) + i + 3, 7)
        start = time.process_time()
        op(shape)
        torch.tpu.synchronize()
        total += time.process_time() - start
    return total / n * 1e3


def _dropout(shape):
    return torch.nn.functional.dropout(torch.ones(shape, device="tpu"), 0.5, training=True)


CASES = {
    "a + a": None,  # filled in main: its inputs exist before timing
    "make_tensor float32": lambda s: make_tensor(s, device="tpu", dtype=torch.float32),
    "make_tensor int64": lambda s: make_tensor(s, device="tpu", dtype=torch.int64),
    "make_tensor bool": lambda s: make_tensor(s, device="tpu", dtype=torch.bool),
    "make_tensor complex64": lambda s: make_tensor(s, device="tpu", dtype=torch.complex64),
    "torch.randn": lambda s: torch.randn(s, device="tpu"),
    "torch.rand": lambda s: torch.rand(s, device="tpu"),
    "torch.randint": lambda s: torch.randint(0, 100, s, device="tpu"),
    "torch.randperm": lambda s: torch.randperm(s[0] * s[1], device="tpu"),
    "dropout (ones + dropout)": _dropout,
}
OPS = list(CASES)


def steady(fn, n):
    for _ in range(20):
        fn()
    torch.tpu.synchronize()
    start = time.process_time()
    for _ in range(n):
        fn()
    torch.tpu.synchronize()
    return (time.process_time() - start) / n * 1e6


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--shapes", type=int, default=12)
    p.add_argument("--steady", type=int, default=300)
    a = p.parse_args()
    n = a.shapes
    make_tensor((2,), device="tpu", dtype=torch.float32)  # the process's first op and draw
    base = OPS.index("a + a") * n
    ones = {(base + i + 3, 7): torch.ones(base + i + 3, 7, device="tpu") for i in range(n)}
    torch.tpu.synchronize()
    CASES["a + a"] = lambda s: ones[s] + ones[s]
    print(f"first call on {n} new shapes, CPU ms per call:")
    for name in OPS:
        print(f"  {name:28s} {first_calls(name, CASES[name], n):8.1f}")
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Dropout(0.1), torch.nn.Linear(64, 1)).to("tpu")
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(32, 64, device="tpu")

    def step():
        opt.zero_grad()
        model(x).sum().backward()
        opt.step()
    print("steady state, CPU us per call:")
    print(f"  torch.rand(64, 64)           {steady(lambda: torch.rand(64, 64, device='tpu'), a.steady):8.1f}")
    print(f"  a + a (64, 64)               {steady(lambda: x + x, a.steady):8.1f}")
    print(f"  dropout training step        {steady(step, a.steady // 3):8.1f}")


if __name__ == "__main__":
    main()
