"""Factories that reach the backend as their own ops: arange, range, linspace,
logspace, eye (all as ``out=`` overloads; PyTorch allocates with empty first).

zeros/ones/full/scalar_tensor/*_like arrive as empty + fill_/zero_ (shape.py);
torch.tensor arrives as a copy.  Every device argument goes through
runtime.check_device, so ``tpu:1`` is a clear RuntimeError.

Shapes and errors come from PyTorch's meta kernels; values follow PyTorch's CPU
formulas (which precision each step is computed in), so results match.
"""
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import torch

from .. import dtypes
from ..unsupported import UnsupportedOnTpu
from ..eager import access
from ..eager.launch import launch
from . import errors, out_checks, scalar_checks
from .registry import register_raw

_aten = torch.ops.aten


def _write_out(name, out, fn, *inputs):
    """Launch ``fn(*inputs)`` as op ``name`` and store its value in ``out``.
    As the CPU kernels: an out= with the right number of elements keeps its
    shape and strides (a non-contiguous view is written through, in order)."""
    value = launch(name, fn, inputs)
    if out.numel() != value.size:
        out.resize_(value.shape)
    out_checks.check_no_internal_overlap(out)
    shape = tuple(out.shape)
    access.write(out, value if value.shape == shape else value.reshape(shape))  # (a reshape is a dispatch)
    return out


def _meta_shape(op, *args, out):
    """Output shape (and PyTorch's errors) from the op's meta kernel; for
    plain numbers (``torch.arange(t)`` in every forward) remembered by value."""
    if all(type(a) in (int, float, bool) for a in args):
        return _meta_shape_of(op, out.dtype, *((type(a), a) for a in args))
    meta_out = torch.empty(0, dtype=out.dtype, device="meta")
    return tuple(op(*args, out=meta_out).shape)


@functools.lru_cache(maxsize=1024)
def _meta_shape_of(op, dtype, *typed_args):  # (an error raised is not remembered)
    meta_out = torch.empty(0, dtype=dtype, device="meta")
    return tuple(op(*(a for _, a in typed_args), out=meta_out).shape)


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
    def run(start, step):
        k = jnp.arange(n, dtype=np.int64)
        value = (start + step * k.astype(acc)).astype(npdtype)
        if npdtype.itemsize < 8 and jnp.issubdtype(npdtype, jnp.floating):
            # PyTorch's CPU loop runs 256-bit vectors (two per step, then a scalar
            # tail): each vector starts at T(start + step*b) and adds i*step in
            # the accumulate type.  Rounding the same way gives the CPU's values.
            width = 32 // npdtype.itemsize
            b = k - k % width
            base = (start + step * b.astype(acc)).astype(npdtype).astype(acc)
            vec = (base + (k - b).astype(acc) * step).astype(npdtype)
            value = jnp.where(k < n // (2 * width) * (2 * width), vec, value)
        return value
    return jax.jit(run)


def _shown(x):
    """A range end as the CPU's message prints it (an integer, or a double as %g)."""
    return str(x) if isinstance(x, int) else f"{float(x):g}"


def _check_range(start, end, step):
    """The CPU's checks of arange/range's ends, in its order (the meta kernel's
    messages differ for a non-finite end)."""
    xstart, xend, xstep = float(start), float(end), float(step)
    if xstep == 0:
        raise RuntimeError("step must be nonzero")
    if not (math.isfinite(xstart) and math.isfinite(xend)):
        raise RuntimeError(f"unsupported range: {_shown(start)} -> {_shown(end)}")
    if not ((xstep > 0 and xend >= xstart) or (xstep < 0 and xend <= xstart)):
        raise RuntimeError("upper bound and lower bound inconsistent with step sign")


@register_raw("arange.start_out")
def arange_start_out(start, end, step=1, *, out):
    start, end, step = _number(start), _number(end), _number(step)
    _check_range(start, end, step)
    if math.ceil((float(end) - float(start)) / float(step)) >= 2**63:
        raise RuntimeError("invalid size, possible overflow?")
    (n,) = _meta_shape(_aten.arange.start_out, start, end, step, out=out)
    if out.numel() not in (0, n):
        errors.warn_at_caller(
            f"The number of elements in the out tensor of shape {list(out.shape)} is {out.numel()} which does not "
            f"match the computed number of elements {n}. Note that this may occur as a result of rounding error. "
            f"The out tensor will be resized to a tensor of shape ({n},).")
    acc = _acc_dtype(out.dtype)
    return _write_out("aten::arange", out, _arange_fn(n, acc, dtypes.to_np(out.dtype)),
                      np.asarray(start).astype(acc), np.asarray(step).astype(acc))


@functools.lru_cache(maxsize=None)
def _range_fn(n, acc, npdtype):
    return jax.jit(lambda start, step: (start + step * jnp.arange(n, dtype=np.int64).astype(acc)).astype(npdtype))


@register_raw("range.out")
def range_out(start, end, step=1, *, out):
    """torch.range (deprecated): ``end`` included; each value start + step * i
    in the accumulate type, as the CPU loop."""
    start, end, step = _number(start), _number(end), _number(step)
    _check_range(start, end, step)
    n = int((float(end) - float(start)) / float(step) + 1)
    acc = _acc_dtype(out.dtype)
    return _write_out("aten::range", out, _range_fn(n, acc, dtypes.to_np(out.dtype)),
                      np.asarray(start).astype(acc), np.asarray(step).astype(acc))


@register_raw("arange.out")
def arange_out(end, *, out):
    return arange_start_out(0, end, 1, out=out)


def _ramp(start, end, denom, n, step_dtype):
    """PyTorch's CPU linspace values in ``step_dtype``: the first half counts up
    from start, the second half down from end, so both ends are exact.  The CPU
    compiles these to fused multiply-adds; for float32 a double multiply-add
    rounded once gives the same values."""
    start, end = start.astype(step_dtype), end.astype(step_dtype)
    if n == 1:  # a single step is start, not end
        return start.reshape(1)
    step = (end - start) / denom.astype(step_dtype)  # denom is traced: XLA would use a reciprocal
    idx = jnp.arange(n)
    if step_dtype == np.float64:  # (integer results step in double too)
        up = _fma64(step, idx.astype(np.float64), start)
        down = _fma64(-step, (n - idx - 1).astype(np.float64), end)
        return jnp.where(idx < n // 2, up, down)
    wide = np.float64 if step_dtype == np.float32 else step_dtype
    up = start.astype(wide) + step.astype(wide) * idx.astype(wide)
    down = end.astype(wide) - step.astype(wide) * (n - idx - 1).astype(wide)
    return jnp.where(idx < n // 2, up, down).astype(step_dtype)


def _fma64(a, b, c):
    """a * b + c in float64 rounded once, as the CPU's fused multiply-add: the
    product's exact error (Veltkamp split) and the sum's (two-sum) are added
    back before the last rounding."""
    def split(x):
        t = 134217729.0 * x  # 2**27 + 1
        hi = t - (t - x)
        return hi, x - hi
    p = a * b
    (ah, al), (bh, bl) = split(a), split(b)
    product_error = ((ah * bh - p) + ah * bl + al * bh) + al * bl
    s = p + c
    back = s - p
    sum_error = (p - (s - back)) + (c - back)
    return s + (sum_error + product_error)


def _ends(start, end, out):
    """start/end as host arrays the way the CPU kernel sees them, and the step dtype."""
    scalar_checks.check_values((start, end), out.dtype)  # int8 linspace(0, 300): the CPU's overflow error
    npdtype = dtypes.to_np(out.dtype)
    start_v, end_v = np.asarray(_number(start)), np.asarray(_number(end))
    if out.dtype.is_floating_point or out.dtype.is_complex:
        if not out.dtype.is_complex:
            start_v, end_v = start_v.real, end_v.real
        return start_v, end_v, npdtype
    # Integers: the ends are converted first, then the step is a double.
    return start_v.real.astype(npdtype), end_v.real.astype(npdtype), np.dtype(np.float64)


@functools.lru_cache(maxsize=None)
def _linspace_fn(n, step_dtype, npdtype):
    return jax.jit(lambda start, end, denom: _ramp(start, end, denom, n, step_dtype).astype(npdtype))


@register_raw("linspace.out")
def linspace_out(start, end, steps, *, out):
    (n,) = _meta_shape(_aten.linspace.out, _number(start), _number(end), steps, out=out)
    start_v, end_v, step_dtype = _ends(start, end, out)
    return _write_out("aten::linspace", out, _linspace_fn(n, step_dtype, dtypes.to_np(out.dtype)),
                      start_v, end_v, np.int64(max(n - 1, 1)))


@functools.lru_cache(maxsize=None)
def _logspace_fn(n, step_dtype, npdtype):
    def run(start, end, base, denom):
        # exponents as linspace computes them; the power in double (as the CPU)
        exps = _ramp(start, end, denom, n, step_dtype)
        wide = np.complex128 if jnp.issubdtype(step_dtype, jnp.complexfloating) else np.float64
        return jnp.power(base.astype(wide), exps.astype(wide)).astype(npdtype)
    return jax.jit(run)


@register_raw("logspace.out")
def logspace_out(start, end, steps, base=10.0, *, out):
    (n,) = _meta_shape(_aten.logspace.out, _number(start), _number(end), steps, base, out=out)
    start_v, end_v, step_dtype = _ends(start, end, out)
    return _write_out("aten::logspace", out, _logspace_fn(n, step_dtype, dtypes.to_np(out.dtype)),
                      start_v, end_v, np.asarray(base), np.int64(max(n - 1, 1)))


@functools.lru_cache(maxsize=None)
def _eye_fn(n, m, npdtype):
    return jax.jit(lambda: jnp.eye(n, m, dtype=npdtype))


@register_raw("eye.m_out")
def eye_m_out(n, m, *, out):
    shape = _meta_shape(_aten.eye.m_out, n, m, out=out)
    return _write_out("aten::eye", out, _eye_fn(shape[0], shape[1], dtypes.to_np(out.dtype)))


@register_raw("eye.out")
def eye_out(n, *, out):
    return eye_m_out(n, n, out=out)


# ---- layouts tpu does not support: a clear refusal -------------------------------
# Every quantized or sparse COO tensor on tpu is built by one of these ops (the
# dispatcher picks the Quantized/Sparse key from the dtype or layout); without a
# kernel, PyTorch's message names a 'Quantizedtpu' backend and the selective build.

def _refuse(what, hint):
    def kernel(*args, **kwargs):
        raise UnsupportedOnTpu(f"{what} are not supported on tpu; {hint}")
    return kernel


_QUANTIZED_HINT = "quantize on the CPU (x.cpu()) or keep the tensor in a float dtype"
for _name in ("empty_quantized.default", "_empty_affine_quantized.default",
              "_empty_per_channel_affine_quantized.default", "empty.memory_format", "empty_strided.default"):
    register_raw(_name, dispatch_key="QuantizedPrivateUse1")(_refuse("quantized tensors", _QUANTIZED_HINT))
for _name in ("_sparse_coo_tensor_with_dims_and_tensors.default", "_sparse_coo_tensor_with_dims.default"):
    register_raw(_name, dispatch_key="SparsePrivateUse1")(
        _refuse("sparse COO tensors", "build them on the CPU, or use a dense tensor (to_dense())"))
