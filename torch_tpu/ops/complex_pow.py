"""Complex pow as PyTorch's CPU computes it.

Its kernel calls ``std::pow``, which is C's ``cpow``: ``cexp(y * clog(x))``,
with C99's Annex G values at each step and the C runtime's complex product
(it recovers infinities from NaN products).  XLA's own pow differs at zeros,
infinities and NaNs (``0 ** 0`` is 1 where the CPU gives NaN; the signs of
zero parts) and overflows where the CPU does not (a base past 1e19 in
complex64: NaN where the CPU has a value), so every element takes the C
steps; finite values stay within a few ulps of the CPU's (C's clog and cexp
are not XLA's log and exp).
"""
import jax.numpy as jnp
from jax import lax


def pow(x, y):  # noqa: A001 -- the op's name
    """``x ** y`` for complex arrays of one dtype and shape."""
    lr, li = _clog(x.real, x.imag)
    return lax.complex(*_cexp(*_mul(y.real, y.imag, lr, li)))


def _clog(a, b):
    """C's clog: log|x| (-inf at zero, +inf at an infinite part) and the argument."""
    nan = jnp.isnan(a) | jnp.isnan(b)
    inf = jnp.isinf(a) | jnp.isinf(b)
    zero = (a == 0) & (b == 0)
    with_zero = jnp.where(zero, jnp.ones_like(a), jnp.hypot(a, b))
    re = jnp.where(zero, -jnp.inf, jnp.log(with_zero))
    re = jnp.where(inf, jnp.inf, jnp.where(nan, jnp.nan, re))
    # the argument of a signed zero: +-0 or +-pi by the signs (C's atan2)
    zero_arg = jnp.where(jnp.signbit(a), jnp.copysign(jnp.full_like(b, jnp.pi), b), jnp.copysign(jnp.zeros_like(b), b))
    im = jnp.where(nan, jnp.nan, jnp.where(zero, zero_arg, jnp.arctan2(b, a)))
    return re, im


def _mul(a, b, c, d):
    """(a + bi)(c + di) as the C runtime multiplies: when both parts come out
    NaN, infinite operands are boxed to +-1 (NaNs beside them to +-0) and the
    product is recomputed times infinity."""
    ac, bd, ad, bc = a * c, b * d, a * d, b * c
    re, im = ac - bd, ad + bc
    inf = jnp.inf

    def box(v):
        return jnp.copysign(jnp.where(jnp.isinf(v), jnp.ones_like(v), jnp.zeros_like(v)), v)

    def unnan(v):
        return jnp.where(jnp.isnan(v), jnp.copysign(jnp.zeros_like(v), v), v)

    ab_inf = jnp.isinf(a) | jnp.isinf(b)
    a, b = jnp.where(ab_inf, box(a), a), jnp.where(ab_inf, box(b), b)
    c, d = jnp.where(ab_inf, unnan(c), c), jnp.where(ab_inf, unnan(d), d)
    cd_inf = jnp.isinf(c) | jnp.isinf(d)
    c, d = jnp.where(cd_inf, box(c), c), jnp.where(cd_inf, box(d), d)
    a, b = jnp.where(cd_inf, unnan(a), a), jnp.where(cd_inf, unnan(b), b)
    overflowed = ~(ab_inf | cd_inf) & (jnp.isinf(ac) | jnp.isinf(bd) | jnp.isinf(ad) | jnp.isinf(bc))
    a, b, c, d = (jnp.where(overflowed, unnan(v), v) for v in (a, b, c, d))
    again = (jnp.isnan(re) & jnp.isnan(im)) & (ab_inf | cd_inf | overflowed)
    return (jnp.where(again, inf * (a * c - b * d), re), jnp.where(again, inf * (a * d + b * c), im))


def _cexp(x, y):
    """C's cexp of x + yi, with its values at infinite and NaN parts."""
    finite_y, zero_y = jnp.isfinite(y), y == 0
    cos, sin = jnp.cos(y), jnp.sin(y)
    e = jnp.exp(x)
    nan, inf, zero = jnp.full_like(x, jnp.nan), jnp.full_like(x, jnp.inf), jnp.zeros_like(x)
    # a finite real part
    re = jnp.where(finite_y, jnp.where(zero_y, e, e * cos), nan)
    im = jnp.where(finite_y, jnp.where(zero_y, y, e * sin), nan)
    # +inf: the infinities signed as cos/sin; -inf: zeros signed so
    big = jnp.where(x > 0, inf, zero)
    re_inf = jnp.where(finite_y, jnp.where(zero_y, big, jnp.copysign(big, cos)), big)
    im_inf = jnp.where(finite_y, jnp.where(zero_y, y, jnp.copysign(big, sin)),
                       jnp.where(x > 0, nan, jnp.copysign(zero, y)))
    re = jnp.where(jnp.isinf(x), re_inf, re)
    im = jnp.where(jnp.isinf(x), im_inf, im)
    # NaN: a zero imaginary part is kept
    re = jnp.where(jnp.isnan(x), nan, re)
    im = jnp.where(jnp.isnan(x), jnp.where(zero_y, y, nan), im)
    return re, im
