"""Dtype conversion with PyTorch's CPU semantics, inside traced code.

XLA saturates float -> int conversions (NaN gives 0).  PyTorch's CPU uses the
x86 truncating conversion instead: a value out of int32's range (or NaN) gives
INT32_MIN, out of int64's range INT64_MIN, and the narrow ints (int8, int16,
uint8) take the low bits of that int32 (300.0 -> uint8 gives 44, 3e9 -> 0).
Complex -> real drops the imaginary part, as ``Tensor.to`` does.
"""
import jax.numpy as jnp
import numpy as np

_NARROW_INTS = {np.dtype(np.int8), np.dtype(np.int16), np.dtype(np.uint8)}
_WIDE_INTS = {np.dtype(np.int32): 31, np.dtype(np.int64): 63}


def _float_to_signed(x, dtype, bits):
    """x86's cvtt semantics: in-range values truncate, the rest become INT_MIN."""
    if x.dtype.itemsize < 4:  # float16 cannot hold the bounds; float32 holds every half value
        x = x.astype(np.float32)
    lo, hi = -(2.0 ** bits), 2.0 ** bits  # exact in float32 and float64
    in_range = (x >= lo) & (x < hi)  # False for NaN
    safe = jnp.where(in_range, x, jnp.zeros((), x.dtype)).astype(dtype)  # no overflowing cast
    return jnp.where(in_range, safe, jnp.asarray(np.iinfo(dtype).min, dtype))


def convert(x, dtype):
    dtype = np.dtype(dtype)
    if x.dtype == dtype:
        return x
    if jnp.issubdtype(x.dtype, jnp.complexfloating) and not jnp.issubdtype(dtype, jnp.complexfloating):
        x = jnp.real(x)
    if jnp.issubdtype(x.dtype, jnp.floating):
        if dtype in _WIDE_INTS:
            return _float_to_signed(x, dtype, _WIDE_INTS[dtype])
        if dtype in _NARROW_INTS:  # through int32, then the low bits (XLA's int -> int wraps)
            return _float_to_signed(x, np.dtype(np.int32), 31).astype(dtype)
    return x.astype(dtype)
