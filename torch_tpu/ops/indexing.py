"""Indexing ops: advanced indexing (index / index_put), gather/scatter,
index_select/add/copy/fill, masked ops, nonzero, take/put.

Out-of-range indices: XLA clamps or drops them silently, PyTorch raises.  So
each op with an index argument checks its range: a CPU index tensor directly,
before the op; a tpu one through its min and max, computed on the device with
the op and looked at when the host next waits (``eager/checks.py``: no sync
per op, as CUDA's device-side asserts).  The messages and exception types are
PyTorch's CPU ones.

Data-dependent shapes (nonzero, masked_select, boolean-mask indexing): the
count is read to the host, then a jitted kernel runs with that static size.
"""
import functools
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import torch
from jax import lax
from torch._prims_common import alert_not_deterministic

from .. import dtypes
from ..eager import access, checks
from ..eager.launch import launch
from ..storage import buffers
from . import core, errors, host_mirror, out_checks
from .division import true_div
from .registry import KERNELS, guard, out_dtype, register, register_raw, resolve

_aten = torch.ops.aten


# ---- host-side checks ---------------------------------------------------------

def _min_max_of(idx, xp=jnp):  # xp=numpy: on the host (``checks.defer(host=True)``)
    return xp.stack([xp.min(idx).astype(np.int64), xp.max(idx).astype(np.int64)])


_min_max = jax.jit(_min_max_of)
_MIN_MAX = ((2,), np.dtype(np.int64))  # its result's shape and dtype


def _value(t):
    """A tensor's value as a jax array, from either device."""
    return access.read(t) if t.device.type == "tpu" else core.to_device_array(t)


_SMALL = 512  # up to this many values, Python's min/max over a list costs less than two NumPy calls


def _extremes(host):
    """(min, max) of a non-empty host array, as Python ints."""
    if host.size <= _SMALL:
        values = host.ravel().tolist()
        return int(min(values)), int(max(values))  # (int: a bool array's are bools)
    return int(host.min()), int(host.max())


def _index_range(index):
    """(min, max) of an index tensor on the host, or None when it is empty."""
    if index.numel() == 0:
        return None
    if index.device.type == "cpu":
        return _extremes(dtypes.numpy_from_cpu_tensor(index))
    lo, hi = np.asarray(_min_max(access.read(index)))
    return int(lo), int(hi)


def _check_range(index, low, high, error):
    """Raise ``error(bad_value)`` unless every index lies in [low, high): at
    once for a CPU index or a tpu one whose host values are known
    (``host_mirror``: built from a list or copied from the CPU), else at the
    next host wait (``checks``)."""
    if index.numel() == 0:
        return

    def verdict(lo_hi):
        lo, hi = (int(v) for v in lo_hi)
        return error(hi) if hi >= high else error(lo) if lo < low else None

    host = dtypes.numpy_from_cpu_tensor(index) if index.device.type == "cpu" else host_mirror.recall(index)
    if host is not None:  # values known on the host: check now, as the CPU does
        failure = verdict(_extremes(host))
        if failure is not None:
            raise failure
        return
    checks.defer(index, _min_max_of, _MIN_MAX, verdict, host=True)


def _dim_size(t, dim):
    """Size of ``dim`` (a 0-dim tensor counts as size 1); None for an invalid dim
    (the meta kernel then raises PyTorch's error)."""
    n = max(t.dim(), 1)
    if not -n <= dim < n:
        return None
    return t.shape[dim] if t.dim() else 1


def _dim_error(exc, dim, size):
    if size == 0:  # the CPU's wording for an empty dimension
        return lambda v: exc("index is out of bounds for dimension with size 0")
    return lambda v: exc(f"index {v} is out of bounds for dimension {dim} with size {size}")


# ---- nonzero and boolean masks (data-dependent sizes) ---------------------------

@jax.jit
def _count_nonzero(x):
    return jnp.count_nonzero(x)


@functools.partial(jax.jit, static_argnames=("n",))
def _nonzero_kernel(x, n):
    if x.ndim == 0:
        return jnp.zeros((n, 0), np.int64)
    return jnp.stack(jnp.nonzero(x, size=n), axis=1).astype(np.int64)


def _nonzero_array(x):
    n = int(_count_nonzero(x))  # the one host read: the result's size
    return launch("aten::nonzero", functools.partial(_nonzero_kernel, n=n), (x,))


@register_raw("nonzero.default")
def nonzero(self):
    value = _nonzero_array(_value(self))
    return buffers.wrap(value)


@register_raw("nonzero.out")
def nonzero_out(self, *, out):
    if out.dtype != torch.long:
        raise RuntimeError("nonzero: Expected out tensor to have scalar type Long but got scalar type"
                           f"{errors.scalar_type_name(out.dtype)}")
    value = _nonzero_array(_value(self))
    out_checks.resize_output(out, value.shape)
    access.write(out, value)
    return out


@register("nonzero_static.default")
def nonzero_static(self, *, size, fill_value=-1):
    if self.ndim == 0:
        return jnp.full((size, 0), fill_value, np.int64)
    return jnp.stack(jnp.nonzero(self, size=size, fill_value=fill_value), axis=1)


def _check_mask_shape(mask, self, start):
    for k, s in enumerate(mask.shape):
        if start + k >= self.dim() or self.shape[start + k] != s:
            raise IndexError(
                f"The shape of the mask {list(mask.shape)} at index {k} does not match the shape "
                f"of the indexed tensor {list(self.shape)} at index {start + k}")


def _mask_to_indices(mask):
    """A bool/uint8 mask -> one long tpu tensor per dim it indexes."""
    coords = _nonzero_array(_value(mask))
    return [buffers.wrap(coords[:, k]) for k in range(mask.dim())]


def _is_mask_fill(bound):
    """``x[mask] = v`` with the mask the only index and one value for every
    selected element: the kernel puts it with a where over the mask (its
    ``_mask_put``), so no host read of the count and no shape that changes
    with it (a new count would compile a new nonzero and index_put)."""
    values = bound.get("values")
    given = [i for i in bound["indices"] if i is not None]
    return (values is not None and values.numel() == 1 and not bound.get("accumulate")
            and len(given) == 1 and given[0].dtype in (torch.bool, torch.uint8))


def _prepare_indices(bound):
    """Boolean masks become long indices (but a mask fill keeps its mask);
    every long index is range-checked."""
    self, indices = bound["self"], bound["indices"]
    keep_mask = _is_mask_fill(bound)
    out, dim = [], 0
    for idx in indices:
        if idx is None:
            out.append(None)
            dim += 1
        elif idx.dtype in (torch.bool, torch.uint8):
            if idx.dtype == torch.uint8:
                errors.warn_at_caller("indexing with dtype torch.uint8 is now deprecated, please use a "
                                      "dtype torch.bool instead.")
            _check_mask_shape(idx, self, dim)
            out.extend([idx] if keep_mask else _mask_to_indices(idx))
            dim += idx.dim()
        else:
            if idx.is_floating_point() or idx.is_complex():
                raise IndexError("tensors used as indices must be long, int, byte or bool tensors")
            if dim < self.dim():
                size = self.shape[dim]
                _check_range(idx, -size, size, _dim_error(IndexError, dim, size))
            out.append(idx)
            dim += 1
    bound["indices"] = out
    if "values" in bound:
        values = bound["values"]
        _check_values_fit(self, out, values)  # the CPU checks shapes first
        if keep_mask:
            bound["values"] = values.reshape(())  # the one value, for every selected element
        if values.dtype != self.dtype:
            raise RuntimeError(
                "Index put requires the source and destination dtypes match, got "
                f"{errors.scalar_type_name(self.dtype)} for the destination and "
                f"{errors.scalar_type_name(values.dtype)} for the source.")


def _check_values_fit(self, indices, values):
    """``x[indices] = values`` needs values expandable to the indexing result
    (else the CPU's message, not a JAX broadcasting failure)."""
    advanced = [k for k, i in enumerate(indices) if i is not None]
    v = list(values.shape)
    if not advanced:  # no index at all (index_put(x, [], v)): v must broadcast to x
        if len(v) > self.dim() or not all(a in (1, b) for a, b in zip(reversed(v), reversed(self.shape))):
            raise RuntimeError(f"shape mismatch: value tensor of shape {v} cannot be broadcast to "
                               f"indexing result of shape {list(self.shape)}")
        return
    try:
        middle = list(torch.broadcast_shapes(*(indices[k].shape for k in advanced)))
    except RuntimeError:
        shapes = ", ".join(str(list(indices[k].shape)) for k in advanced)
        raise IndexError(f"shape mismatch: indexing tensors could not be broadcast together with shapes {shapes}") from None
    plain = [self.shape[d] for d in range(self.dim()) if d >= len(indices) or indices[d] is None]
    if advanced == list(range(advanced[0], advanced[-1] + 1)):  # adjacent: the result keeps their place
        before = [self.shape[d] for d in range(advanced[0])]
        result = before + middle + plain[len(before):]
    else:
        result = middle + plain
    fits = len(v) <= len(result) or all(s == 1 for s in v[:len(v) - len(result)])
    fits = fits and all(a in (1, b) for a, b in zip(reversed(v), reversed(result)))
    if not fits:
        raise RuntimeError(f"shape mismatch: value tensor of shape {v} cannot be broadcast to "
                           f"indexing result of shape {result}")


def _key(indices):
    return tuple(slice(None) if i is None else i for i in indices)


# ---- advanced indexing --------------------------------------------------------------

def index(self, indices):
    return self[_key(indices)]


# functorch registers index.Tensor for PrivateUse1 too; replacing it is intended.
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    register("index.Tensor", allow_cpu=("indices",))(index)


@register("index_put.default", "_index_put_impl.default", allow_cpu=("indices",))
def index_put(self, indices, values, accumulate=False, unsafe=False):
    values = values.astype(self.dtype)
    masks = [k for k, i in enumerate(indices) if i is not None and i.dtype in (np.bool_, np.uint8)]
    if masks:  # only in graphs: eager turns masks into indices first (_prepare_indices)
        return _mask_put(self, masks[0], indices[masks[0]], values, accumulate)
    if accumulate and self.dtype == np.bool_:  # True + True stays True: a logical or
        return self.astype(np.uint8).at[_key(indices)].max(values.astype(np.uint8)).astype(np.bool_)
    at = self.at[_key(indices)]
    return at.add(values) if accumulate else at.set(values)


def _mask_put(self, k, mask, values, accumulate):
    """``self[:, ..., mask] = values``, the mask on dims k.. and the only index,
    with values the same for every selected element (the lowering checks):
    values line up with (dims before k, selected, dims after the mask)."""
    trailing = self.ndim - k - mask.ndim
    if values.ndim > trailing:  # drop the (size 1) selected-elements dim, put the mask's dims there
        values = values.reshape(values.shape[:values.ndim - trailing - 1] + values.shape[values.ndim - trailing:])
        values = values.reshape(values.shape[:values.ndim - trailing] + (1,) * mask.ndim
                                + values.shape[values.ndim - trailing:])
    spread = jnp.broadcast_to(values, self.shape)
    where = jnp.broadcast_to(mask.astype(bool).reshape((1,) * k + mask.shape + (1,) * trailing), self.shape)
    if accumulate:
        return self + jnp.where(where, spread, jnp.zeros((), self.dtype))
    return jnp.where(where, spread, self)


with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    guard("index.Tensor", "index_put.default", "_index_put_impl.default", prepare=_prepare_indices)


# ---- gather / scatter ----------------------------------------------------------------

def _as_1d(x):
    return x.reshape(1) if x.ndim == 0 else x


def _prepare_gather_like(bound):
    # gather/scatter indices must lie in [0, size): no negative wrap on the CPU either.
    self, dim, index = bound["self"], bound["dim"], bound["index"]
    size = _dim_size(self, dim)
    if size is not None:
        _check_range(index, 0, size, _dim_error(RuntimeError, dim % max(self.dim(), 1), size))


@register("gather.default")
def gather(self, dim, index, sparse_grad=False):
    shape = index.shape
    if index.size == 0:  # the CPU checks nothing else then: any rank, any index dtype
        return jnp.zeros(shape, self.dtype)
    src, index = _as_1d(self), _as_1d(index)
    dim = dim % src.ndim
    # index may be smaller than self off ``dim``: read only the matching block.
    block = src[tuple(slice(None) if d == dim else slice(0, index.shape[d]) for d in range(src.ndim))]
    return jnp.take_along_axis(block, index, axis=dim).reshape(shape)


def _scatter_coords(index, dim):
    return tuple(index if d == dim else lax.broadcasted_iota(np.int64, index.shape, d)
                 for d in range(index.ndim))


def _scatter(self, dim, index, src, how):
    """self with src[i] combined into self[coords(i)] for every i of index."""
    if index.size == 0:  # as gather: the CPU checks nothing else then (any rank, any src shape)
        return self
    shape = self.shape
    out, index = _as_1d(self), _as_1d(index)
    dim = dim % out.ndim
    if jnp.ndim(src):
        src = _as_1d(src)[tuple(slice(0, s) for s in index.shape)]  # src may be larger than index
    src = jnp.broadcast_to(jnp.asarray(src).astype(out.dtype), index.shape)
    if out.dtype == jnp.bool_ and how in _BOOL_REDUCE:  # XLA has no bool add/multiply scatter
        return _scatter(out.astype(jnp.uint8), dim, index, src.astype(jnp.uint8),
                        _BOOL_REDUCE[how]).astype(jnp.bool_).reshape(shape)
    ct = dtypes.opmath(out.dtype)
    if ct != out.dtype and how in _BOOL_REDUCE:
        # the CPU's kernel sums and multiplies half tensors in float32 and rounds once at the end
        # (XLA would round after each update, as index_add's CPU kernel does)
        return _scatter(out.astype(ct), dim, index, src.astype(ct), how).astype(out.dtype).reshape(shape)
    at = out.at[_scatter_coords(index, dim)]
    return getattr(at, how)(src).reshape(shape)


# bool sums and products, as the CPU computes them: or and and
_BOOL_REDUCE = {"add": "max", "multiply": "min"}


_REDUCE = {"add": "add", "sum": "add", "multiply": "multiply", "prod": "multiply",
           "amax": "max", "amin": "min"}


@register("scatter.src", "scatter.value", checked_scalars=("value",))
def scatter(self, dim, index, src=None, value=None):
    return _scatter(self, dim, index, src if value is None else value, "set")


@register("scatter.reduce", "scatter.value_reduce")
def scatter_reduce_legacy(self, dim, index, src=None, value=None, *, reduce):
    return _scatter(self, dim, index, src if value is None else value, _REDUCE[reduce])


@register("scatter_add.default")
def scatter_add(self, dim, index, src):
    return _scatter(self, dim, index, src, "add")


def _identity(reduce, dtype):
    """The value a reduction starts from when include_self=False."""
    if reduce in ("sum", "mean"):
        return 0
    if reduce == "prod":
        return 1
    if jnp.issubdtype(dtype, jnp.inexact):
        return -jnp.inf if reduce == "amax" else jnp.inf
    if dtype == jnp.bool_:
        return reduce == "amin"
    info = jnp.iinfo(dtype)
    return info.min if reduce == "amax" else info.max


@register("scatter_reduce.two")
def scatter_reduce(self, dim, index, src, reduce, *, include_self=True):
    if reduce not in ("sum", "prod", "mean", "amax", "amin"):
        raise RuntimeError(f"reduce argument must be either sum, prod, mean, amax or amin, got {reduce}")
    hit = _scatter(jnp.zeros(self.shape, bool), dim, index, True, "set")
    base = self if include_self else jnp.where(hit, jnp.asarray(_identity(reduce, self.dtype), self.dtype), self)
    if reduce != "mean":
        return _scatter(base, dim, index, src, _REDUCE[reduce])
    total = _scatter(base, dim, index, src, "add")
    count = _scatter(jnp.full(self.shape, 1 if include_self else 0, np.int64), dim, index, 1, "add")
    count = jnp.maximum(count, 1).astype(self.dtype)
    if jnp.issubdtype(self.dtype, jnp.integer):
        mean = total // count
    else:  # the CPU's division (complex: c10's scaled formula, not XLA's); imported late: elementwise
        mean = true_div(total, count)
    return jnp.where(hit, mean, self)


guard("gather.default", "scatter.src", "scatter.value", "scatter.reduce", "scatter.value_reduce",
      "scatter_add.default", "scatter_reduce.two", prepare=_prepare_gather_like)


# ---- index_select / index_add / index_copy / index_fill -------------------------------

def _along(dim, ndim, index):
    return (slice(None),) * (dim % max(ndim, 1)) + (index.reshape(-1),)


@register("index_select.default")
def index_select(self, dim, index):
    if self.ndim == 0:
        return self
    return jnp.take(self, index.reshape(-1), axis=dim % self.ndim)


@register("index_add.default")
def index_add(self, dim, index, source, *, alpha=1):
    out = _as_1d(self)
    update = (_as_1d(source) * alpha).astype(self.dtype)
    if out.dtype == jnp.bool_:  # (XLA has no bool add scatter) or, as the CPU's bool sum
        added = out.astype(jnp.uint8).at[_along(dim, out.ndim, index)].max(update.astype(jnp.uint8))
        return added.astype(jnp.bool_).reshape(self.shape)
    ct = dtypes.opmath(out.dtype)
    if ct != out.dtype and out.ndim > 1 and (isinstance(alpha, (int, float)) and alpha == 1):
        # the CPU adds slices of a half tensor (alpha 1) in float32 and rounds once; one element
        # per index (1-d) it rounds after each add, as XLA's half scatter does
        added = out.astype(ct).at[_along(dim, out.ndim, index)].add(update.astype(ct))
        return added.astype(out.dtype).reshape(self.shape)
    return out.at[_along(dim, out.ndim, index)].add(update).reshape(self.shape)


@register("index_copy.default")
def index_copy(self, dim, index, source):
    out = _as_1d(self)
    return out.at[_along(dim, out.ndim, index)].set(_as_1d(source)).reshape(self.shape)


@register("index_fill.int_Scalar", "index_fill.int_Tensor", checked_scalars=("value",))
def index_fill(self, dim, index, value):
    out = _as_1d(self)
    return out.at[_along(dim, out.ndim, index)].set(jnp.asarray(value).astype(self.dtype)).reshape(self.shape)


@register("index_reduce.default")
def index_reduce(self, dim, index, source, reduce, *, include_self=True):
    """Source slice i reduced into self's slice index[i] along ``dim``; with
    include_self=False the indexed slices start from the reduction's identity.
    mean divides by the count (self counting once if included), flooring for
    integers like the CPU; amax/amin propagate NaN."""
    out = _as_1d(self)
    dim = dim % out.ndim
    where = _along(dim, out.ndim, index)
    src = _as_1d(source).astype(out.dtype)
    if not include_self:
        out = out.at[where].set(jnp.asarray(_identity(reduce, out.dtype), out.dtype))
    at = out.at[where]
    if reduce == "prod":
        out = at.multiply(src)
    elif reduce == "amax":
        out = at.max(src)
    elif reduce == "amin":
        out = at.min(src)
    else:  # mean
        out = at.add(src)
        counts = jnp.zeros((out.shape[dim],), np.int64).at[index.reshape(-1)].add(1)
        counts = counts + int(include_self)
        counts = jnp.where(counts == 0, 1, counts).reshape((-1,) + (1,) * (out.ndim - dim - 1))
        if jnp.issubdtype(out.dtype, jnp.inexact):  # the CPU's division (XLA's of a broadcast count: an ulp off)
            out = true_div(out, counts.astype(out.dtype))
        else:
            out = jnp.floor_divide(out, counts.astype(out.dtype))
    return out.reshape(self.shape)


def _prepare_dim_index(low, message):
    """Bounds check for ``index`` along ``dim``: [0, size) or [-size, size)."""
    def prepare(bound):
        self, dim, index = bound["self"], bound["dim"], bound["index"]
        size = _dim_size(self, dim)
        if size is not None:
            d = dim % max(self.dim(), 1)
            _check_range(index, -size if low else 0, size,
                         lambda v: IndexError(message.format(v=v, dim=d, size=size)))
    return prepare


guard("index_select.default", "index_add.default", "index_reduce.default",
      prepare=_prepare_dim_index(False, "index out of range in self"))
guard("index_copy.default",
      prepare=_prepare_dim_index(False, "index_copy_(): index {v} is out of bounds for dimension {dim} with size {size}"))
_index_fill_range = _prepare_dim_index(True, "index {v} is out of bounds for dimension {dim} with size {size}")


def _prepare_index_fill(bound):
    """The CPU's refusal of a complex fill value for a non-complex tensor (a
    complex number with a zero imaginary part too), before the index checks."""
    value = bound["value"]
    is_complex = value.is_complex() if isinstance(value, torch.Tensor) else isinstance(value, complex)
    if is_complex and not bound["self"].is_complex():
        raise RuntimeError("index_fill_(): Converting complex Scalar to non-complex type is not supported")
    _index_fill_range(bound)


guard("index_fill.int_Scalar", "index_fill.int_Tensor", prepare=_prepare_index_fill)


# ---- take / put (flat indices, negative wrap) ------------------------------------------

@register("take.default")
def take(self, index):
    return self.reshape(-1)[index]


@register("put.default")
def put(self, index, source, accumulate=False):
    at = self.reshape(-1).at[index.reshape(-1)]
    src = source.reshape(-1).astype(self.dtype)
    return (at.add(src) if accumulate else at.set(src)).reshape(self.shape)


def _prepare_flat(bound):
    n = bound["self"].numel()
    _check_range(bound["index"], -n, n,
                 lambda v: IndexError(f"out of range: tried to access index {v} on a tensor of {n} elements."))


def _prepare_put(bound):
    """put_ without accumulate writes duplicate indices in no set order: the
    CPU alerts in deterministic mode (an error, or a warning with warn_only),
    before any other check."""
    if not bound.get("accumulate", False):
        alert_not_deterministic("put_")
    _prepare_flat(bound)


guard("take.default", prepare=_prepare_flat)
guard("put.default", prepare=_prepare_put)


# ---- masked ops ----------------------------------------------------------------------------

def masked_fill(self, mask, value):
    return jnp.where(mask, jnp.asarray(value).astype(out_dtype()), self)


# The elementwise module may own masked_fill; it is imported first, so keep its kernel.
if resolve("masked_fill.Scalar") not in KERNELS:
    register("masked_fill.Scalar", "masked_fill.Tensor", checked_scalars=("value",))(masked_fill)


@register("masked_scatter.default")
def masked_scatter(self, mask, source):
    mask = jnp.broadcast_to(mask, jnp.broadcast_shapes(mask.shape, self.shape))
    base = jnp.broadcast_to(self, mask.shape)
    # The k-th True position takes source's k-th element (row-major order).
    pos = jnp.cumsum(mask.reshape(-1)) - 1
    src = source.reshape(-1)
    picked = src[jnp.clip(pos, 0, max(src.shape[0] - 1, 0))] if src.shape[0] else jnp.zeros_like(pos, self.dtype)
    return jnp.where(mask.reshape(-1), picked.astype(self.dtype), base.reshape(-1)).reshape(mask.shape)


def _prepare_masked_scatter(bound):
    mask, source = bound["mask"], bound["source"]
    if mask.dtype != torch.bool:
        return  # the meta kernel raises PyTorch's dtype error
    shape = torch.broadcast_shapes(tuple(mask.shape), tuple(bound["self"].shape))
    ones = int(_count_nonzero(jnp.broadcast_to(_value(mask), shape)))  # host read: the check
    if source.numel() < ones:
        raise RuntimeError("Number of elements of source < number of ones in mask")


guard("masked_scatter.default", prepare=_prepare_masked_scatter)


@functools.partial(jax.jit, static_argnames=("n",))
def _masked_select_kernel(x, mask, n):
    shape = jnp.broadcast_shapes(x.shape, mask.shape)
    flat_mask = jnp.broadcast_to(mask, shape).reshape(-1)
    where = jnp.nonzero(flat_mask, size=n)[0]
    return jnp.broadcast_to(x, shape).reshape(-1)[where]


@functools.partial(jax.jit, static_argnames=("shape",))
def _broadcast_count(mask, shape):
    return jnp.count_nonzero(jnp.broadcast_to(mask, shape))


@register_raw("masked_select.default")
def masked_select(self, mask):
    if mask.dtype != torch.bool:
        raise RuntimeError("masked_select: expected BoolTensor for mask")
    for t in (self, mask):
        if t.device.type != "tpu":
            errors.device_mismatch("aten::masked_select", t)
    shape = torch.broadcast_shapes(tuple(self.shape), tuple(mask.shape))
    x, m = access.read(self), access.read(mask)
    n = int(_broadcast_count(m, tuple(shape)))  # the result's size, read to the host
    value = launch("aten::masked_select", functools.partial(_masked_select_kernel, n=n), (x, m))
    return buffers.wrap(value)


@register_raw("masked_select.out")
def masked_select_out(self, mask, *, out):
    value = access.read(masked_select(self, mask))
    out.resize_(value.shape)
    access.write(out, value.astype(dtypes.to_np(out.dtype)))
    return out
