"""Factories that reach the backend as their own ops: arange, linspace,
logspace, eye (all as ``out=`` overloads; PyTorch allocates with empty first).

zeros/ones/full/scalar_tensor/*_like arrive as empty + fill_/zero_ (shape.py);
torch.tensor arrives as a copy.  Every device argument goes through
core.check_device, so ``tpu:1`` is a clear RuntimeError.

Shapes and errors come from PyTorch's meta kernels; values follow PyTorch's CPU
formulas (which precision each step is computed in), so results match.
"""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import torch

from .. import dtypes
from ..eager import modes
from ..storage import access
from .registry import register_raw

_aten = torch.ops.aten


def _write_out(name, out, value):
    if tuple(out.shape) != tuple(value.shape):
        out.resize_(value.shape)
    access.write(out, value)
    modes.after_op(name, value)
    return out


def _meta_shape(op, *args, out):
    """Output shape (and PyTorch's errors) from the op's meta kernel."""
    meta_out = torch.empty(0, dtype=out.dtype, device="meta")
    return tuple(op(*args, out=meta_out).shape)


def _acc_dtype(dtype: torch.dtype):
    # PyTorch's CPU accumulate type: double for float/double, float for half/bf16, int64 for ints.
    if dtype in (torch.float16, torch.bfloat16):
        return np.dtype(np.float32)
    if dtype.is_floating_point:
        return np.dtype(np.float64)
    if dtype.is_complex:
        return np.dtype(np.complex128)
    return np.dtype(np.int64)


def _number(x):
    return x.item() if isinstance(x, torch.Tensor) else x


@functools.lru_cache(maxsize=None)
def _arange_fn(n, acc, npdtype):
    return jax.jit(lambda start, step: (start + step * jnp.arange(n, dtype=acc)).astype(npdtype))


@register_raw("arange.start_out")
def arange_start_out(start, end, step=1, *, out):
    start, end, step = _number(start), _number(end), _number(step)
    (n,) = _meta_shape(_aten.arange.start_out, start, end, step, out=out)
    acc = _acc_dtype(out.dtype)
    value = _arange_fn(n, acc, dtypes.to_np(out.dtype))(np.asarray(start).astype(acc), np.asarray(step).astype(acc))
    return _write_out("aten::arange", out, value)


@register_raw("arange.out")
def arange_out(end, *, out):
    return arange_start_out(0, end, 1, out=out)


@functools.lru_cache(maxsize=None)
def _linspace_fn(n, step_dtype, npdtype):
    def run(start, end):
        # PyTorch's CPU kernel: the first half counts up from start, the second
        # half down from end, so both ends are exact.
        start, end = start.astype(step_dtype), end.astype(step_dtype)
        step = (end - start) / max(n - 1, 1)
        idx = jnp.arange(n)
        up = start + step * idx.astype(step_dtype)
        down = end - step * (n - idx - 1).astype(step_dtype)
        if n == 1:  # a single step is start, not end
            return start.reshape(1).astype(npdtype)
        return jnp.where(idx < n // 2, up, down).astype(npdtype)
    return jax.jit(run)


@register_raw("linspace.out")
def linspace_out(start, end, steps, *, out):
    start, end = _number(start), _number(end)
    (n,) = _meta_shape(_aten.linspace.out, start, end, steps, out=out)
    npdtype = dtypes.to_np(out.dtype)
    # Integers step in double, floats in their own type (as on the CPU).
    step_dtype = npdtype if (out.dtype.is_floating_point or out.dtype.is_complex) else np.dtype(np.float64)
    start_v, end_v = np.asarray(start), np.asarray(end)
    if not out.dtype.is_complex:
        start_v, end_v = start_v.real, end_v.real
    if not (out.dtype.is_floating_point or out.dtype.is_complex):  # CPU converts the ends first
        start_v, end_v = start_v.astype(npdtype), end_v.astype(npdtype)
    value = _linspace_fn(n, step_dtype, npdtype)(start_v, end_v)
    return _write_out("aten::linspace", out, value)


@functools.lru_cache(maxsize=None)
def _logspace_fn(n, npdtype):
    def run(start, end, base):
        step = (end - start) / max(n - 1, 1)
        idx = jnp.arange(n)
        exps = jnp.where(idx < n // 2, start + step * idx, end - step * (n - idx - 1))
        if n == 1:  # a single step is base ** start
            exps = jnp.reshape(start, (1,))
        return jnp.power(base, exps).astype(npdtype)
    return jax.jit(run)


@register_raw("logspace.out")
def logspace_out(start, end, steps, base=10.0, *, out):
    start, end = _number(start), _number(end)
    (n,) = _meta_shape(_aten.logspace.out, start, end, steps, base, out=out)
    wide = np.complex128 if out.dtype.is_complex else np.float64
    value = _logspace_fn(n, dtypes.to_np(out.dtype))(
        np.asarray(start, wide), np.asarray(end, wide), np.asarray(base, wide))
    return _write_out("aten::logspace", out, value)


@functools.lru_cache(maxsize=None)
def _eye_fn(n, m, npdtype):
    return jax.jit(lambda: jnp.eye(n, m, dtype=npdtype))


@register_raw("eye.m_out")
def eye_m_out(n, m, *, out):
    shape = _meta_shape(_aten.eye.m_out, n, m, out=out)
    return _write_out("aten::eye", out, _eye_fn(shape[0], shape[1], dtypes.to_np(out.dtype))())


@register_raw("eye.out")
def eye_out(n, *, out):
    return eye_m_out(n, n, out=out)
