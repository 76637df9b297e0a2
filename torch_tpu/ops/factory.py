"""Factories that reach the backend as their own ops: arange, range, linspace,
logspace, eye (all as ``out=`` overloads; PyTorch allocates with empty first).

zeros/ones/full/scalar_tensor arrive as empty + fill_/zero_ (shape.py);
ones_like/zeros_like/full_like take a cached shortcut after their first call
(autograd seeds every backward with ones_like); torch.tensor arrives as a copy.  Every device argument goes through
runtime.check_device, so ``tpu:1`` is a clear RuntimeError.

Shapes and errors come from PyTorch's meta kernels; values follow PyTorch's CPU
formulas (which precision each step is computed in), so results match.
"""
import functools
import math

import jax.numpy as jnp
import numpy as np
import torch

from .. import dtypes, runtime, tpu_dtypes
from ..unsupported import UnsupportedOnTpu
from ..eager import access
from ..eager.launch import launch
from ..storage import buffers
from . import errors, host_mirror, out_checks, scalar_checks
from .registry import register_raw

_aten = torch.ops.aten


def _write_out(name, out, fn, *inputs):
    """Launch ``fn(*inputs)`` as op ``name`` and store its value in ``out``."""
    return _store(out, launch(name, fn, inputs))


def _store(out, value, host=None):
    """``value`` stored in ``out``.  As the CPU kernels: an out= with the right
    number of elements keeps its shape and strides (a non-contiguous view is
    written through, in order).  ``host``: the values, flat and read-only,
    for host_mirror to keep."""
    if out.numel() != value.size:
        if out.untyped_storage().nbytes() == 0 and out.dtype == dtypes.NP_TO_TORCH[value.dtype]:
            buffers.adopt(out, value)  # (the usual case: torch.arange's own empty out)
            if host is not None:  # (a new storage of its own, whole)
                host_mirror.keep(out.untyped_storage(), value, out.dtype, host)
            return out
        out.resize_(value.shape)
    out_checks.check_no_internal_overlap(out)
    shape = tuple(out.shape)
    access.write(out, value if value.shape == shape else value.reshape(shape))  # (a reshape is a dispatch)
    if host is not None:
        host_mirror.remember(out, host, copy=False)
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
    return runtime.device_jit(run)


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
    npdtype = dtypes.to_np(out.dtype)
    start, step = np.asarray(start).astype(acc), np.asarray(step).astype(acc)
    if n * npdtype.itemsize <= _CONSTANT_BYTES:  # (the bytes: -0.0 and 0.0 start different ramps)
        return _store(out, *_arange_constant(n, acc, npdtype, start.tobytes(), step.tobytes()))
    return _write_out("aten::arange", out, _arange_fn(n, acc, npdtype), start, step)


# ``torch.arange(seq, device=...)`` runs in every forward (positions, masks):
# a small ramp of given ends is a constant, computed once.  Any number of
# storages may hold the same array: it is immutable, a write gives a storage
# a new buffer, and a buffer held here is never donated (access.can_donate).
# An integer ramp keeps its host values too (host_mirror), read once: an
# index made from it (positions into an embedding) is range-checked on the
# host at once, as on the CPU, instead of by a device check.
_CONSTANT_BYTES = 1 << 18


@functools.lru_cache(maxsize=128)
def _arange_constant(n, acc, npdtype, start, step):
    """(the ramp's array, its values on the host when host_mirror keeps them, else None)"""
    start, step = np.frombuffer(start, acc)[0], np.frombuffer(step, acc)[0]
    value = launch("aten::arange", _arange_fn(n, acc, npdtype), (start, step))
    host = None
    if npdtype.kind in "iub" and n <= host_mirror.MAX_NUMEL:
        host = np.asarray(value).reshape(-1)
        host.flags.writeable = False
    return value, host


@functools.lru_cache(maxsize=None)
def _range_fn(n, acc, npdtype):
    return runtime.device_jit(lambda start, step: (start + step * jnp.arange(n, dtype=np.int64).astype(acc)).astype(npdtype))


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


# ``torch.arange(n, device="tpu")`` without out= is PyTorch's composite: empty,
# then arange.out with its checks and its constant (~60 Python calls).  A
# small ramp seen before is wrapped straight from the constant it got then.
class _Constant:
    """A tensor's array, metadata and host values, wrapped again by later calls (_wrap_constant)."""
    __slots__ = ("value", "dtype", "nbytes", "shape", "host")

    def __init__(self, t):
        st = t.untyped_storage()
        self.value, self.dtype, self.nbytes, self.shape = buffers.get_buffer(st), t.dtype, st.nbytes(), tuple(t.shape)
        kept = getattr(buffers.storage_of(st), "_tpu_host", None)
        self.host = kept[2] if kept is not None and kept[0] is self.value else None


_RAMPS: dict = {}  # (start, end, step value keys, the result's dtype, layout, device, pin_memory) -> _Constant
_MAX_RAMPS = 1024


_INTEGRAL = (int, bool)


def _arange_new(start, end, step, dtype, layout, device, pin_memory):
    if dtype is None:  # the composite's: int64 for integral (and bool) ends, else the default dtype (which may change)
        integral = type(start) in _INTEGRAL and type(end) in _INTEGRAL and type(step) in _INTEGRAL
        dtype = torch.int64 if integral else torch.get_default_dtype()
    # (keyed by the result's dtype: arange(16) and arange(16, dtype=torch.float32) are two ramps)
    key = (_value_key(start), _value_key(end), _value_key(step), dtype, layout, device, pin_memory)
    ramp = _RAMPS.get(key)
    if ramp is None:
        out = torch.empty(0, dtype=dtype, layout=layout, device=device, pin_memory=pin_memory)
        t = _aten.arange.start_out(start, end, step, out=out)
        if (None not in key[:3] and t.layout is torch.strided and t.numel() * t.element_size() <= _CONSTANT_BYTES
                and len(_RAMPS) < _MAX_RAMPS):
            _RAMPS[key] = _Constant(t)
        return t
    return _wrap_constant(ramp)


def _wrap_constant(made):
    """A new tensor over the array ``made`` (a _Constant) holds, with its host values."""
    if tpu_dtypes.active:  # on a TPU: float64 warns, complex128 is refused (as empty does)
        tpu_dtypes.entering(made.dtype)
    t = buffers.wrap_as(made.value, made.dtype, made.nbytes, made.shape, None)
    if made.host is not None:
        host_mirror.keep(buffers.storage_of(t.untyped_storage()), made.value, made.dtype, made.host)
    return t


# A Python number as a 0-d tensor (torch.where(mask, x, 0.0), x[i] = v and
# every other op that takes a number as a tensor: PyTorch's scalar_tensor is
# empty + fill_, two ops' host work and a launch).  A number seen before is
# wrapped from the array its first call made.
_SCALARS: dict = {}  # (value key, dtype or the default, layout, device, pin_memory) -> _Constant


@register_raw("scalar_tensor.default")
def scalar_tensor(s, dtype=None, layout=None, device=None, pin_memory=None):
    key = (_value_key(s), dtype or torch.get_default_dtype(), layout, device, pin_memory)
    made = _SCALARS.get(key)
    if made is None:
        t = torch.empty((), dtype=dtype, layout=layout, device=device, pin_memory=pin_memory).fill_(s)
        if key[0] is not None and t.layout is torch.strided and len(_SCALARS) < _MAX_RAMPS:
            _SCALARS[key] = _Constant(t)
        return t
    return _wrap_constant(made)


@register_raw("arange.default")
def arange(end, dtype=None, layout=None, device=None, pin_memory=None):
    return _arange_new(0, end, 1, dtype, layout, device, pin_memory)


@register_raw("arange.start")
def arange_start(start, end, dtype=None, layout=None, device=None, pin_memory=None):
    return _arange_new(start, end, 1, dtype, layout, device, pin_memory)


@register_raw("arange.start_step")
def arange_start_step(start, end, step=1, dtype=None, layout=None, device=None, pin_memory=None):
    return _arange_new(start, end, step, dtype, layout, device, pin_memory)


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
    return runtime.device_jit(lambda start, end, denom: _ramp(start, end, denom, n, step_dtype).astype(npdtype))


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
    return runtime.device_jit(run)


@register_raw("logspace.out")
def logspace_out(start, end, steps, base=10.0, *, out):
    (n,) = _meta_shape(_aten.logspace.out, _number(start), _number(end), steps, base, out=out)
    start_v, end_v, step_dtype = _ends(start, end, out)
    return _write_out("aten::logspace", out, _logspace_fn(n, step_dtype, dtypes.to_np(out.dtype)),
                      start_v, end_v, np.asarray(base), np.int64(max(n - 1, 1)))


@functools.lru_cache(maxsize=None)
def _eye_fn(n, m, npdtype):
    return runtime.device_jit(lambda: jnp.eye(n, m, dtype=npdtype))


@register_raw("eye.m_out")
def eye_m_out(n, m, *, out):
    shape = _meta_shape(_aten.eye.m_out, n, m, out=out)
    return _write_out("aten::eye", out, _eye_fn(shape[0], shape[1], dtypes.to_np(out.dtype)))


@register_raw("eye.out")
def eye_out(n, *, out):
    return eye_m_out(n, n, out=out)


# ---- ones/zeros/full, their _like and new_ forms: a cached launch -----------------
# PyTorch builds them as empty + fill_ (or zero_): two trips through the
# dispatcher and the registry, ~75 Python calls each time, paid by every
# backward's seed (ones_like).  Here one cached executable per (shape, dtype,
# kind of value) makes the values (the fill kernel's own conversion of the same
# scalar array) into a fresh row-major buffer.  The first call with a (shape,
# dtype, value) still builds PyTorch's empty tensor and checks the value as
# fill_ does, so every error is raised as before; anything unusual (another
# layout or memory format, pinning, a NaN or complex value, a rare dtype) takes
# PyTorch's path every time.  No buffer is shared between tensors.

_FILLS: dict = {}  # (shape, dtype, value key) -> _Fill
_ZEROED_ONCE: set = set()  # keys of zeros made once through zero_ (bounded by _MAX_FILLS with _FILLS)
_MAX_FILLS = 1024
_ROW_MAJOR_FORMATS = (None, torch.preserve_format, torch.contiguous_format)
_PLAIN_DTYPES = frozenset((torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64,
                           torch.complex128, torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32,
                           torch.int64))


class _Fill:
    __slots__ = ("fn", "value", "out", "nbytes", "host")

    def __init__(self, shape, dtype, value):
        npdtype = dtypes.to_np(dtype)
        self.value = jnp.asarray(value)  # the scalar as fill_ receives it (never a storage's buffer)
        self.fn = _fill_fn(shape, npdtype, self.value.dtype)
        self.out = [(shape, npdtype)]
        self.nbytes = math.prod(shape) * npdtype.itemsize
        # integer and bool results keep their host values known, as fill_ does (host_mirror)
        self.host = (None if dtype.is_floating_point or dtype.is_complex
                     else np.full(shape, np.asarray(value).astype(npdtype)))


@functools.lru_cache(maxsize=None)
def _fill_fn(shape, npdtype, value_dtype):  # (one executable for every value of a kind: ones and full(1.0))
    return runtime.device_jit(lambda v: (jnp.broadcast_to(v.astype(npdtype), shape),))


def _value_key(value):
    """A cache key that tells apart every value fill_ could treat differently
    (-0.0 from 0.0, 1 from 1.0 from True), or None: not cached (NaN, others)."""
    kind = type(value)
    if kind is float:
        return (kind, value.hex()) if value == value else None
    return (kind, value) if kind in (int, bool) else None


def _filled(name, shape, dtype, value, empty):
    """A fresh row-major ``shape`` tensor of ``dtype`` filled with ``value``;
    ``empty()``: PyTorch's empty tensor that its own path would fill."""
    key = (shape, dtype, _value_key(value))
    fill = _FILLS.get(key)
    if fill is None:
        if key[2] is None or dtype not in _PLAIN_DTYPES or len(_FILLS) + len(_ZEROED_ONCE) >= _MAX_FILLS:
            t = empty()
            return t.zero_() if name == "aten::zero_" else t.fill_(value)
        if name == "aten::zero_" and key not in _ZEROED_ONCE:
            # a small zeros' first call takes zero_'s host-made buffer: a shape
            # seen once compiles nothing (a test's shapes); a second call compiles
            # the cached launch, cheaper per call than a host copy (~5 vs ~30 us)
            _ZEROED_ONCE.add(key)
            return empty().zero_()
        empty()  # its checks and errors (size, dtype, device); the tensor is dropped
        scalar_checks.check_values((value,), dtype, math.prod(shape) == 1)  # fill_'s overflow error
        fill = _FILLS[key] = _Fill(shape, dtype, value)
    elif tpu_dtypes.active:  # on a TPU: float64 warns, complex128 is refused (as empty does)
        tpu_dtypes.entering(dtype)
    (arr,) = launch(name, fill.fn, (fill.value,), fill.out)
    t = buffers.wrap_as(arr, dtype, fill.nbytes, shape, None)
    if fill.host is not None:
        host_mirror.remember(t, fill.host)
    return t


def _filled_like(name, self, value, empty, dtype, layout, device, pin_memory, memory_format):
    # Only the plain case (a row-major tensor, no device/layout/pinning asked):
    # anything else goes PyTorch's way every time.
    if (device is not None or pin_memory or (layout is not None and layout is not torch.strided)
            or memory_format not in _ROW_MAJOR_FORMATS or not self.is_contiguous()):
        return _filled(name, None, None, value, empty)
    shape = tuple(self.shape)
    if memory_format is not torch.contiguous_format and self.stride() != buffers.contiguous_strides(shape):
        return _filled(name, None, None, value, empty)  # preserve_format keeps odd strides of size-1 dims
    return _filled(name, shape, dtype or self.dtype, value, empty)


def _filled_new(name, size, value, empty, dtype, layout, device, pin_memory):
    """ones/zeros/full and new_*: row-major, so only the options matter."""
    if pin_memory or (layout is not None and layout is not torch.strided):
        return _filled(name, None, None, value, empty)
    if device is not None:
        runtime.check_device(device)
    return _filled(name, tuple(size), dtype, value, empty)


def _like_kwargs(dtype, layout, device, pin_memory, memory_format=None):
    return dict(dtype=dtype, layout=layout, device=device, pin_memory=pin_memory, memory_format=memory_format)


def _new_kwargs(dtype, layout, device, pin_memory):
    return dict(dtype=dtype, layout=layout, device=device, pin_memory=pin_memory)


@register_raw("ones_like.default")
def ones_like(self, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    args = (dtype, layout, device, pin_memory, memory_format)
    return _filled_like("aten::fill_", self, 1.0, lambda: torch.empty_like(self, **_like_kwargs(*args)), *args)


@register_raw("zeros_like.default")
def zeros_like(self, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    args = (dtype, layout, device, pin_memory, memory_format)
    return _filled_like("aten::zero_", self, 0, lambda: torch.empty_like(self, **_like_kwargs(*args)), *args)


@register_raw("full_like.default")
def full_like(self, fill_value, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    args = (dtype, layout, device, pin_memory, memory_format)
    return _filled_like("aten::fill_", self, fill_value,
                        lambda: torch.empty_like(self, **_like_kwargs(*args)), *args)


@register_raw("new_ones.default")
def new_ones(self, size, dtype=None, layout=None, device=None, pin_memory=None):
    args = (dtype, layout, device, pin_memory)
    return _filled_new("aten::fill_", size, 1, lambda: self.new_empty(size, **_new_kwargs(*args)),
                       dtype or self.dtype, layout, device, pin_memory)


@register_raw("new_zeros.default")
def new_zeros(self, size, dtype=None, layout=None, device=None, pin_memory=None):
    args = (dtype, layout, device, pin_memory)
    return _filled_new("aten::zero_", size, 0, lambda: self.new_empty(size, **_new_kwargs(*args)),
                       dtype or self.dtype, layout, device, pin_memory)


@register_raw("new_full.default")
def new_full(self, size, fill_value, dtype=None, layout=None, device=None, pin_memory=None):
    args = (dtype, layout, device, pin_memory)
    return _filled_new("aten::fill_", size, fill_value, lambda: self.new_empty(size, **_new_kwargs(*args)),
                       dtype or self.dtype, layout, device, pin_memory)


@register_raw("ones.default")
def ones(size, dtype=None, layout=None, device=None, pin_memory=None):
    args = (dtype, layout, device, pin_memory)
    return _filled_new("aten::fill_", size, 1, lambda: torch.empty(size, **_new_kwargs(*args)),
                       dtype or torch.get_default_dtype(), layout, device, pin_memory)


@register_raw("zeros.default")
def zeros(size, dtype=None, layout=None, device=None, pin_memory=None):
    args = (dtype, layout, device, pin_memory)
    return _filled_new("aten::zero_", size, 0, lambda: torch.empty(size, **_new_kwargs(*args)),
                       dtype or torch.get_default_dtype(), layout, device, pin_memory)


def _full_dtype(value):
    # PyTorch's full without a dtype: bool, int64, the default complex or float dtype
    kind = type(value)
    if kind is bool:
        return torch.bool
    if kind is int:
        return torch.int64
    if kind is complex:
        return torch.complex128 if torch.get_default_dtype() is torch.float64 else torch.complex64
    return torch.get_default_dtype()


@register_raw("full.default")
def full(size, fill_value, dtype=None, layout=None, device=None, pin_memory=None):
    args = (dtype or _full_dtype(fill_value), layout, device, pin_memory)
    return _filled_new("aten::fill_", size, fill_value, lambda: torch.empty(size, **_new_kwargs(*args)), *args)


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
