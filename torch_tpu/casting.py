"""Dtype conversion with PyTorch's CPU semantics, inside traced code.

XLA saturates float -> narrow-int conversions; PyTorch's CPU converts through
int64 and wraps (e.g. 300.0 -> uint8 gives 44).  Complex -> real drops the
imaginary part, as ``Tensor.to`` does.
"""
import jax.numpy as jnp
import numpy as np

_NARROW_INTS = {np.dtype(np.int8), np.dtype(np.int16), np.dtype(np.uint8)}


def convert(x, dtype):
    dtype = np.dtype(dtype)
    if x.dtype == dtype:
        return x
    if jnp.issubdtype(x.dtype, jnp.complexfloating) and not jnp.issubdtype(dtype, jnp.complexfloating):
        x = jnp.real(x)
    if dtype in _NARROW_INTS and jnp.issubdtype(x.dtype, jnp.floating):
        return x.astype(np.int64).astype(dtype)
    return x.astype(dtype)
