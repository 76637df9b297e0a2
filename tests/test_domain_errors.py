"""Argument values PyTorch's CPU kernels refuse while computing (an integer
division by zero, a probability outside [0, 1], a negative std, an invalid
multinomial distribution, a sorter index out of range) raise the CPU's
exception and message on tpu too, never a value: at the op in debug mode and
for host numbers, at the next host wait for device values otherwise."""
import re

import pytest
import torch
import torch.nn.functional as F

import torch_tpu  # noqa: F401
from helpers import strict  # noqa: F401  (no CPU fallback)

MODES = ["strict", "fused", "debug"]
NAN, INF = float("nan"), float("inf")


def _t(values, device, dtype=None):
    return torch.tensor(values, device=device, dtype=dtype)


# (name, fn(device)) whose CPU call raises
BAD = [
    ("floor_divide", lambda d: _t([1, 2], d) // _t([0, 1], d)),
    ("floor_divide scalar", lambda d: _t([1, 2], d) // 0),
    ("floor_divide False", lambda d: _t([1], d) // False),
    ("floor_divide bool by int", lambda d: _t([True], d) // _t([0], d)),
    ("floor_divide_ in place", lambda d: _t([1, 2], d).floor_divide_(_t([1, 0], d))),
    ("div trunc int8", lambda d: torch.div(_t([1, 2], d, torch.int8), _t([0, 1], d, torch.int8), rounding_mode="trunc")),
    ("div floor scalar", lambda d: torch.div(_t([1, 2], d), 0, rounding_mode="floor")),
    ("remainder", lambda d: _t([1, 2], d) % _t([0, 1], d)),
    ("remainder uint8 scalar", lambda d: _t([3], d, torch.uint8) % 0),
    ("remainder Scalar_Tensor", lambda d: torch.remainder(3, _t([0, 1], d))),
    ("remainder CPU scalar tensor", lambda d: _t([1, 2], d) % torch.tensor(0)),
    ("fmod", lambda d: torch.fmod(_t([1, 2], d), _t([0, 1], d))),
    ("fmod scalar", lambda d: torch.fmod(_t([1, 2], d), 0)),
    ("floor_divide bool", lambda d: _t([True, True], d) // _t([False, True], d)),
    ("remainder bool", lambda d: _t([True], d) % _t([False], d)),
    ("div trunc bool", lambda d: torch.div(_t([True], d), _t([True], d), rounding_mode="trunc")),
    ("bce input above 1", lambda d: F.binary_cross_entropy(_t([1.5, 0.2], d), _t([1., 0.], d))),
    ("bce input NaN", lambda d: F.binary_cross_entropy(_t([NAN, 0.2], d), _t([1., 0.], d))),
    ("bce target first", lambda d: F.binary_cross_entropy(_t([0.5, 2.0], d), _t([-1., 0.], d))),
    ("bce target", lambda d: F.binary_cross_entropy(_t([0.5, 0.2], d), _t([2., 0.], d))),
    ("multinomial negative", lambda d: torch.multinomial(_t([-1., 2.], d), 1)),
    ("multinomial NaN", lambda d: torch.multinomial(_t([NAN, 1.], d), 1)),
    ("multinomial inf", lambda d: torch.multinomial(_t([INF, 2.], d), 1)),
    ("multinomial zero row", lambda d: torch.multinomial(_t([[1., 1.], [0., 0.]], d), 1)),
    ("multinomial replacement negative", lambda d: torch.multinomial(_t([-1., 2.], d), 3, replacement=True)),
    ("multinomial replacement inf", lambda d: torch.multinomial(_t([INF, 2.], d), 3, replacement=True)),
    ("multinomial replacement NaN", lambda d: torch.multinomial(_t([NAN, 2.], d), 3, replacement=True)),
    ("multinomial replacement rows in order",
     lambda d: torch.multinomial(_t([[0., 0.], [-1., 1.]], d), 2, replacement=True)),
    ("multinomial too many", lambda d: torch.multinomial(_t([1., 2.], d), 3)),
    ("multinomial no samples", lambda d: torch.multinomial(_t([1., 2.], d), 0)),
    ("multinomial integer", lambda d: torch.multinomial(_t([1, 2], d), 1)),
    ("multinomial 3-d", lambda d: torch.multinomial(torch.ones(1, 1, 2, device=d), 1)),
    ("bernoulli above 1", lambda d: torch.bernoulli(_t([1.5, 0.2], d))),
    ("bernoulli NaN", lambda d: torch.bernoulli(_t([NAN, 0.2], d))),
    ("bernoulli_ tensor p", lambda d: torch.zeros(2, device=d).bernoulli_(_t([-0.5, 0.2], d))),
    ("bernoulli_ float p", lambda d: torch.zeros(2, device=d).bernoulli_(1.5)),
    ("bernoulli p=-0.1", lambda d: torch.bernoulli(torch.zeros(2, device=d), p=-0.1)),
    ("normal std negative", lambda d: torch.normal(torch.zeros(2, device=d), _t([1., -1.], d))),
    ("normal std NaN", lambda d: torch.normal(0.0, _t([NAN, 1.], d))),
    ("searchsorted sorter too big",
     lambda d: torch.searchsorted(_t([1., 2.], d), _t([1.5], d), sorter=_t([0, 5], d))),
    ("searchsorted sorter negative",
     lambda d: torch.searchsorted(_t([1., 2.], d), _t([1.5], d), sorter=_t([-1, 0], d))),
    ("empty negative size", lambda d: torch.empty(2, -1, device=d)),
]

# the same ops on valid values: no error, and the CPU's result where it is deterministic
GOOD = [
    ("floor_divide", lambda d: _t([7, -7], d) // _t([2, 3], d)),
    ("floor_divide float by zero", lambda d: _t([1, 2], d) // _t([0., 1.], d)),
    ("int true division by zero", lambda d: torch.div(_t([1, 2], d), _t([0, 1], d))),
    ("remainder", lambda d: _t([7, -7], d) % _t([2, 3], d)),
    ("fmod", lambda d: torch.fmod(_t([7, -7], d), 3)),
    ("empty floor_divide by zero", lambda d: torch.zeros(0, 2, dtype=torch.long, device=d) // torch.zeros(2, dtype=torch.long, device=d)),
    ("bce edges", lambda d: F.binary_cross_entropy(_t([0., 1., 0.5], d), _t([0., 1., 1.], d))),
    ("searchsorted sorter", lambda d: torch.searchsorted(_t([2., 1.], d), _t([1.5], d), sorter=_t([1, 0], d))),
]
RANDOM_GOOD = [
    lambda d: torch.multinomial(_t([[0., 1.], [2., 1.]], d), 2),
    lambda d: torch.multinomial(_t([0., 1.], d), 4, replacement=True),
    lambda d: torch.bernoulli(_t([0., 1., 0.5], d)),
    lambda d: torch.zeros(3, device=d).bernoulli_(1.0),
    lambda d: torch.normal(torch.zeros(2, device=d), _t([0., 1.], d)),
]


def _cpu_error(fn):
    with pytest.raises(Exception) as info:
        fn("cpu")
    return info.type, str(info.value)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name,fn", BAD, ids=[b[0] for b in BAD])
def test_refused_values_raise_the_cpu_error(name, fn, mode):
    exc_type, message = _cpu_error(fn)
    message = message.replace("_cpu\"", "_tpu\"")  # the bool kernels' names: "div_floor_cpu" on the CPU
    with torch.tpu.set_eager_mode(mode):
        with pytest.raises(exc_type, match=f"^{re.escape(message)}$"):
            result = fn("tpu")
            if mode == "debug":
                pytest.fail(f"debug mode returned {result} instead of raising at the op")
            torch.tpu.synchronize()
        torch.tpu.synchronize()  # reported once


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name,fn", GOOD, ids=[g[0] for g in GOOD])
def test_valid_values_compute_as_the_cpu(name, fn, mode):
    with torch.tpu.set_eager_mode(mode):
        got = fn("tpu").cpu()
    torch.testing.assert_close(got, fn("cpu"), equal_nan=True, rtol=0, atol=0)


@pytest.mark.parametrize("fn", RANDOM_GOOD)
def test_valid_random_draws_do_not_raise(fn):
    with torch.tpu.set_eager_mode("fused"):
        fn("tpu").cpu()
        torch.tpu.synchronize()


def test_a_refused_value_reads_nothing_until_the_host_waits():
    """The division returns at once in strict mode; the error comes with the
    next read, before its value."""
    a, b = _t([4, 6], "tpu"), _t([2, 0], "tpu")
    q = a // b
    assert q.shape == (2,)
    with pytest.raises(RuntimeError, match="^ZeroDivisionError$"):
        q.cpu()
    assert (a // _t([2, 3], "tpu")).tolist() == [2, 2]


@pytest.mark.parametrize("mode", MODES)
def test_normal_refuses_a_negative_tensor_std_at_the_op(mode):
    """ATen checks a tensor std at the op on every device (CUDA reads
    ``std.min() >= 0`` back), and PyTorch's own tests expect it there."""
    std = _t([1., -1.], "tpu") + 0  # computed on the device
    with torch.tpu.set_eager_mode(mode):
        for mean in (0.0, torch.zeros(2, device="tpu")):
            with pytest.raises(RuntimeError, match="^normal expects all elements of std >= 0.0$"):
                torch.normal(mean, std)
        assert torch.normal(0.0, std.abs()).shape == (2,)
    torch.tpu.synchronize()  # nothing left over


def test_refused_values_do_not_cut_a_fused_chain():
    from torch_tpu.eager import fusion
    a, b = _t([4, 6], "tpu"), _t([2, 3], "tpu")
    p = torch.rand(4, 5, device="tpu")

    def host_waits():  # flushes other than launches ahead of a predicted read
        return fusion.stats.flushes - fusion.stats.early_launches
    with torch.tpu.set_eager_mode("fused"):
        torch.tpu.synchronize()
        before = host_waits()
        q = (a // b) % b
        samples = torch.multinomial(p, 2)
        assert host_waits() == before
        assert q.tolist() == [0, 2] and samples.shape == (4, 2)
