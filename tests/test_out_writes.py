"""out= calls whose result has out's shape and dtype are cached with out as a
leaf of their signature: one program computes the op and writes its result
into out's buffer, entered from C++ like an in-place op (Kernel._written_out;
DDP's reducer copies every gradient into its bucket this way).  Each case
runs three times -- its first call, then cached ones -- against the CPU, with
the native helper and without it (TORCH_TPU_NATIVE=0)."""
import json
import os
import subprocess
import sys

import pytest
import torch

from helpers import strict  # noqa: F401  (no CPU fallback)

CASES = r"""
import warnings, torch, torch_tpu

def run(d):
    torch.manual_seed(0)
    g = [torch.randn(8, 12), torch.randn(12), torch.randn(5, 5)]
    g = [t.to(d) for t in g]
    out = {}
    # DDP's bucket: each gradient written into its own view of one flat buffer, times 1 / world
    bucket = torch.zeros(256, device=d)
    for _ in range(3):
        at = 7
        for t in g:
            torch.mul(t, 0.5, out=bucket[at:at + t.numel()].view(t.shape))
            at += t.numel() + 3
    out["bucket"] = bucket
    x = torch.arange(12.0, device=d).view(3, 4)
    whole, into_self = torch.empty(3, 4, device=d), x.clone()
    base = torch.zeros(3, 8, device=d)
    t_base = torch.zeros(4, 3, device=d)
    for _ in range(3):
        torch.add(x, x, out=whole)
        torch.mul(into_self, 2, out=into_self)  # out is an input: written where it is read
        torch.sub(x, 1.5, out=base[:, ::2])  # a strided view
        torch.mul(x, 3, out=t_base.t())  # a transposed one
    out.update(whole=whole, into_self=into_self, base=base, t_base=t_base)
    alpha, big_alpha = torch.empty(3, 4, device=d), torch.empty(6, dtype=torch.long, device=d)
    for _ in range(3):
        torch.add(x, x, alpha=2, out=alpha)  # a checked scalar passed: not the written-out path
        torch.sub(x, x.flip(0), out=whole)
    out.update(alpha=alpha, whole_again=whole)
    ints = torch.arange(6, device=d)
    as_float = torch.empty(6, device=d)
    as_double = torch.empty(6, dtype=torch.float64, device=d)
    half = torch.empty(6, dtype=torch.float16, device=d)
    for _ in range(3):
        torch.mul(ints, 0.25, out=as_float)  # int * float: float32, out's dtype
        torch.mul(ints, 0.25, out=as_double)  # ... cast into float64
        torch.mul(ints.half(), 0.5, out=half)
    out.update(as_float=as_float, as_double=as_double, half=half)
    zero_d, empty = torch.empty((), device=d), torch.empty(0, 3, device=d)
    for _ in range(3):
        torch.mul(torch.tensor(3.0, device=d), 2, out=zero_d)
        torch.mul(torch.ones(0, 3, device=d), 2, out=empty)
    out.update(zero_d=zero_d, empty=empty)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        resized = torch.empty(0, device=d)
        wrong = torch.empty(5, device=d)
        for _ in range(3):
            torch.mul(x, 2, out=resized)
            torch.mul(x, 2, out=wrong)
    out.update(resized=resized, wrong=wrong)
    errors = []
    for bad in (lambda: torch.mul(torch.ones(3, device=d), 0.5, out=torch.empty(3, dtype=torch.long, device=d)),
                lambda: torch.mul(x[0], 2, out=torch.empty(1, 4, device=d).expand(2, 4)),
                lambda: torch.add(x.view(12)[:-1], 1, out=x.view(12)[1:]),
                lambda: torch.add(ints, ints, alpha=2.5, out=big_alpha)):
        for _ in range(2):
            try:
                bad()
                errors.append(None)
            except RuntimeError as e:
                errors.append(type(e).__name__ + ": " + str(e).splitlines()[0][:60])
    return {k: (str(v.dtype), list(v.shape), v.cpu().tolist()) for k, v in out.items()}, errors

import json, sys
modes = {}
for mode in ("strict", "fused", "debug"):
    with torch.tpu.set_eager_mode(mode):
        modes[mode] = run("tpu")
print(json.dumps({"cpu": run("cpu"), **modes}))
"""


def _cases(native_flag):
    env = dict(os.environ, TORCH_TPU_NATIVE=native_flag)
    done = subprocess.run([sys.executable, "-c", CASES], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("native_flag", ["1", "0"])
def test_out_written_in_the_ops_program_gives_the_cpus_results(native_flag):
    runs = _cases(native_flag)
    cpu = runs.pop("cpu")
    assert all(e is not None for e in cpu[1])
    for mode, got in runs.items():
        assert got == cpu, mode


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_cached_out_call_into_a_view_is_entered_in_cpp(mode):
    """A cached mul.out into a bucket's view runs (strict) or is recorded
    (fused: the op the recording predicts) without Kernel.__call__."""
    from torch_tpu import native
    from torch_tpu.ops import registry
    if not native.status().startswith("C++"):
        pytest.skip(native.status())
    bucket = torch.zeros(300, device="tpu")
    grads = [torch.randn(8, 12).to("tpu"), torch.randn(12).to("tpu")]
    views = [bucket[5:101].view(8, 12), bucket[150:162]]
    setting = torch.tpu.set_eager_mode(mode)
    for _ in range(3):
        for g, v in zip(grads, views):
            torch.mul(g, 0.5, out=v)
        torch.tpu.synchronize()
    frames = []

    def profile(frame, event, arg):
        if event == "call" and frame.f_code.co_filename == registry.__file__:
            frames.append(frame.f_code.co_name)
    sys.setprofile(profile)
    try:
        for g, v in zip(grads, views):
            torch.mul(g, 0.5, out=v)
    finally:
        sys.setprofile(None)
        torch.tpu.synchronize()
        setting.__exit__()
    assert frames == []
    want = torch.zeros(300)
    want[5:101], want[150:162] = grads[0].cpu().flatten() * 0.5, grads[1].cpu() * 0.5
    assert torch.equal(bucket.cpu(), want)
