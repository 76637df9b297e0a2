"""Composite ops run as one program (ops/composite.py): ``torch.isclose``
(what ``assertEqual`` of two tpu tensors runs) compiles ONE executable per new
shape, not the 11-14 of the ops it is made of, and gives the decomposition's
results bit for bit.  Counted, not timed."""
import itertools

import pytest
import torch

import torch_tpu  # noqa: F401
from torch_tpu import profiler
from helpers import strict  # noqa: F401  (no CPU fallback)

_rows = itertools.count(4001)  # shapes no other test uses

_SPECIAL = [0., -0., 1., -1., float("inf"), -float("inf"), float("nan"), 1e-8, 1e-5, 1.00001, 0.99999,
            65504., 1e-38, 3.4e38, 1 + 1e-7, 1e300]

_TOLERANCES = [(1e-5, 1e-8, False), (1.3e-6, 1e-5, True), (0., 0., True), (0., 0., False), (0.1, 0., False),
               (0., 0.5, True)]


def _operands(dtype):
    g = torch.Generator().manual_seed(0)
    if dtype == torch.bool:
        return torch.randint(0, 2, (300,), generator=g).bool(), torch.randint(0, 2, (300,), generator=g).bool()
    if not (dtype.is_floating_point or dtype.is_complex):
        a = torch.randint(0, 100, (300,), generator=g)
        return a.to(dtype), (a + torch.randint(-1, 2, (300,), generator=g)).clamp(0, 100).to(dtype)
    scale = torch.tensor([1e-8, 1e-3, 1., 1e3, 1e8], dtype=torch.float64).repeat(200)
    base = torch.randn(1000, dtype=torch.float64, generator=g) * scale
    s = torch.tensor(_SPECIAL * 4, dtype=torch.float64)
    a = torch.cat([base, s, s])
    b = torch.cat([base * (1 + torch.randn(1000, dtype=torch.float64, generator=g) * 1e-5), s, s.roll(1)])
    b[::7] = a[::7] + 1e-8
    if dtype.is_complex:
        a, b = torch.complex(a, a.roll(3)), torch.complex(b, b.roll(5))
    return a.to(dtype), b.to(dtype)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int64,
                                   torch.uint8, torch.bool, torch.complex64], ids=str)
def test_isclose_is_the_cpu_decomposition_bit_for_bit(dtype):
    a, b = _operands(dtype)
    for rtol, atol, equal_nan in _TOLERANCES:
        want = torch.isclose(a, b, rtol, atol, equal_nan)
        got = torch.isclose(a.to("tpu"), b.to("tpu"), rtol, atol, equal_nan)
        assert torch.equal(got.cpu(), want), (rtol, atol, equal_nan)
        # broadcast, 0-d operands
        got = torch.isclose(a[:10].view(10, 1).to("tpu"), b[:3].to("tpu"), rtol, atol, equal_nan)
        assert torch.equal(got.cpu(), torch.isclose(a[:10].view(10, 1), b[:3], rtol, atol, equal_nan))
        got = torch.isclose(a[3].to("tpu"), b[4].to("tpu"), rtol, atol, equal_nan)
        assert torch.equal(got.cpu(), torch.isclose(a[3], b[4], rtol, atol, equal_nan))


def test_isclose_with_int_operands_follows_the_default_dtype():
    a, b = torch.tensor([16777217, 3]), torch.tensor([16777216, 4])
    for default in (torch.float32, torch.float64):
        with _default_dtype(default):
            want = torch.isclose(a, b, rtol=0, atol=0.5)
            assert torch.equal(torch.isclose(a.to("tpu"), b.to("tpu"), rtol=0, atol=0.5).cpu(), want)


class _default_dtype:
    def __init__(self, dtype):
        self.dtype = dtype

    def __enter__(self):
        self.saved = torch.get_default_dtype()
        torch.set_default_dtype(self.dtype)

    def __exit__(self, *exc):
        torch.set_default_dtype(self.saved)


def test_isclose_compiles_one_program_per_new_shape():
    x = torch.randn(next(_rows), 3, dtype=torch.float64).to("tpu")
    y = x.clone()
    torch.tpu.synchronize()
    before = profiler.xla_compiles()
    close = torch.isclose(x, y, rtol=1e-7, atol=1e-7, equal_nan=True)
    assert profiler.xla_compiles() - before == 1
    before = profiler.xla_compiles()
    torch.isclose(x, y * 1, rtol=1e-7, atol=1e-7, equal_nan=True)  # the same signature: nothing new
    assert profiler.xla_compiles() - before == 1  # (only the product's own program)
    assert bool(close.all())


def test_isclose_refuses_what_the_cpu_refuses():
    x = torch.ones(2, device="tpu")
    with pytest.raises(RuntimeError, match="did not match"):
        torch.isclose(x, x.double())
    with pytest.raises(RuntimeError, match="rtol must be greater than or equal to zero"):
        torch.isclose(x, x, rtol=-1)
    with pytest.raises(RuntimeError, match="atol must be greater than or equal to zero"):
        torch.isclose(x, x, atol=-1)


def test_isclose_of_a_tensor_that_requires_grad():
    w = torch.ones(3, device="tpu", requires_grad=True)
    close = torch.isclose(w, w.detach())
    assert not close.requires_grad and bool(close.all())
    assert torch.allclose(w, w.detach() + 1e-9)
