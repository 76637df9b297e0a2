"""Binned and segmented reductions: ``histogram``, ``histogramdd`` (its bin
edges and counts) and ``segment_reduce`` with its backward, following ATen's
CPU kernels.

Every output shape is static (the bin counts, the number of segments), so the
kernels never read data on the host; only the CPU's data checks do (an input
range that is not finite, lengths that do not add up), in ``indexing.guard``
steps that eager calls run first.

Histogram bins: the edges are the CPU's linspace over [min, max] (or
``range``; an empty range widens by 0.5 each way, an empty input is [0, 1]);
each value falls in the bin whose edges bracket it, the last bin closed,
values outside (and NaN) ignored.  The CPU's linear guess plus local search
lands in the same bin as a binary search over the edges, which is used here.
"""
import jax
import jax.numpy as jnp
import numpy as np
import torch

from .. import dtypes
from . import indexing
from .factory import _ramp
from .registry import guard, register

_FLOATS = (torch.float32, torch.float64)


# ---- histogram / histogramdd ---------------------------------------------------

def _outer_edges(x, n_dims, range_):
    """Each dimension's (leftmost, rightmost) edge, in float64 like the CPU."""
    out = []
    for d in range(n_dims):
        if range_ is not None:
            lo, hi = jnp.float64(range_[2 * d]), jnp.float64(range_[2 * d + 1])
        elif x.shape[0]:
            lo, hi = jnp.min(x[:, d]).astype(np.float64), jnp.max(x[:, d]).astype(np.float64)
        else:
            lo, hi = jnp.float64(0), jnp.float64(1)
        point = lo == hi  # widened like NumPy, so density never divides by 0
        out.append((jnp.where(point, lo - 0.5, lo), jnp.where(point, hi + 0.5, hi)))
    return out


def _bin_edges(x, bins, range_):
    return [_ramp(lo, hi, jnp.asarray(b, np.float64), b + 1, x.dtype)
            for (lo, hi), b in zip(_outer_edges(x, len(bins), range_), bins)]


def _counts(x, edges, weight, density):
    """The d-dimensional histogram of the rows of x (M, N) over the given edges."""
    shape = tuple(e.shape[0] - 1 for e in edges)
    inside = jnp.ones(x.shape[:1], bool)
    flat = jnp.zeros(x.shape[:1], np.int64)
    for d, e in enumerate(edges):
        v = x[:, d]
        inside &= (v >= e[0]) & (v <= e[-1])  # NaN is outside
        pos = jnp.searchsorted(e, v, side="right") - 1
        pos = jnp.clip(pos, 0, shape[d] - 1)  # the last edge belongs to the last bin
        flat = flat * shape[d] + pos
    w = jnp.ones(x.shape[:1], x.dtype) if weight is None else weight.reshape(-1)
    hist = jnp.zeros((int(np.prod(shape)),), x.dtype).at[flat].add(jnp.where(inside, w, 0))
    hist = hist.reshape(shape)
    if density:
        hist = hist / jnp.sum(hist)
        for d, e in enumerate(edges):
            hist = hist / jnp.diff(e).reshape([-1 if i == d else 1 for i in range(len(shape))])
    return hist


@register("histogram.bin_ct", meta=False)
def histogram_bin_ct(self, bins=100, *, range=None, weight=None, density=False):
    x = self.reshape(-1, 1)
    edges = _bin_edges(x, [bins], range)
    return _counts(x, edges, weight, density), edges[0]


@register("histogram.bins_tensor", meta=False)
def histogram_bins_tensor(self, bins, *, weight=None, density=False):
    return _counts(self.reshape(-1, 1), [bins], weight, density), bins


def _rows(self):
    return self.reshape(-1, self.shape[-1])


@register("_histogramdd_bin_edges.default", meta=False)
def histogramdd_bin_edges(self, bins, *, range=None, weight=None, density=False):
    return _bin_edges(_rows(self), list(bins), range)


@register("_histogramdd_from_bin_cts.default", meta=False)
def histogramdd_from_bin_cts(self, bins, *, range=None, weight=None, density=False):
    x = _rows(self)
    return _counts(x, _bin_edges(x, list(bins), range), weight, density)


@register("_histogramdd_from_bin_tensors.default", meta=False)
def histogramdd_from_bin_tensors(self, bins, *, weight=None, density=False):
    return _counts(_rows(self), list(bins), weight, density)


@jax.jit
def _extremes(x):
    return jnp.min(x, axis=0), jnp.max(x, axis=0)


def _histogram_checks(bound, dd):
    """The CPU's argument checks (histogramdd_check_inputs, select_outer_bin_edges)."""
    self, bins, weight = bound["self"], bound["bins"], bound.get("weight")
    name = "torch.histogramdd"
    if dd and self.dim() < 2:
        raise RuntimeError(f"{name}: input tensor should have at least 2 dimensions")
    n = self.shape[-1] if dd else 1
    tensors = isinstance(bins, torch.Tensor) or (isinstance(bins, (list, tuple)) and bins
                                                 and isinstance(bins[0], torch.Tensor))
    bin_list = [bins] if isinstance(bins, (torch.Tensor, int)) else list(bins)
    if self.dtype not in _FLOATS:
        raise NotImplementedError(f'"histogramdd" not implemented for \'{dtypes.aten_name(self.dtype)}\'')
    if tensors:
        if len(bin_list) != n:
            raise RuntimeError(f"{name}: expected {n} sequences of bin edges for a {n}-dimensional "
                               f"histogram but got {len(bin_list)}")
        for d, b in enumerate(bin_list):
            if b.dtype != self.dtype:
                raise RuntimeError(f"{name}: input tensor and bins tensors should have the same dtype, but got "
                                   f"input with dtype {dtypes.aten_name(self.dtype).lower()} and bins for dimension {d} "
                                   f"with dtype {dtypes.aten_name(b.dtype).lower()}")
            if b.dim() != 1:
                raise RuntimeError(f"{name}: bins tensor should have one dimension, but got {b.dim()} "
                                   f"dimensions in the bins tensor for dimension {d}")
            if b.numel() == 0:
                raise RuntimeError(f"{name}: bins tensor should have at least 1 element, but got "
                                   f"{b.numel()} elements in the bins tensor for dimension {d}")
    else:
        if len(bin_list) != n:
            raise RuntimeError("histogramdd: The size of bins must be equal to the innermost dimension of the input.")
        for d, b in enumerate(bin_list):
            if b <= 0:
                raise RuntimeError(f"torch.histogram(): bins must be > 0, but got {b} for dimension {d}")
    if weight is not None:
        if weight.dtype != self.dtype:
            raise RuntimeError(f"{name}: if weight tensor is provided, input tensor and weight tensor should have "
                               f"the same dtype, but got input({dtypes.aten_name(self.dtype).lower()}), and "
                               f"weight({dtypes.aten_name(weight.dtype).lower()})")
        expected = tuple(self.shape[:-1]) if dd else tuple(self.shape)
        if tuple(weight.shape) != expected:
            rows = list(self.shape) if dd else [self.numel(), 1]
            wshape = list(weight.shape) if dd else [weight.numel()]
            raise RuntimeError(f"{name}: if weight tensor is provided it should have the same shape as the input "
                               f"tensor excluding its innermost dimension, but got input with shape {rows} and "
                               f"weight with shape {wshape}")
    if tensors:
        return
    range_ = bound.get("range")
    if range_ is not None:
        if len(range_) != 2 * n:
            raise RuntimeError(f"{name}: for a {n}-dimensional histogram range should have {2 * n} elements, "
                               f"but got {len(range_)}")
        pairs = [(range_[2 * d], range_[2 * d + 1]) for d in range(n)]
    elif self.numel():
        lo, hi = _extremes(indexing._value(self).reshape(-1, n))  # the CPU checks the data's range
        pairs = list(zip(np.asarray(lo).tolist(), np.asarray(hi).tolist()))
    else:
        return
    for d, (lo, hi) in enumerate(pairs):
        if not (np.isfinite(lo) and np.isfinite(hi)):
            raise RuntimeError(f"{name}: dimension {d}'s range [{lo:g}, {hi:g}] is not finite")
        if lo > hi:
            raise RuntimeError(f"{name}: min should not exceed max, but got min {lo:g} max {hi:g} for dimension {d}")


guard("histogram.bin_ct", "histogram.bins_tensor", prepare=lambda b: _histogram_checks(b, False))
guard("_histogramdd_bin_edges.default", "_histogramdd_from_bin_cts.default",
               "_histogramdd_from_bin_tensors.default", prepare=lambda b: _histogram_checks(b, True))


# ---- segment_reduce ------------------------------------------------------------
# Axis ``axis`` of data is cut into segments given by lengths or offsets, which
# carry the leading dims of data as batch dims: (*data.shape[:axis], S[+1]).

_NEUTRAL = {"sum": 0.0, "mean": 0.0, "prod": 1.0, "max": -np.inf, "min": np.inf}


def _reduce_name(reduce):
    return {"amax": "max", "amin": "min"}.get(reduce, reduce)


def _layout(data, lengths, offsets, axis):
    """data as (B, L, I), the offsets as (B, S + 1) and each element's segment
    (B, L) (S for an element outside every segment)."""
    axis = axis % data.ndim
    b = int(np.prod(data.shape[:axis]))
    x = data.reshape(b, data.shape[axis], -1)
    if offsets is None:
        lengths = lengths.reshape(b, -1).astype(np.int64)
        offsets = jnp.concatenate([jnp.zeros((b, 1), np.int64), jnp.cumsum(lengths, axis=1)], axis=1)
    offsets = offsets.reshape(b, -1).astype(np.int64)
    s = offsets.shape[1] - 1
    pos = jnp.arange(x.shape[1])
    seg = jnp.sum(pos[None, :, None] >= offsets[:, None, 1:], axis=2)  # segments started at or before pos
    seg = jnp.where(pos[None, :] >= offsets[:, :1], seg, s)
    return axis, x, offsets, seg, s


def _out_shape(data, axis, s):
    return data.shape[:axis] + (s,) + data.shape[axis + 1:]


@register("segment_reduce.default")
def segment_reduce(data, reduce, *, lengths=None, indices=None, offsets=None, axis=0, unsafe=False,
                   initial=None):
    op = _reduce_name(reduce)
    axis, x, offs, seg, s = _layout(data, lengths, offsets, axis)
    count = (offs[:, 1:] - offs[:, :-1])[:, :, None]
    start = jnp.asarray(_NEUTRAL[op] if initial is None else initial, x.dtype)

    def one(xb, segb):
        if op in ("sum", "mean"):
            return jax.ops.segment_sum(xb, segb, s)
        if op == "prod":
            return jax.ops.segment_prod(xb, segb, s)
        red = jax.ops.segment_max if op == "max" else jax.ops.segment_min
        # the CPU's running max/min keeps a NaN once it meets one
        nan = jax.ops.segment_max(jnp.isnan(xb).astype(np.int8), segb, s) > 0
        return jnp.where(nan, jnp.nan, red(xb, segb, s))

    acc = jax.vmap(one)(x, seg)
    combine = {"max": jnp.maximum, "min": jnp.minimum, "prod": jnp.multiply}.get(op, jnp.add)
    acc = combine(start, acc)  # the initial value (or the neutral one) starts each segment
    if op == "mean":  # an empty segment keeps the initial value, NaN without one
        empty = jnp.nan if initial is None else start
        acc = jnp.where(count > 0, acc / jnp.maximum(count, 1).astype(acc.dtype), empty)
    return acc.reshape(_out_shape(data, axis, s)).astype(data.dtype)


@register("_segment_reduce_backward.default")
def segment_reduce_backward(grad, output, data, reduce, *, lengths=None, offsets=None, axis=0, initial=None):
    op = _reduce_name(reduce)
    axis, x, offs, seg, s = _layout(data, lengths, offsets, axis)
    g = grad.reshape(x.shape[0], s, -1)
    out = output.reshape(x.shape[0], s, -1)
    inside = (seg < s)[:, :, None]
    idx = jnp.minimum(seg, s - 1)[:, :, None] if s else seg[:, :, None]

    def per_elem(v):  # each element's segment value
        return jnp.take_along_axis(v, jnp.broadcast_to(idx, x.shape), axis=1)

    if s == 0:
        return jnp.zeros(data.shape, data.dtype)
    ge = per_elem(g)
    if op == "sum":
        res = ge
    elif op == "mean":
        count = (offs[:, 1:] - offs[:, :-1])[:, :, None]
        res = ge / per_elem(jnp.broadcast_to(jnp.maximum(count, 1), g.shape)).astype(g.dtype)
    elif op in ("max", "min"):
        # the elements equal to the result (and every NaN) share its gradient; the
        # CPU kernel divides only a positive gradient among them (a quirk kept)
        oe = per_elem(out)
        hit = ((x == oe) | jnp.isnan(x)) & inside
        ties = jax.vmap(lambda h, sg: jax.ops.segment_sum(h, sg, s))(hit.astype(x.dtype), seg)
        res = jnp.where(hit, jnp.where(ge > 0, ge / per_elem(jnp.maximum(ties, 1)), ge), 0)
    else:  # prod: grad * output / x, or the product of the others where x is 0 or NaN
        start = jnp.asarray(1.0 if initial is None else initial, x.dtype)
        others = _exclusive_products(x, seg) * start
        direct = ge * per_elem(out) / x
        res = jnp.where((x == 0) | jnp.isnan(x), ge * others, direct)
    res = jnp.where(inside, res, 0)
    return res.reshape(data.shape).astype(data.dtype)


def _exclusive_products(x, seg):
    """For each element, the product of the other elements of its segment:
    segmented prefix and suffix products (a scan that restarts at each new segment)."""
    def scan(v, sg):
        new = jnp.concatenate([jnp.ones_like(sg[:, :1], bool), sg[:, 1:] != sg[:, :-1]], axis=1)[:, :, None]
        new = jnp.broadcast_to(new, v.shape)

        def combine(a, b):
            return jnp.where(b[1], b[0], a[0] * b[0]), a[1] | b[1]
        inclusive, _ = jax.lax.associative_scan(combine, (v, new), axis=1)
        shifted = jnp.concatenate([jnp.ones_like(v[:, :1]), inclusive[:, :-1]], axis=1)
        return jnp.where(new, 1, shifted)  # exclusive: the products before each element
    before = scan(x, seg)
    after = jnp.flip(scan(jnp.flip(x, 1), jnp.flip(seg, 1)), 1)
    return before * after


@jax.jit
def _length_checks(lengths):
    return jnp.min(lengths), jnp.sum(lengths, axis=-1)


def _segment_checks(bound):
    """The CPU's checks of lengths (unless unsafe): no negative length, each row adds up to the axis."""
    data, lengths = bound["data"], bound.get("lengths")
    if lengths is None or bound.get("unsafe", False) or lengths.numel() == 0:
        return
    axis = bound.get("axis", 0) % max(data.dim(), 1)
    low, sums = _length_checks(indexing._value(lengths))
    if int(low) < 0:
        raise RuntimeError("lengths contains negative value!")
    if not bool(np.all(np.asarray(sums) == data.shape[axis])):
        raise RuntimeError("segment_reduce(): Expected all rows of lengths along axis to sum to "
                           "data.size(lengths.dim()-1) when !unsafe.")


guard("segment_reduce.default", prepare=_segment_checks)
