"""Elementwise ops ("ufuncs") follow the CPU's rules beyond their values:
which ``out=`` dtypes they accept, and what they write there."""
import pytest
import torch
from helpers import strict  # noqa: F401  (no CPU fallback)

import torch_tpu  # noqa: F401


def run(device, fn, make_inputs, out_dtype):
    """fn(*inputs, out=...) on ``device``: the out tensor on the CPU, or the error."""
    inputs = [x.to(device) for x in make_inputs()]
    out = torch.empty(0, dtype=out_dtype, device=device)
    try:
        fn(*inputs, out=out)
    except RuntimeError as e:
        return type(e), str(e)
    return out.cpu()


def complex_values():
    return [torch.tensor([3 + 4j, -1 - 1j, 0j, 2.5 - 0.5j], dtype=torch.complex64)]


# abs of a complex tensor is real; the CPU casts it into a complex out= (the
# meta kernel refuses that out, the CPU kernel does not).
@pytest.mark.parametrize("fn", [torch.abs, torch.angle], ids=["abs", "angle"])
@pytest.mark.parametrize("out_dtype", [torch.float32, torch.complex64, torch.complex128, torch.int64],
                         ids=str)
def test_complex_to_real_op_into_an_out_of_another_dtype(fn, out_dtype):
    expected = run("cpu", fn, complex_values, out_dtype)
    actual = run("tpu", fn, complex_values, out_dtype)
    if isinstance(expected, tuple):
        assert actual == expected
    else:
        assert actual.dtype == expected.dtype
        torch.testing.assert_close(actual, expected)


# ---- destinations that share memory with an input ---------------------------------

def error_or_values(device, fn):
    """fn(device)'s RuntimeError message, or the tensor it returns, on the CPU."""
    try:
        return fn(device).cpu()
    except RuntimeError as e:
        return str(e)


def same_outcome(fn):
    expected, actual = error_or_values("cpu", fn), error_or_values("tpu", fn)
    if isinstance(expected, str):
        assert actual == expected
    else:
        torch.testing.assert_close(actual, expected)


def data(device, dtype=torch.float64):
    return torch.arange(1.0, 7.0, dtype=dtype, device=device) / 7


@pytest.mark.parametrize("write", [
    lambda d: (lambda x: torch.sin(x[1:4], out=x[0:3]))(data(d)),            # partial: refused
    lambda d: (lambda x: torch.atan2(x[1:4], x[3:], out=x[0:3]))(data(d)),   # partial: refused
    lambda d: (lambda x: torch.pow(2, x[1:4], out=x[0:3]))(data(d)),         # partial: refused
    lambda d: (lambda x: x[0:3].mul_(x[1:4]))(data(d)),                      # in-place, partial: refused
    lambda d: (lambda x: torch.logical_and(x[1:4], x[3:], out=x[0:3]))(data(d)),
    lambda d: (lambda x: torch.sin(x[0:3], out=x[0:3]))(data(d)),            # the same memory: fine
    lambda d: (lambda x: torch.add(x[0:3], x[3:], out=x[3:]))(data(d)),      # the same memory: fine
    lambda d: (lambda x: torch.exp(x[0:3], out=x[3:]))(data(d)),             # apart: fine
    lambda d: (lambda x: torch.neg(x.view(2, 3).t(), out=x.view(3, 2)))(data(d)),  # same bytes, other strides
    lambda d: (lambda x: torch.cos(x[::2], out=x[1::2]))(data(d)),           # interleaved: too hard, allowed
], ids=["sin", "atan2", "pow-scalar-base", "mul_", "logical_and", "sin-same", "add-same", "exp-apart",
        "neg-transposed", "cos-interleaved"])
def test_out_sharing_memory_with_an_input(write):
    same_outcome(write)


@pytest.mark.parametrize("write", [
    lambda d: torch.rand(1, dtype=torch.float64, device=d).expand(3, 3).pow_(42),
    lambda d: torch.rand(1, dtype=torch.float64, device=d).expand(3, 3).logit_(),
    lambda d: torch.rand(1, device=d).expand(3, 3).logical_and_(torch.rand(3, 3, device=d)),
], ids=["pow_", "logit_", "logical_and_"])
def test_in_place_into_an_expanded_tensor_is_refused(write):
    same_outcome(write)


# ---- the CPU's dtype rules and messages --------------------------------------------

def outcome(fn, device):
    """(error type, message) or the result on the CPU (value and dtype)."""
    try:
        r = fn(device)
    except (RuntimeError, TypeError, ValueError) as e:
        return type(e), str(e)
    return r.cpu().tolist(), r.dtype


def ones(d, dtype=torch.float32, n=3):
    return torch.ones(n, dtype=dtype, device=d)


@pytest.mark.parametrize("fn", [
    # computed in the operands' dtype (uint8 here: 2**17 wraps to 0), then cast into out=
    lambda d: torch.pow(2, torch.tensor([17, 3], dtype=torch.uint8, device=d),
                        out=torch.zeros(2, dtype=torch.int64, device=d)),
    lambda d: torch.pow(torch.tensor([200, 3], dtype=torch.uint8, device=d), 2,
                        out=torch.zeros(2, dtype=torch.int64, device=d)),
    lambda d: torch.heaviside(ones(d), ones(d, torch.float64)),
    lambda d: torch.heaviside(ones(d, torch.complex64), ones(d, torch.complex64)),
    lambda d: torch.maximum(ones(d, torch.complex64), ones(d)),
    lambda d: torch.minimum(ones(d), ones(d, torch.complex128)),
    lambda d: torch.fmax(ones(d, torch.complex64), ones(d, torch.complex64)),
    lambda d: torch.fmin(ones(d, torch.complex64), ones(d)),
    lambda d: 1 - ones(d, torch.bool),
    lambda d: torch.rsub(ones(d, torch.bool), ones(d, torch.bool)),
    lambda d: torch.add(ones(d), ones(d), alpha=0.5 + 1j),
    lambda d: torch.pow(torch.tensor([2, 3], dtype=torch.int32, device=d), -2),
    lambda d: torch.pow(torch.tensor([True], device=d), -1),
    lambda d: torch.pow(torch.tensor([2, 3], dtype=torch.int32, device=d), -2.0),
    lambda d: torch.isposinf(ones(d), out=torch.empty(3, device=d)),
    lambda d: ones(d, torch.complex64).abs_(),
    lambda d: torch.tensor([1, 2], device=d).xlogy_(torch.tensor([1, 2], device=d)),
    lambda d: torch.tensor([5], device=d).floor_divide_(torch.tensor([2.5], device=d)),
    lambda d: torch.tensor([5], device=d).__itruediv__(2),
], ids=["pow-scalar-base-out", "pow-scalar-out", "heaviside-dtypes", "heaviside-complex", "maximum-complex",
        "minimum-complex", "fmax-complex", "fmin-complex", "1-bool", "rsub-bool", "add-complex-alpha",
        "int-pow-negative", "bool-pow-negative", "int-pow-negative-float", "isposinf-float-out",
        "abs_-complex", "xlogy_-int", "floor_divide_-int-by-float", "itruediv-int"])
def test_dtype_rule_like_cpu(fn):
    assert outcome(fn, "tpu") == outcome(fn, "cpu")


# ---- special values ------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128], ids=str)
def test_complex_exp_of_infinite_and_nan_parts(dtype):
    inf, nan = float("inf"), float("nan")
    values = torch.tensor([complex(inf, 0), complex(0, inf), complex(inf, inf), complex(inf, nan),
                           complex(nan, inf), complex(-inf, inf), complex(-inf, nan), complex(inf, -inf),
                           complex(-inf, 2.0), complex(1.5, -0.5)], dtype=dtype)
    expected, actual = torch.exp(values), torch.exp(values.to("tpu")).cpu()
    assert [str(v) for v in actual.tolist()] == [str(v) for v in expected.tolist()]


def special_complex_values(dtype):
    import itertools
    parts = [0.0, -0.25, 3.0, -1e20, 1e-30, float("inf"), -float("inf"), float("nan")]
    return torch.tensor([complex(a, b) for a, b in itertools.product(parts, parts)], dtype=dtype)


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128], ids=str)
@pytest.mark.parametrize("fn", [torch.abs, torch.sqrt, torch.rsqrt, torch.reciprocal, torch.sigmoid, torch.exp2,
                                torch.nan_to_num, lambda z: torch.flip(z, [0]) / z],
                         ids=["abs", "sqrt", "rsqrt", "reciprocal", "sigmoid", "exp2", "nan_to_num", "div"])
def test_complex_functions_at_infinities_and_nans(fn, dtype):
    # XLA's complex division, abs and sqrt differ from the CPU's (C99/Smith) where a part is
    # infinite or NaN; nan_to_num replaces each part.
    z = special_complex_values(dtype)
    expected, actual = fn(z), fn(z.to("tpu")).cpu()
    rtol = 1e-6 if dtype == torch.complex64 else 1e-14
    assert torch.isclose(actual, expected, rtol=rtol, atol=0, equal_nan=True).all()


@pytest.mark.parametrize("dtype", [torch.complex64, torch.int32, torch.bool], ids=str)
def test_frexp_of_a_non_floating_tensor_is_refused(dtype):
    fn = lambda d: torch.frexp(torch.ones(3, dtype=dtype, device=d))[0]  # noqa: E731
    assert outcome(fn, "tpu") == outcome(fn, "cpu")


def test_frexp_exponent_out_of_the_input_dtype_is_refused():
    fn = lambda d: torch.frexp(torch.ones(3, device=d),  # noqa: E731
                               out=(torch.empty(3, device=d), torch.empty(3, device=d)))[1]
    assert outcome(fn, "tpu") == outcome(fn, "cpu")


def test_heaviside_into_a_complex_out_is_refused():
    fn = lambda d: torch.heaviside(ones(d), ones(d), out=torch.empty(3, dtype=torch.complex64, device=d))  # noqa: E731
    assert outcome(fn, "tpu") == outcome(fn, "cpu")


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128], ids=str)
def test_complex_division_near_the_largest_finite_values(dtype):
    # Smith's 1/den is subnormal here, which XLA flushes to zero
    big = torch.finfo(dtype).max / 2
    a = torch.tensor([complex(big, big), complex(-big, -big), complex(big, 0.0)], dtype=dtype)
    expected, actual = a / a.flip(0).flip(0), (a.to("tpu") / a.to("tpu")).cpu()
    torch.testing.assert_close(actual, expected)
