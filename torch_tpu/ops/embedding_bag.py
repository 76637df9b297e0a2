"""``F.embedding_bag``: ``_embedding_bag`` (and ``_forward_only``), its dense
backward and the per-sample-weights backward, following ATen's CPU kernels.

The number of bags is ``offsets``' length (less one with include_last_offset),
so every shape is static: each index's bag (``offset2bag``) is a cumulative
count of the bag starts, and the bags are segment reductions over it.  Like
the CPU, include_last_offset ignores the last offset (the last bag runs to the
end of ``indices``), and indices equal to ``padding_idx`` are skipped and not
counted in ``bag_size``.

The outputs have the meta kernel's shapes; their values are the CPU's where
the CPU defines them (``bag_size`` is 0 in sum mode, as on the CPU; the CPU's
sum fast path leaves ``offset2bag`` empty, here it is always filled, which
is what the backward wants anyway).  One CPU quirk is kept: with
include_last_offset, no padding_idx and a non-double weight, sum and mean
stop the last bag at the last offset (the fast path) while ``bag_size``
still counts to the end.
"""
import jax
import jax.numpy as jnp
import numpy as np
import torch

from ..dtypes import to_opmath
from . import indexing
from .division import true_div
from .registry import guard, register, register_raw

SUM, MEAN, MAX = 0, 1, 2


def _offset2bag(n, offsets, num_bags):
    """The bag of each of the n indices: +1 at each bag start, cumulated (ATen's make_offset2bag)."""
    marks = jnp.zeros((n + 1,), np.int64).at[offsets[:num_bags]].add(1, mode="drop")
    return jnp.cumsum(marks.at[0].add(-1))[:n]


def _max_bags(rows, indices, keep, bag, num_bags):
    """Each bag's max per column and the index it came from.  The CPU loop keeps
    the bag's first row and replaces it only by a strictly greater value, so a
    NaN in the first row stays and a later NaN never wins; ties keep the first."""
    n = rows.shape[0]
    if n == 0 or num_bags == 0:
        return jnp.zeros((num_bags, rows.shape[1]), rows.dtype), jnp.zeros((num_bags, rows.shape[1]), np.int64)
    pos = jnp.arange(n)
    first = jax.ops.segment_min(jnp.where(keep, pos, n), bag, num_bags)
    top = jax.ops.segment_max(jnp.where(keep[:, None] & ~jnp.isnan(rows), rows, -jnp.inf), bag, num_bags)
    hit = keep[:, None] & (rows == top[jnp.clip(bag, 0, num_bags - 1)])
    win = jax.ops.segment_min(jnp.where(hit, pos[:, None], n), bag, num_bags)
    first_row = rows[jnp.minimum(first, n - 1)]
    win = jnp.where(jnp.isnan(first_row), first[:, None], win)
    empty = (first >= n)[:, None]  # an empty segment's min is the dtype's max
    win = jnp.minimum(win, n - 1)
    out = jnp.where(empty, 0, jnp.take_along_axis(rows, win, axis=0))
    return out, jnp.where(empty, 0, indices[win])


def embedding_bag(weight, indices, offsets, scale_grad_by_freq=False, mode=SUM, sparse=False,
                  per_sample_weights=None, include_last_offset=False, padding_idx=-1):
    n, dim = indices.shape[0], weight.shape[1]
    num_bags = offsets.shape[0] - int(include_last_offset)
    bag = _offset2bag(n, offsets, num_bags)
    keep = indices != padding_idx if padding_idx >= 0 else jnp.ones((n,), bool)
    rows = to_opmath(weight)[indices] if n else jnp.zeros((0, dim), to_opmath(weight).dtype)
    counts = jax.ops.segment_sum(keep.astype(np.int64), bag, num_bags)
    bag_size = jnp.zeros((offsets.shape[0],), np.int64)
    if mode != SUM:
        bag_size = bag_size.at[:num_bags].set(counts)
    max_indices = jnp.zeros((0,), np.int64)
    if mode == MAX:
        out, max_indices = _max_bags(rows, indices, keep, bag, num_bags)
    else:
        if per_sample_weights is not None:
            rows = rows * to_opmath(per_sample_weights)[:, None]
        summed = keep
        if include_last_offset and padding_idx < 0 and weight.dtype != np.float64 and n:
            # the CPU's fast path (float/half/bfloat16, no padding_idx) ends the
            # last bag at the last offset, unlike offset2bag and bag_size
            summed = keep & (jnp.arange(n) < offsets[-1])
        out = jax.ops.segment_sum(jnp.where(summed[:, None], rows, 0), bag, num_bags)
        if mode == MEAN:
            out = true_div(out, jnp.maximum(counts, 1).astype(out.dtype)[:, None])  # (not "* 1/count")
    return out.astype(weight.dtype), bag, bag_size, max_indices


register("_embedding_bag.default", "_embedding_bag_forward_only.default")(embedding_bag)


@register("_embedding_bag_dense_backward.default")
def embedding_bag_dense_backward(grad, indices, offset2bag, bag_size, maximum_indices, num_weights,
                                 scale_grad_by_freq, mode, per_sample_weights, padding_idx=-1):
    g = to_opmath(grad)
    num_bags, dim = g.shape
    out = jnp.zeros((num_weights, dim), g.dtype)
    if mode == MAX:
        # each non-empty bag's gradient goes to the row its max came from
        nonempty = (bag_size[:num_bags] > 0)[:, None]
        rows = jnp.where(nonempty, maximum_indices, num_weights)
        return out.at[rows, jnp.arange(dim)[None, :]].add(jnp.where(nonempty, g, 0), mode="drop")
    if indices.shape[0] == 0:
        return out
    contrib = g[offset2bag]
    if scale_grad_by_freq:
        # each index's own frequency, as CUDA does; torch 2.13's CPU kernel divides
        # by another index's count when counts differ (pytorch#190063, fixed upstream)
        counts = jnp.zeros((num_weights,), g.dtype).at[indices].add(1)
        contrib = contrib / counts[indices][:, None]
    if mode == MEAN:
        contrib = contrib / bag_size[offset2bag].astype(g.dtype)[:, None]
    if per_sample_weights is not None:
        contrib = contrib * to_opmath(per_sample_weights)[:, None]
    if padding_idx >= 0:  # the padding row never receives gradient
        contrib = jnp.where((indices == padding_idx)[:, None], 0, contrib)
    return out.at[indices].add(contrib)


@register("_embedding_bag_per_sample_weights_backward.default")
def embedding_bag_per_sample_weights_backward(grad, weight, indices, offsets, offset2bag, mode,
                                              padding_idx=-1):
    if mode != SUM:
        raise RuntimeError("embedding_bag_backward: per_sample_weights only supported for mode='sum'")
    if indices.shape[0] == 0:
        return jnp.zeros((0,), grad.dtype)
    dots = jnp.sum(to_opmath(grad)[offset2bag] * to_opmath(weight)[indices], axis=1)
    if padding_idx >= 0:
        dots = jnp.where(indices == padding_idx, 0, dots)
    return dots


@register_raw("_embedding_bag_backward.default")
def embedding_bag_backward(grad, indices, offsets, offset2bag, bag_size, maximum_indices, num_weights,
                           scale_grad_by_freq, mode, sparse, per_sample_weights, padding_idx=-1):
    # ATen's dispatch: sparse gradients are the composite sparse backward
    aten = torch.ops.aten
    if sparse:
        return aten._embedding_bag_sparse_backward(grad, indices, offsets, offset2bag, bag_size, num_weights,
                                                   scale_grad_by_freq, mode, per_sample_weights, padding_idx)
    return aten._embedding_bag_dense_backward(grad, indices, offset2bag, bag_size, maximum_indices, num_weights,
                                              scale_grad_by_freq, mode, per_sample_weights, padding_idx)


@jax.jit
def _ends(x):
    return jnp.stack([x[0], x[-1]]).astype(np.int64)


def _prepare(bound):
    """The CPU's data checks (offsets' ends, indices' range), read on the host."""
    weight, indices, offsets = bound["weight"], bound["indices"], bound["offsets"]
    if indices.dtype not in (torch.int32, torch.int64) or offsets.dtype not in (torch.int32, torch.int64):
        return  # the meta kernel raises PyTorch's dtype error
    for t, name, dims in ((indices, "input has to be a 1D or 2D", (1, 2)), (offsets, "offsets has to be a 1D", (1,)),
                          (weight, "weight has to be a 2D", (2,))):
        if t.dim() not in dims:  # (the meta kernel checks none of them: an offsets of any rank went through)
            raise RuntimeError(f"{name} Tensor, but got Tensor of dimension {t.dim()}")
    if offsets.dim() == 1 and offsets.numel() > 0:
        first, last = (int(v) for v in np.asarray(_ends(indexing._value(offsets))))
        if first != 0:
            raise RuntimeError(
                "offsets[0] has to be 0, i.e., the first sequence in the mini-batch has to start from "
                f"position 0. However, got {first}")
        n = indices.shape[0]
        if last > n:
            raise RuntimeError(
                f"offsets[-1] can not be greater than input's length {n} but got offsets[-1] of {last}")
    rows = weight.shape[0]
    r = indexing._index_range(indices)
    if r is not None and (r[0] < 0 or r[1] >= rows):
        host = np.asarray(indexing._value(indices)).reshape(-1)
        k = int(np.flatnonzero((host < 0) | (host >= rows))[0])
        padding_idx = bound.get("padding_idx", -1)
        if bound.get("mode", SUM) != MAX and (padding_idx is None or padding_idx < 0) and \
                weight.dtype in (torch.float32, torch.float16, torch.bfloat16):  # the CPU's fast path's words
            raise RuntimeError(f"Index {k} of input takes value {int(host[k])} which is not in the valid "
                               f"range [0, {rows})")
        raise RuntimeError(f"embedding_bag: Expected idx >= 0 && idx < num_embeddings but found idx to be "
                           f"{int(host[k])}")


guard("_embedding_bag.default", "_embedding_bag_forward_only.default", prepare=_prepare)
