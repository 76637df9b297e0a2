"""Shape and layout ops: fill/zero, cat, flip, roll, tril/triu, searching and
sorting helpers (searchsorted, bucketize, unique, histc), tril/triu_indices.

Views (split, unbind, narrow, diagonal...) need no kernel here: PyTorch
builds them from view metadata.  clone (and so contiguous()) is one launch.
"""
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import torch
from torch._prims_common import canonicalize_dim

from .. import dtypes, runtime
from ..eager import access
from ..eager.launch import launch
from ..storage import buffers
from . import host_mirror
from .registry import entry_of, guard, kernel, out_dtype, register, register_raw


# ---- writes of one value ----------------------------------------------------
# The registry derives fill_/zero_ from these and writes through views.

@register("fill.Scalar", "fill.Tensor", checked_scalars=("value",))
def fill(self, value):
    return jnp.broadcast_to(jnp.asarray(value).astype(out_dtype()), self.shape)


@register("zero.default")
def zero(self):
    return jnp.zeros(self.shape, out_dtype())



# ---- joining and reordering ----------------------------------------------------

@register("cat.default")
def cat(tensors, dim=0):
    # PyTorch's legacy rule: 1-D empty tensors are skipped whatever their rank.
    kept = [t.astype(out_dtype()) for t in tensors if not (t.ndim == 1 and t.shape[0] == 0)]
    if not kept:
        return jnp.zeros((0,), out_dtype())
    return jnp.concatenate(kept, axis=dim)


# clone as one cached launch (PyTorch's composite is empty_strided + copy_:
# two ops' host work).  The meta kernel gives the result's layout for every
# memory_format (a keyword call is matched by the native entry as a
# positional one is: contiguous() of a transposed tensor, channels_last).
_clone_enter = entry_of(kernel("clone.default", lambda self, memory_format=None: self))


@register_raw("clone.default")
def clone(self, memory_format=None):
    if not self.numel():  # (an empty view keeps strides no buffer layout has: empty_like's)
        return torch.empty_like(self, memory_format=memory_format or torch.preserve_format)
    out = _clone_enter(self) if memory_format is None else _clone_enter(self, memory_format=memory_format)
    host_mirror.copy_known(self, out)  # (an index's clone stays range-checked at the op)
    return out


@register("flip.default")
def flip(self, dims):
    # a 0-d tensor accepts dim 0 (or -1), as the CPU does: nothing to flip
    return jnp.flip(self, axis=tuple(dims)) if len(dims) and self.ndim else self


@register("roll.default")
def roll(self, shifts, dims=()):
    if len(dims) == 0:  # no dims: roll the flattened tensor
        return jnp.roll(self.reshape(-1), shifts[0]).reshape(self.shape)
    return jnp.roll(self, tuple(shifts), axis=tuple(dims))


def _check_roll_arguments(bound):
    # the CPU checks the counts before the dims (the meta kernel wraps the dims first)
    shifts, dims = list(bound["shifts"]), list(bound.get("dims", ()))
    if not shifts:
        raise RuntimeError("`shifts` required")
    if (dims or len(shifts) != 1) and len(shifts) != len(dims):
        raise RuntimeError(f"shifts and dimensions must align. shifts: {len(shifts)}, dims:{len(dims)}")


guard("roll.default", prepare=_check_roll_arguments)


@register("tril.default")
def tril(self, diagonal=0):
    return jnp.tril(self, diagonal)


@register("triu.default")
def triu(self, diagonal=0):
    return jnp.triu(self, diagonal)


# ---- index ranges --------------------------------------------------------------

def _triangle_indices(lower, row, col, offset, dtype, device):
    runtime.check_device(device)
    dtype = dtype or torch.int64
    if row < 0 or col < 0:
        raise RuntimeError(f"row must be non-negative, got{row}" if row < 0 else f"col must be non-negative, got{col}")
    fn = _tri_fn(lower, row, col, offset, dtypes.to_np(dtype))
    value = launch("aten::tril_indices" if lower else "aten::triu_indices", fn, ())
    return buffers.wrap(value)


@functools.lru_cache(maxsize=None)
def _tri_fn(lower, row, col, offset, npdtype):
    def run():
        # The index list has a static length (row, col, offset are sizes).
        mask = np.tri(row, col, offset, dtype=bool) if lower else ~np.tri(row, col, offset - 1, dtype=bool)
        r, c = jnp.nonzero(jnp.asarray(mask), size=int(mask.sum()))
        return jnp.stack([r, c]).astype(npdtype)
    return jax.jit(run)


@register_raw("tril_indices.default")
def tril_indices(row, col, offset=0, dtype=None, layout=None, device=None, pin_memory=None):
    return _triangle_indices(True, row, col, offset, dtype, device)


@register_raw("triu_indices.default")
def triu_indices(row, col, offset=0, dtype=None, layout=None, device=None, pin_memory=None):
    return _triangle_indices(False, row, col, offset, dtype, device)


# ---- searching ------------------------------------------------------------------

def _search(seq, values, right):
    side = "right" if right else "left"
    if seq.ndim <= 1:
        return jnp.searchsorted(seq.reshape(-1), values, side=side)
    # Batched: the leading dims of seq and values match; search row by row.
    lead = seq.shape[:-1]
    rows = seq.reshape(-1, seq.shape[-1])
    vals = values.reshape(rows.shape[0], -1)
    out = jax.vmap(lambda s, v: jnp.searchsorted(s, v, side=side))(rows, vals)
    return out.reshape(lead + values.shape[-1:])


def _cpu_twin(a):
    """A zero CPU tensor with ``a``'s shape, strides and dtype (other values as they are)."""
    return torch.zeros_like(a, device="cpu") if isinstance(a, torch.Tensor) else a


def _checked_like_cpu(fn):
    """A signature's first-call check: ``fn`` on CPU twins of the arguments
    raises the CPU's argument errors (dims, dtypes, side, sorter and out=) and
    warns as it does (non-contiguous inputs); none of these read values."""
    def check(args, kwargs):
        fn(*[_cpu_twin(a) for a in args], **{k: _cpu_twin(v) for k, v in kwargs.items()})
    return check


@register("searchsorted.Tensor", "searchsorted.Scalar", first_call_check=_checked_like_cpu(torch.searchsorted))
def searchsorted(sorted_sequence, self, *, out_int32=False, right=False, side=None, sorter=None):
    seq = sorted_sequence
    if sorter is not None:
        seq = jnp.take_along_axis(seq, sorter, axis=-1)
    right = right or side == "right"
    values = jnp.asarray(self)
    common = jnp.promote_types(seq.dtype, values.dtype)
    return _search(seq.astype(common), values.astype(common), right)


@register("bucketize.Tensor", "bucketize.Scalar", first_call_check=_checked_like_cpu(torch.bucketize))
def bucketize(self, boundaries, *, out_int32=False, right=False):
    values = jnp.asarray(self)
    common = jnp.promote_types(boundaries.dtype, values.dtype)
    return jnp.searchsorted(boundaries.astype(common), values.astype(common),
                            side="right" if right else "left")


@register("histc.default")
def histc(self, bins=100, min=0, max=0):
    x = self.reshape(-1)
    # min == max means "use the data's range" (widened by 1 if that is a point too).
    lo = jnp.asarray(min, x.dtype)
    hi = jnp.asarray(max, x.dtype)
    auto = lo == hi
    lo = jnp.where(auto, jnp.min(x, initial=0) if x.size == 0 else jnp.min(x), lo)
    hi = jnp.where(auto, jnp.max(x, initial=0) if x.size == 0 else jnp.max(x), hi)
    point = lo == hi
    lo, hi = jnp.where(point, lo - 1, lo), jnp.where(point, hi + 1, hi)
    inside = (x >= lo) & (x <= hi)
    if jnp.issubdtype(x.dtype, jnp.integer):  # as CUDA's kernel: in int64, the bin by integer division
        lo64, hi64 = lo.astype(np.int64), hi.astype(np.int64)
        pos = (x.astype(np.int64) - lo64) * bins // (hi64 - lo64)
    else:
        pos = ((x - lo) * bins / (hi - lo)).astype(np.int64)
    pos = jnp.clip(jnp.where(x == hi, bins - 1, pos), 0, bins - 1)
    return jnp.zeros((bins,), x.dtype).at[pos].add(inside.astype(x.dtype))


@jax.jit
def _data_range(x):
    return jnp.stack([jnp.min(x), jnp.max(x)]).astype(np.float64)


def _histc_checks(bound):
    # Integer inputs are counted, as CUDA's kernel counts them (the CPU's
    # refuses them; Hugging Face's MoE layers pass ints on every device but
    # the CPU and MPS); bool and complex ones are refused.  With the range
    # taken from the data (min == max), a non-finite one is refused, which
    # reads the data's extremes to the host (CUDA's kernel reads them too).
    self = bound["self"]
    if self.dtype == torch.bool or self.is_complex():
        raise NotImplementedError(f'"histogram_cpu" not implemented for \'{dtypes.aten_name(self.dtype)}\'')
    lo, hi = bound.get("min", 0), bound.get("max", 0)
    if lo == hi and self.numel():
        lo, hi = (float(v) for v in np.asarray(_data_range(access.read(self))))
        if not (math.isfinite(lo) and math.isfinite(hi)):
            raise RuntimeError(f"torch.histc: range of [{lo:g}, {hi:g}] is not finite")


guard("histc.default", prepare=_histc_checks)


# ---- unique (data-dependent size) --------------------------------------------------

@jax.jit
def _distinct_count(x):
    s = jnp.sort(x.reshape(-1))
    return jnp.sum(s[1:] != s[:-1]) + (s.size > 0)


@functools.partial(jax.jit, static_argnames=("n",))
def _unique_kernel(x, n):
    # Runs of the stably sorted values; not jnp.unique, which merges NaNs
    # (the CPU keeps each NaN distinct, last, in input order).
    flat = x.reshape(-1)
    order = jnp.argsort(flat, stable=True)
    values, groups, counts = _unique_consecutive_kernel(flat[order], 0, n)
    inverse = jnp.zeros(order.shape, np.int64).at[order].set(groups)
    return values, inverse.reshape(x.shape), counts


def _no_complex(t, name):
    """The CPU's unique kernels have no complex version."""
    if t.is_complex():
        raise NotImplementedError(f'"{name}" not implemented for \'{dtypes.aten_name(t.dtype)}\'')


@register_raw("_unique2.default")
def _unique2(self, sorted=True, return_inverse=False, return_counts=False):
    _no_complex(self, "unique")
    # The number of distinct values is read to the host, then one jitted kernel
    # with that static size sorts and counts (always sorted, like PyTorch's CPU).
    x = access.read(self)
    n = int(_distinct_count(x)) if self.numel() else 0
    if n == 0:
        values = jnp.zeros((0,), x.dtype)
        inverse, counts = jnp.zeros(x.shape, np.int64), jnp.zeros((0,), np.int64)
    else:
        values, inverse, counts = launch("aten::_unique2", functools.partial(_unique_kernel, n=n), (x,))
    empty = jnp.zeros((0,), np.int64)
    return (buffers.wrap(values),
            buffers.wrap(inverse.astype(np.int64) if return_inverse else empty),
            buffers.wrap(counts.astype(np.int64) if return_counts else empty))


@register_raw("_unique.default")
def _unique(self, sorted=True, return_inverse=False):
    # the older overload (index_fill's backward uses it): _unique2 without counts
    values, inverse, _ = _unique2(self, sorted, return_inverse, False)
    return values, inverse


# ---- more data-dependent sizes: repeat_interleave, unique_consecutive, bincount ---------
# As for unique: one small jitted reduction gives the size, read to the host,
# then a jitted kernel runs with that static size.

def _tpu_value(t, op):
    if t.device.type != "tpu":
        from . import errors
        errors.device_mismatch(op, t)
    return access.read(t)


@jax.jit
def _repeats_stats(r):
    return jnp.stack([jnp.sum(r.astype(np.int64)), jnp.min(r, initial=0).astype(np.int64)])


@functools.partial(jax.jit, static_argnames=("total",))
def _repeat_interleave_kernel(r, total):
    return jnp.repeat(jnp.arange(r.shape[0], dtype=r.dtype), r, total_repeat_length=total)


@register_raw("repeat_interleave.Tensor")
def repeat_interleave(repeats, *, output_size=None):
    if repeats.dim() != 1:
        raise RuntimeError("repeat_interleave only accept 1D vector as repeat")
    if repeats.dtype not in (torch.int32, torch.int64):
        raise RuntimeError("repeats has to be Long or Int tensor")
    r = _tpu_value(repeats, "aten::repeat_interleave")
    total, low = (int(v) for v in np.asarray(_repeats_stats(r)))
    if low < 0:
        raise RuntimeError("repeats can not be negative")
    if output_size is not None and output_size != total:
        raise RuntimeError("allocated size does not match required size")
    value = launch("aten::repeat_interleave", functools.partial(_repeat_interleave_kernel, total=total), (r,))
    return buffers.wrap(value)


def _slices(x, axis):
    """x as (slices along ``axis``, elements of each slice); no -1 in the
    reshape, which is ambiguous when there are no slices."""
    return jnp.moveaxis(x, axis, 0).reshape(x.shape[axis], math.prod(np.delete(x.shape, axis)))


def _run_starts(x, axis):
    """True where a new run begins along ``axis`` (whole slices compared when x has other dims)."""
    moved = _slices(x, axis)
    differs = jnp.any(moved[1:] != moved[:-1], axis=1)  # NaN != NaN: every NaN starts a run
    return jnp.concatenate([jnp.ones((min(x.shape[axis], 1),), bool), differs])


@functools.partial(jax.jit, static_argnames=("axis",))
def _run_count(x, axis):
    return jnp.sum(_run_starts(x, axis))


@functools.partial(jax.jit, static_argnames=("axis", "n"))
def _unique_consecutive_kernel(x, axis, n):
    starts = _run_starts(x, axis)
    first = jnp.nonzero(starts, size=n)[0]
    values = jnp.take(x, first, axis=axis)
    inverse = jnp.cumsum(starts.astype(np.int64)) - 1
    counts = jnp.diff(jnp.append(first, x.shape[axis])).astype(np.int64)
    return values, inverse, counts


def _check_other_dims(t, axis):
    if any(s == 0 for i, s in enumerate(t.shape) if i != axis):
        raise RuntimeError("There are 0 sized dimensions, and they aren't selected, so unique cannot be applied")


def _unique_axis(self, dim):
    """The axis unique(dim=) works along, with the CPU's errors."""
    if self.dim() == 0:
        raise IndexError(f"Dimension specified as {dim} but tensor has no dimensions")
    axis = canonicalize_dim(self.dim(), dim)
    _check_other_dims(self, axis)
    return axis


@register_raw("unique_consecutive.default")
def unique_consecutive(self, return_inverse=False, return_counts=False, dim=None):
    _no_complex(self, "unique")
    x = _tpu_value(self, "aten::unique_consecutive")
    if dim is not None:
        axis = _unique_axis(self, dim)
    else:
        x, axis = x.reshape(-1), 0
    n = int(_run_count(x, axis)) if x.shape[axis] else 0
    values, inverse, counts = launch("aten::unique_consecutive",
                                     functools.partial(_unique_consecutive_kernel, axis=axis, n=n), (x,))
    empty = jnp.zeros((0,), np.int64)
    if dim is None:  # the flat form returns empty tensors for what was not asked
        inverse = inverse.reshape(self.shape) if return_inverse else empty
        counts = counts if return_counts else empty
    return buffers.wrap(values), buffers.wrap(inverse), buffers.wrap(counts)


def _sorted_slices(x, axis):
    """The slices along ``axis`` in lexicographic order (a stable sort, as
    the CPU's), as an (n, -1) array, and the order that sorts them."""
    moved = _slices(x, axis)
    if moved.shape[1] == 0:
        return moved, jnp.arange(moved.shape[0])
    order = jnp.lexsort(moved.T[::-1])  # lexsort's last key is the primary one
    return moved[order], order


@functools.partial(jax.jit, static_argnames=("axis",))
def _distinct_slices(x, axis):
    return jnp.sum(_run_starts(_sorted_slices(x, axis)[0], 0))


@functools.partial(jax.jit, static_argnames=("axis", "n"))
def _unique_dim_kernel(x, axis, n):
    rows, order = _sorted_slices(x, axis)
    starts = _run_starts(rows, 0)
    first = jnp.nonzero(starts, size=n)[0]
    slices = rows[first].reshape((n,) + tuple(np.delete(x.shape, axis)))
    inverse = jnp.zeros(order.shape, np.int64).at[order].set(jnp.cumsum(starts.astype(np.int64)) - 1)
    counts = jnp.diff(jnp.append(first, rows.shape[0])).astype(np.int64)
    return jnp.moveaxis(slices, 0, axis), inverse, counts


@register_raw("unique_dim.default")
def unique_dim(self, dim, sorted=True, return_inverse=False, return_counts=False):
    # torch.unique(x, dim=d): distinct slices, always sorted and always with
    # inverse and counts, as on the CPU
    _no_complex(self, "unique_dim")
    axis = _unique_axis(self, dim)
    x = _tpu_value(self, "aten::unique_dim")
    n = int(_distinct_slices(x, axis)) if x.shape[axis] else 0
    values, inverse, counts = launch("aten::unique_dim", functools.partial(_unique_dim_kernel, axis=axis, n=n), (x,))
    return buffers.wrap(values), buffers.wrap(inverse), buffers.wrap(counts)


@jax.jit
def _bincount_stats(x):
    x = x.astype(np.int64)  # in uint8, initial=-1 would read as 255: 256 bins for any input
    return jnp.stack([jnp.min(x, initial=0), jnp.max(x, initial=-1)])


@functools.partial(jax.jit, static_argnames=("length", "dtype"))
def _bincount_kernel(x, weights, length, dtype):
    w = jnp.ones(x.shape, dtype) if weights is None else weights.astype(dtype)
    return jnp.zeros((length,), dtype).at[x].add(w)


@register_raw("bincount.default")
def bincount(self, weights=None, minlength=0):
    if self.is_floating_point() or self.is_complex() or self.dtype == torch.bool:  # the CPU's dtype dispatch
        raise NotImplementedError(f'"bincount_cpu" not implemented for \'{dtypes.aten_name(self.dtype)}\'')
    if self.dim() != 1:
        raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
    if minlength < 0:
        raise RuntimeError("minlength should be >= 0")
    if weights is not None and (weights.dim() != 1 or weights.shape[0] != self.shape[0]):
        raise RuntimeError("weights should be 1-d and have the same length as input")
    x = _tpu_value(self, "aten::bincount")
    w = None if weights is None else _tpu_value(weights, "aten::bincount")
    low, high = (int(v) for v in np.asarray(_bincount_stats(x)))
    if low < 0:
        raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
    # CPU: counts are int64; float32 weights sum in float32, any other weights in float64
    dtype = np.dtype(np.int64) if w is None else np.dtype(np.float32 if weights.dtype == torch.float32 else np.float64)
    value = launch("aten::bincount", functools.partial(_bincount_kernel, length=max(high + 1, minlength), dtype=dtype),
                   (x, w))
    return buffers.wrap(value)


# ---- unfold's gradient ------------------------------------------------------------

@register("unfold_backward.default")
def unfold_backward(grad_in, input_sizes, dim, size, step):
    """The gradient of ``unfold(dim, size, step)``: window w's element k adds
    back to position w*step + k along ``dim`` (windows may overlap)."""
    if len(input_sizes) == 0:  # a 0-dim input unfolds to one window of size 1
        return grad_in.reshape(())
    dim %= len(input_sizes)
    g = jnp.moveaxis(grad_in, dim, -2)  # (..., windows, size)
    where = np.arange(g.shape[-2])[:, None] * step + np.arange(size)[None, :]
    out = jnp.zeros(g.shape[:-2] + (int(input_sizes[dim]),), grad_in.dtype)
    return jnp.moveaxis(out.at[..., where].add(g), -1, dim)


# ---- the gradients of slicing ------------------------------------------------------
# PyTorch's composites are a zeros and a copy into its slice (two launches,
# and two trips through Python on autograd's thread for every slice in a
# forward: Llama's rotate_half, a split of q, k and v); here the gradient is
# padded into place, a data move exact in every dtype, in one launch.

def _placed(grad, input_sizes, dim, start, count, step):
    """``grad`` (``count`` elements along ``dim``) at ``start``, ``start +
    step``, ... of a zero tensor of ``input_sizes``."""
    if count == 0:
        return jnp.zeros(tuple(input_sizes), grad.dtype)
    high = input_sizes[dim] - (start + (count - 1) * step + 1)
    config = [(0, 0, 0)] * grad.ndim
    config[dim] = (start, high, step - 1)
    return jax.lax.pad(grad, jnp.zeros((), grad.dtype), config)


@register("slice_backward.default")
def slice_backward(grad_output, input_sizes, dim, start, end, step):
    input_sizes = [int(s) for s in input_sizes]
    dim = canonicalize_dim(len(input_sizes), dim)
    first, stop, step = slice(start, end, step).indices(input_sizes[dim])  # aten::slice's clamping
    return _placed(grad_output, input_sizes, dim, first, len(range(first, stop, step)), step)


@register("select_backward.default")
def select_backward(grad_output, input_sizes, dim, index):
    input_sizes = [int(s) for s in input_sizes]
    dim = canonicalize_dim(len(input_sizes), dim)
    index = index + input_sizes[dim] if index < 0 else index
    return _placed(jnp.expand_dims(grad_output, dim), input_sizes, dim, index, 1, 1)
