"""Batch norm in pieces: the ops ``nn.SyncBatchNorm`` runs across ranks, and the
``_batch_norm_with_update`` family that exported and compiled models use.

SyncBatchNorm (torch/nn/modules/_functions.py): each rank computes its local
statistics (``batch_norm_stats``), the ranks all-gather them and combine them
into the global ones (``batch_norm_gather_stats_with_counts``, which also
updates the running statistics), then normalize (``batch_norm_elemt``).
Backward reduces the local gradient sums (``batch_norm_backward_reduce``),
all-reduces them and forms the input gradient (``batch_norm_backward_elemt``).
ATen has only CUDA kernels for these; we follow their definitions: channels
are dim 1, math in the accumulation dtype (float32 for half types),
statistics in it too, elementwise results in the input's dtype.
"""
import jax.numpy as jnp
import torch
from jax import lax

from ..dtypes import to_opmath
from ..eager import access
from . import nn
from .nn import _bn_axes, _bn_forward, _channel_shape
from .registry import kernel, register, register_raw


def _invstd(var, eps):
    # CUDA's InvStd: a constant channel with eps == 0 gets 0, not inf
    return jnp.where((var == 0) & (eps == 0), 0.0, lax.rsqrt(var + eps)).astype(var.dtype)


def _write_running(outs, running_mean, running_var):
    """Store the updated running statistics that follow the two results, in place."""
    updated = iter(outs[2:])
    for t in (running_mean, running_var):
        if t is not None:
            access.write(t, access.read(next(updated)))
    return outs[:2]


# ---- SyncBatchNorm ---------------------------------------------------------------

# meta=False throughout: PyTorch has no meta kernels for the CUDA-only ops
@register("batch_norm_stats.default", meta=False)
def batch_norm_stats(input, eps):
    x = to_opmath(input)
    axes = _bn_axes(x)
    mean = jnp.mean(x, axis=axes)
    var = jnp.mean(jnp.square(x - mean.reshape(_channel_shape(x))), axis=axes)  # biased
    return mean, _invstd(var, eps)


def _gather(input, mean, invstd, running_mean, running_var, momentum, eps, counts):
    """Global (mean, invstd) from each rank's (rows of ``mean``/``invstd``), then
    each running statistic given, updated with the unbiased variance."""
    m, inv = to_opmath(mean), to_opmath(invstd)
    n = counts.astype(m.dtype).reshape(-1, 1)
    total = jnp.sum(n)
    gmean = jnp.sum(n * m, axis=0) / total
    # each rank's biased variance back from its invstd; a rank without
    # elements (count 0) adds nothing, whatever its stats hold
    var = jnp.where(n > 0, 1 / jnp.square(inv) - eps, 0)
    var_n = jnp.sum(n * (var + jnp.square(m - gmean)), axis=0)  # total sum of squared deviations
    outs = (gmean.astype(mean.dtype), _invstd(var_n / total, eps).astype(mean.dtype))
    if running_mean is not None:
        outs += (((1 - momentum) * to_opmath(running_mean) + momentum * gmean).astype(running_mean.dtype),)
    if running_var is not None:
        unbiased = var_n / (total - 1)
        outs += (((1 - momentum) * to_opmath(running_var) + momentum * unbiased).astype(running_var.dtype),)
    return outs


def _gather_one_count(input, mean, invstd, running_mean, running_var, momentum, eps, count):
    counts = jnp.full(mean.shape[:1], count, to_opmath(mean).dtype)
    return _gather(input, mean, invstd, running_mean, running_var, momentum, eps, counts)


_gather_kernel = kernel("batch_norm_gather_stats_with_counts.default", _gather, meta=False)
_gather_one_kernel = kernel("batch_norm_gather_stats.default", _gather_one_count, meta=False)


# The schemas do not mark the running statistics as written, but CUDA updates
# them in place (SyncBatchNorm relies on it), so raw kernels write them back.
@register_raw("batch_norm_gather_stats_with_counts.default")
def batch_norm_gather_stats_with_counts(input, mean, invstd, running_mean, running_var, momentum, eps,
                                        counts):
    outs = _gather_kernel(input, mean, invstd, running_mean, running_var, momentum, eps, counts)
    return _write_running(outs, running_mean, running_var)


@register_raw("batch_norm_gather_stats.default")
def batch_norm_gather_stats(input, mean, invstd, running_mean, running_var, momentum, eps, count):
    outs = _gather_one_kernel(input, mean, invstd, running_mean, running_var, momentum, eps, count)
    return _write_running(outs, running_mean, running_var)


@register("batch_norm_elemt.default", meta=False)
def batch_norm_elemt(input, weight, bias, mean, invstd, eps):
    x = to_opmath(input)
    cs = _channel_shape(x)
    y = (x - to_opmath(mean).reshape(cs)) * to_opmath(invstd).reshape(cs)
    if weight is not None:
        y = y * to_opmath(weight).reshape(cs)
    if bias is not None:
        y = y + to_opmath(bias).reshape(cs)
    return y.astype(input.dtype)


@register("batch_norm_backward_reduce.default", mask=("input_g", "weight_g", "bias_g"),
          mask_of=lambda g: (g[0], g[0], g[1], g[2]))
def batch_norm_backward_reduce(grad_out, input, mean, invstd, weight, input_g, weight_g, bias_g):
    """(sum_dy, sum_dy_xmu) for the input gradient (all-reduced by the caller),
    grad_weight, grad_bias: the ones the flags ask for."""
    x, dy = to_opmath(input), to_opmath(grad_out)
    axes = _bn_axes(x)
    sum_dy = jnp.sum(dy, axis=axes)
    sum_dy_xmu = jnp.sum(dy * (x - to_opmath(mean).reshape(_channel_shape(x))), axis=axes)
    pdtype = weight.dtype if weight is not None else mean.dtype
    outs = []
    if input_g:
        outs += [sum_dy.astype(mean.dtype), sum_dy_xmu.astype(mean.dtype)]
    if weight_g:
        outs.append((sum_dy_xmu * to_opmath(invstd)).astype(pdtype))
    if bias_g:
        outs.append(sum_dy.astype(pdtype))
    return tuple(outs)


@register("batch_norm_backward_elemt.default", meta=False)
def batch_norm_backward_elemt(grad_out, input, mean, invstd, weight, sum_dy, sum_dy_xmu, count):
    """The input gradient from the global sums; ``count`` holds each rank's element count."""
    x, dy = to_opmath(input), to_opmath(grad_out)
    cs = _channel_shape(x)
    inv = to_opmath(invstd)
    total = jnp.sum(count).astype(inv.dtype)
    mean_dy, mean_dy_xmu = to_opmath(sum_dy) / total, to_opmath(sum_dy_xmu) / total
    scale = inv * to_opmath(weight) if weight is not None else inv
    proj = inv * inv * mean_dy_xmu
    dx = (dy - mean_dy.reshape(cs) - (x - to_opmath(mean).reshape(cs)) * proj.reshape(cs)) * scale.reshape(cs)
    return dx.astype(input.dtype)


# ---- _batch_norm_with_update and friends -----------------------------------------
# native_batch_norm's math (nn.py) plus the empty ``reserve`` output (cuDNN's
# workspace elsewhere); their backward is batch_norm_backward.

def _reserve(input):
    return torch.empty(0, dtype=torch.uint8, device=input.device)


@register_raw("_batch_norm_with_update.default")
def _batch_norm_with_update(input, weight, bias, running_mean, running_var, momentum, eps):
    out, mean, invstd = nn.native_batch_norm(input, weight, bias, running_mean, running_var, True,
                                             momentum, eps)
    return out, mean, invstd, _reserve(input)


# meta=False here and below: PyTorch's meta kernels for these fail without a
# weight (its reserve helper insists on tensors)
@register("_batch_norm_with_update_functional.default", meta=False)
def _batch_norm_with_update_functional(input, weight, bias, running_mean, running_var, momentum, eps):
    out, mean, invstd, new_mean, new_var = _bn_forward(input, weight, bias, running_mean, running_var,
                                                       True, momentum, eps)
    return out, mean, invstd, jnp.zeros((0,), jnp.uint8), new_mean, new_var


# Without running statistics it normalizes with the batch's, as F.batch_norm does
# in eval mode (CPU's kernel crashes there).
@register("_batch_norm_no_update.default", meta=False)
def _batch_norm_no_update(input, weight, bias, running_mean, running_var, momentum, eps):
    out, mean, invstd = _bn_forward(input, weight, bias, running_mean, running_var,
                                    running_mean is None, momentum, eps)[:3]
    return out, mean, invstd, jnp.zeros((0,), jnp.uint8)


@register("batch_norm_backward.default", mask="output_mask")
def batch_norm_backward(grad_out, input, weight, running_mean, running_var, save_mean, save_invstd,
                        update, eps, output_mask, reserve):
    # ``update``: the forward normalized with batch statistics (saved ones)
    return nn.native_batch_norm_backward(grad_out, input, weight, running_mean, running_var, save_mean,
                                         save_invstd, update, eps, output_mask)
