"""torch.special functions and small integer/float ops against the CPU, at the
edges OpInfo's random samples rarely reach: poles, NaN/inf, negative
arguments, the ends of the polynomials' intervals, subnormals."""
import math

import pytest
import torch

import torch_tpu  # noqa: F401
from helpers import assert_same, strict, to_tpu  # noqa: F401  (strict: no CPU fallback)

EDGES = [0.0, -0.0, math.inf, -math.inf, math.nan, 1e-30, 1e-5, 0.3, 0.5, 1.0, -1.0, 2.0, 2.09, -2.09,
         4.99, 5.0, 5.01, 8.0, 8.5, -8.5, 30.0, -30.0, 120.0, -3.25]


def _grid(dtype):
    return torch.tensor(EDGES + torch.linspace(-25, 25, 401).tolist(), dtype=torch.float64).to(dtype)


def _tol(dtype):
    return {"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {"rtol": 1e-10, "atol": 1e-10}


UNARY = ["erfcx", "bessel_j0", "bessel_j1", "bessel_y0", "bessel_y1", "modified_bessel_i0",
         "modified_bessel_i1", "modified_bessel_k0", "modified_bessel_k1", "scaled_modified_bessel_k0",
         "scaled_modified_bessel_k1", "spherical_bessel_j0", "airy_ai"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("name", UNARY)
def test_unary_special(name, dtype):
    fn = getattr(torch.special, name)
    x = _grid(dtype)
    assert_same(fn(to_tpu(x)), fn(x), **_tol(dtype))


def test_unary_special_int_input_is_float():
    x = torch.arange(-3, 4)
    assert_same(torch.special.bessel_j0(to_tpu(x)), torch.special.bessel_j0(x), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("n", [0, 1, 2, 3, 4])
def test_polygamma(n, dtype):
    # negative non-integers, poles at 0 and the negative integers, infinities
    x = torch.tensor([-8.478, -4.3, -2.2, -0.5, -0.0, 0.0, 1e-3, 0.3, 1.0, 2.5, 10.0, 100.0,
                      math.inf, -math.inf, math.nan, -3.0], dtype=dtype)
    assert_same(torch.polygamma(n, to_tpu(x)), torch.polygamma(n, x), **_tol(dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_zeta_and_incomplete_gamma(dtype):
    v = torch.tensor([-2.5, -1.0, -0.0, 0.0, 0.3, 1.0, 1.5, 2.0, 5.0, 10.0, math.inf, math.nan], dtype=dtype)
    a, b = torch.meshgrid(v, v, indexing="ij")
    for fn in (torch.special.zeta, torch.igamma, torch.igammac):
        assert_same(fn(to_tpu(a), to_tpu(b)), fn(a, b), **_tol(dtype))
    assert_same(torch.special.zeta(2.0, to_tpu(v)), torch.special.zeta(2.0, v), **_tol(dtype))


POLYNOMIALS = ["chebyshev_polynomial_t", "chebyshev_polynomial_u", "chebyshev_polynomial_v",
               "chebyshev_polynomial_w", "shifted_chebyshev_polynomial_t", "shifted_chebyshev_polynomial_u",
               "shifted_chebyshev_polynomial_v", "shifted_chebyshev_polynomial_w", "hermite_polynomial_h",
               "hermite_polynomial_he", "laguerre_polynomial_l", "legendre_polynomial_p"]


@pytest.mark.parametrize("name", POLYNOMIALS)
def test_polynomials(name):
    fn = getattr(torch.special, name)
    xs = torch.tensor([-3.0, -1.5, -1.0, -0.7, -0.0, 0.0, 0.2, 0.5, 1.0, 1.3, math.inf, math.nan], dtype=torch.float64)
    # negative, fractional (truncated), small, large (closed forms) and non-finite n
    ns = torch.tensor([-2.0, -0.5, 0.0, 0.7, 1.0, 2.0, 3.0, 5.0, 7.0, 9.0, 10.5, 20.0, 130.0, math.nan, math.inf],
                      dtype=torch.float64)
    x, n = torch.meshgrid(xs, ns, indexing="ij")
    assert_same(fn(to_tpu(x), to_tpu(n)), fn(x, n), rtol=1e-10, atol=1e-10)
    # the Scalar overloads and integer n
    assert_same(fn(to_tpu(xs.float()), 3), fn(xs.float(), 3), rtol=1e-5, atol=1e-5)
    assert_same(fn(0.5, to_tpu(torch.arange(6))), fn(0.5, torch.arange(6)), rtol=1e-5, atol=1e-5)


# ---- integer and float decomposition -----------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int16, torch.uint8])
def test_gcd_lcm(dtype):
    a = torch.tensor([0, 0, -12, 7, 30, -9, 100, 1], dtype=torch.int64).to(dtype)
    b = torch.tensor([0, -5, 18, 0, 42, 6, -75, 1], dtype=torch.int64).to(dtype)
    for fn in (torch.gcd, torch.lcm):
        assert_same(fn(to_tpu(a), to_tpu(b)), fn(a, b), exact=True)


def test_gcd_int_min_wraps_like_cpu():
    a, b = torch.tensor([-2 ** 63, 7]), torch.tensor([6, -2 ** 63])
    assert_same(torch.gcd(to_tpu(a), to_tpu(b)), torch.gcd(a, b), exact=True)


def test_gcd_rejects_floats():
    with pytest.raises(NotImplementedError, match="not implemented for 'Float'"):
        torch.gcd(to_tpu(torch.ones(2)), to_tpu(torch.ones(2)))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
def test_frexp(dtype):
    x = torch.tensor([0.0, -0.0, math.inf, -math.inf, math.nan, 1e-40, -3e-42, 1e-45, 3.0, -5.5, 1e-310,
                      0.5, 1.0, 65504.0, 6e-8], dtype=torch.float64).to(dtype)
    mantissa, exponent = torch.frexp(to_tpu(x))
    want_m, want_e = torch.frexp(x)
    assert exponent.dtype == torch.int32
    assert_same(exponent, want_e, exact=True)
    assert_same(mantissa, want_m, exact=True)


def test_frexp_rejects_integers():
    with pytest.raises(RuntimeError, match="only supports floating-point"):
        torch.frexp(to_tpu(torch.arange(3)))


def test_equal():
    x = torch.tensor([1.0, math.nan])
    t = to_tpu(x)
    assert torch.equal(t, t) is torch.equal(x, x)  # NaN is unequal even to itself
    assert torch.equal(to_tpu(torch.ones(2)), to_tpu(torch.ones(2, dtype=torch.int64)))
    assert not torch.equal(to_tpu(torch.ones(2)), to_tpu(torch.ones(3)))
    assert not torch.equal(to_tpu(torch.ones(2)), to_tpu(torch.tensor([1.0, 2.0])))


# ---- data-dependent sizes ----------------------------------------------------------------

def test_repeat_interleave_and_errors():
    r = torch.tensor([2, 0, 3])
    assert_same(torch.repeat_interleave(to_tpu(r)), torch.repeat_interleave(r), exact=True)
    with pytest.raises(RuntimeError, match="negative"):
        torch.repeat_interleave(to_tpu(torch.tensor([-1, 2])))
    with pytest.raises(RuntimeError, match="does not match"):
        torch.repeat_interleave(to_tpu(r), output_size=4)


def test_unique_consecutive():
    x = torch.tensor([1.0, 1.0, math.nan, math.nan, 2.0, 1.0])
    got = torch.unique_consecutive(to_tpu(x), return_inverse=True, return_counts=True)
    assert_same(got, torch.unique_consecutive(x, return_inverse=True, return_counts=True))
    m = torch.tensor([[1, 1, 2], [1, 1, 3]])
    for dim in (0, 1):
        assert_same(torch.unique_consecutive(to_tpu(m), return_counts=True, dim=dim),
                    torch.unique_consecutive(m, return_counts=True, dim=dim), exact=True)


def test_bincount():
    x = torch.tensor([1, 1, 4, 0, 4, 4])
    w = torch.tensor([0.5, 1.0, 2.0, 0.25, 1.0, 3.0])
    assert_same(torch.bincount(to_tpu(x)), torch.bincount(x), exact=True)
    assert_same(torch.bincount(to_tpu(x), minlength=9), torch.bincount(x, minlength=9), exact=True)
    assert_same(torch.bincount(to_tpu(x), to_tpu(w)), torch.bincount(x, w))
    assert_same(torch.bincount(to_tpu(x), to_tpu(w.double())), torch.bincount(x, w.double()))
    with pytest.raises(RuntimeError, match="non-negative"):
        torch.bincount(to_tpu(torch.tensor([-1, 2])))
