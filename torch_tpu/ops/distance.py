"""Pairwise distances: ``cdist`` and ``pdist`` (``_cdist_forward``/``_backward``,
``_pdist_forward``/``_backward``), following ATen's CPU definitions.

The p-norm of each difference is computed directly, as the CPU does, except
``_cdist_forward`` with p=2 in its matrix-product mode (``compute_mode`` 1, or
0 with more than 25 rows), which ATen computes as
``sqrt(clamp(|a|^2 + |b|^2 - 2 a.b, 0))``.  The backward formulas are ATen's,
with 0 where the distance is 0 (and for p=0, whose norm is a count).
"""
import math

import jax.numpy as jnp
import numpy as np
from jax import lax

from .factorizations import broadcast_batch
from .registry import register


def _differences(x1, x2):
    """(..., P, R, M) differences of the rows, batch dims broadcast."""
    x1, x2 = broadcast_batch(x1, x2)
    return x1[..., :, None, :] - x2[..., None, :, :]


def _norm(diff, p):
    a = jnp.abs(diff)
    if p == 0:
        return jnp.sum(a != 0, axis=-1).astype(diff.dtype)
    if p == 1:
        return jnp.sum(a, axis=-1)
    if p == 2:
        return jnp.sqrt(jnp.sum(a * a, axis=-1))
    if math.isinf(p):
        return jnp.max(a, axis=-1, initial=0)
    return jnp.sum(a ** p, axis=-1) ** (1.0 / p)


def _euclidean_by_products(x1, x2):
    x1, x2 = broadcast_batch(x1, x2)
    n1 = jnp.sum(x1 * x1, axis=-1)[..., :, None]
    n2 = jnp.sum(x2 * x2, axis=-1)[..., None, :]
    dots = jnp.matmul(x1, jnp.swapaxes(x2, -1, -2), precision=lax.Precision.HIGHEST)
    return jnp.sqrt(jnp.maximum(n1 + n2 - 2 * dots, 0))


def _pair_gradient(diff, dist, p):
    """d dist(x1_i, x2_j) / d x1_i for each pair: (..., P, R, M)."""
    d = dist[..., None]
    zero = jnp.zeros((), diff.dtype)
    safe = jnp.where(d == 0, jnp.ones((), diff.dtype), d)
    if p == 0:
        return jnp.zeros_like(diff)
    if p == 1:
        return jnp.sign(diff)
    if p == 2:
        return jnp.where(d == 0, zero, diff / safe)
    if math.isinf(p):
        return jnp.sign(diff) * (jnp.abs(diff) == d)
    a = jnp.abs(diff)
    if p < 2:
        g = jnp.sign(diff) * a ** (p - 1) / safe ** (p - 1)
        return jnp.where((d == 0) | ((diff == 0) & (p < 1)), zero, g)
    return jnp.where(d == 0, zero, diff * a ** (p - 2) / safe ** (p - 1))


@register("_cdist_forward.default", static_scalars=True)
def cdist_forward(x1, x2, p, compute_mode=None):
    mode = 0 if compute_mode is None else compute_mode
    r1, r2 = x1.shape[-2], x2.shape[-2]
    if p == 2 and (mode == 1 or (mode == 0 and (r1 > 25 or r2 > 25))) and x1.size and x2.size:
        return _euclidean_by_products(x1, x2)
    return _norm(_differences(x1, x2), p)


@register("_cdist_backward.default", static_scalars=True)
def cdist_backward(grad, x1, x2, p, cdist):
    diff = _differences(x1, x2)
    return jnp.sum(grad[..., None] * _pair_gradient(diff, cdist, p), axis=-2)


def _upper_pairs(n):
    return np.triu_indices(n, 1)


@register("_pdist_forward.default", static_scalars=True)
def pdist_forward(self, p=2):
    i, j = _upper_pairs(self.shape[0])
    return _norm(self[i] - self[j], p)


@register("_pdist_backward.default", static_scalars=True)
def pdist_backward(grad, self, p, pdist):
    n = self.shape[0]
    i, j = _upper_pairs(n)
    diff = self[:, None, :] - self[None, :, :]
    dist = jnp.zeros((n, n), self.dtype).at[i, j].set(pdist).at[j, i].set(pdist)
    g = jnp.zeros((n, n), grad.dtype).at[i, j].set(grad).at[j, i].set(grad)
    return jnp.sum(g[..., None] * _pair_gradient(diff, dist, p), axis=1)
