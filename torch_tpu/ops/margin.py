"""Multi-class margin losses: ``multi_margin_loss`` and
``multilabel_margin_loss_forward`` with their backwards, as ATen's CPU kernels.

Both work on (N, C) rows (a 1-d input is one row) and divide each row's
sum by C.  multi_margin: sum over j != y of max(0, margin - x[y] + x[j])^p,
times weight[y].  multilabel: the targets of a row are its labels before the
first -1; sum over those targets y and every non-target j of
max(0, 1 - (x[y] - x[j])); ``is_target`` marks the target columns.
Target checks run on the host first, with the CPU's messages.
"""
import jax
import jax.numpy as jnp
import torch

from ..dtypes import to_opmath
from . import indexing
from .nn import MEAN, SUM
from .registry import guard, register


def _as_rows(self):
    x = to_opmath(self)
    return x.reshape(-1, x.shape[-1] if x.ndim else 1)


def _reduce_rows(loss, reduction, target_ndim):
    if reduction == MEAN:
        return jnp.mean(loss)
    if reduction == SUM:
        return jnp.sum(loss)
    return loss if target_ndim else loss.reshape(())


def _row_scale(grad_output, reduction, n, c):
    """d loss / d (row sum) for each row: 1/C, /N for mean, times the upstream grad."""
    g = to_opmath(grad_output)
    g = g.reshape(-1, 1) if reduction not in (MEAN, SUM) else g.reshape(1, 1)
    return g / (c * n if reduction == MEAN else c)


# ---- multi_margin_loss -----------------------------------------------------------

def _multi_margin_terms(self, target, p, margin, weight):
    """Per (row, class) the hinge z and whether it counts (z > 0, not the target)."""
    x = _as_rows(self)
    t = target.reshape(-1)
    z = margin - jnp.take_along_axis(x, t[:, None], axis=1) + x
    on = (z > 0) & ~jax.nn.one_hot(t, x.shape[1], dtype=bool)
    w = to_opmath(weight)[t][:, None] if weight is not None else None
    return x, t, z, on, w


@register("multi_margin_loss.default", static_scalars=True)
def multi_margin_loss(self, target, p=1, margin=1, weight=None, reduction=MEAN):
    x, t, z, on, w = _multi_margin_terms(self, target, p, margin, weight)
    h = jnp.where(on, z if p == 1 else z * z, 0)
    if w is not None:
        h = h * w
    return _reduce_rows(jnp.sum(h, axis=1) / x.shape[1], reduction, target.ndim)


@register("multi_margin_loss_backward.default", static_scalars=True)
def multi_margin_loss_backward(grad_output, self, target, p, margin, weight=None, reduction=MEAN):
    x, t, z, on, w = _multi_margin_terms(self, target, p, margin, weight)
    d = jnp.where(on, 1 if p == 1 else 2 * z, 0).astype(x.dtype)
    if w is not None:
        d = d * w
    d = d - jax.nn.one_hot(t, x.shape[1], dtype=d.dtype) * jnp.sum(d, axis=1, keepdims=True)
    return (d * _row_scale(grad_output, reduction, x.shape[0], x.shape[1])).reshape(self.shape)


# ---- multilabel_margin_loss ---------------------------------------------------------

def _multilabel_terms(self, target, is_target=None):
    """(row, target k, class j) hinges that count: k is a real target, j is not one."""
    x = _as_rows(self)
    n, c = x.shape
    t = target.reshape(n, c)
    active = jnp.cumprod(t != -1, axis=1).astype(bool)  # labels before the first -1
    tc = jnp.where(active, t, 0)
    if is_target is None:
        is_target = jnp.zeros((n, c), bool).at[jnp.arange(n)[:, None], tc].max(active)
    else:
        is_target = is_target.reshape(n, c) != 0
    z = 1 - (jnp.take_along_axis(x, tc, axis=1)[:, :, None] - x[:, None, :])
    on = active[:, :, None] & ~is_target[:, None, :] & (z > 0)
    return x, tc, z, on, is_target


@register("multilabel_margin_loss_forward.default")
def multilabel_margin_loss_forward(self, target, reduction):
    x, _, z, on, is_target = _multilabel_terms(self, target)
    loss = jnp.sum(jnp.where(on, z, 0), axis=(1, 2)) / x.shape[1]
    return _reduce_rows(loss, reduction, target.ndim - 1), is_target.reshape(self.shape)


@register("multilabel_margin_loss_backward.default")
def multilabel_margin_loss_backward(grad_output, self, target, reduction, is_target):
    x, tc, _, on, _ = _multilabel_terms(self, target, is_target)
    n, c = x.shape
    hits = on.astype(x.dtype)
    # each counted hinge pushes its class j up and its target y down
    d = jnp.sum(hits, axis=1) - jnp.zeros((n, c), x.dtype).at[jnp.arange(n)[:, None], tc].add(jnp.sum(hits, axis=2))
    return (d * _row_scale(grad_output, reduction, n, c)).reshape(self.shape)


# ---- host-side target checks ---------------------------------------------------------

@jax.jit
def _bad_labels(target, c):
    active = jnp.cumprod(target != -1, axis=-1).astype(bool)
    return jnp.any(active & ((target < 0) | (target >= c)))


def _classes(self):
    return self.shape[-1] if self.dim() else 1


def _prepare_multi_margin(bound):
    target, c = bound["target"], _classes(bound["self"])
    if target.dtype != torch.int64 or c == 0 or bound["self"].dim() > 2:
        return  # the shape error comes first on the CPU: the meta kernel raises it
    r = indexing._index_range(target)
    if r is not None and (r[0] < 0 or r[1] >= c):
        raise RuntimeError("target out of range")


def _prepare_multilabel(bound):
    self, target = bound["self"], bound["target"]
    if target.dtype != torch.int64 or tuple(target.shape) != tuple(self.shape) or target.numel() == 0:
        return  # the meta kernel raises PyTorch's shape / dtype errors
    t = indexing._value(target)
    if bool(_bad_labels(t.reshape(-1, t.shape[-1] if t.ndim else 1), _classes(self))):
        raise RuntimeError("argument #2 'target' is out of range")


guard("multi_margin_loss.default", "multi_margin_loss_backward.default", prepare=_prepare_multi_margin)
guard("multilabel_margin_loss_forward.default", "multilabel_margin_loss_backward.default",
               prepare=_prepare_multilabel)
