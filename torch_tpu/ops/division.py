"""Division as PyTorch rounds it, for any module's traced code (no kernels
registered here, so modules that register before elementwise import it at
the top)."""
import jax.numpy as jnp
from jax import lax


def true_div(a, b):
    """a / b correctly rounded, as PyTorch.  XLA rewrites a division by a
    broadcast value into a multiplication by its reciprocal (off by an ulp);
    a select that XLA cannot see through keeps it a real division."""
    a, b = jnp.asarray(a), jnp.asarray(b)
    if jnp.iscomplexobj(a) or jnp.iscomplexobj(b):
        return complex_div(a, b)
    shape = jnp.broadcast_shapes(a.shape, b.shape)
    if b.shape != shape and jnp.issubdtype(b.dtype, jnp.inexact):
        b = jnp.where(jnp.broadcast_to(a, shape) == 0, b, b)
    return a / b


def complex_div(a, b):
    """Complex a / b by Smith's scaled formula, as c10::complex (and NumPy)
    divide: their results for infinite and huge parts (XLA divides otherwise)."""
    dt = jnp.result_type(a, b)
    if not jnp.issubdtype(dt, jnp.complexfloating):
        dt = jnp.result_type(dt, jnp.complex64)
    a, b = jnp.broadcast_arrays(a.astype(dt), b.astype(dt))
    x, y, c, d = jnp.real(a), jnp.imag(a), jnp.real(b), jnp.imag(b)
    c_big = jnp.abs(c) >= jnp.abs(d)
    both_zero = (c == 0) & (d == 0)
    one = jnp.ones_like(c)
    # |c| >= |d|: r = d/c; otherwise r = c/d (the selects keep each branch's NaNs apart)
    r = jnp.where(c_big, d / jnp.where(both_zero, one, c), c / jnp.where(c_big, one, d))
    den = jnp.where(c_big, c + d * r, d + c * r)
    re_num = jnp.where(c_big, x + y * r, x * r + y)
    im_num = jnp.where(c_big, y - x * r, y * r - x)
    # c10 multiplies by scl = 1/den; past 1/tiny that is subnormal, which XLA flushes
    # to zero: divide there instead
    huge = jnp.abs(den) > 1 / jnp.finfo(den.dtype).tiny
    scl = 1 / jnp.where(huge, one, den)
    re = jnp.where(huge, re_num / den, re_num * scl)
    im = jnp.where(huge, im_num / den, im_num * scl)
    zero_re, zero_im = x / jnp.abs(c), y / jnp.abs(d)  # a / 0: the CPU's inf or NaN parts
    return lax.complex(jnp.where(both_zero, zero_re, re), jnp.where(both_zero, zero_im, im))
