"""Connectionist temporal classification: ``_ctc_loss`` and
``_ctc_loss_backward`` (both overloads: int lists or tensors of lengths), as
ATen's CPU kernels compute them.  ``F.ctc_loss`` is a composite over these
(unbatched inputs, reduction, zero_infinity's masking of the loss).

Sample b's target l (length L) is extended to l' = (blank, l1, blank, ...,
lL, blank), 2L+1 states s.  log_alpha[t, s] (log-probability of the paths
through l'[:s+1] over inputs 0..t) follows Graves et al. eq. (6)-(7): the sum
over s, s-1 and -- when l'[s-2] != l'[s] -- s-2 at t-1, in log space as
``log(sum exp(a - max)) + max`` exactly as the CPU loop writes it, as a
``lax.scan`` over time with the batch and the states vectorized.  The loss
is -log(alpha[T-1, 2L] + alpha[T-1, 2L-1]).  The backward runs the mirror
beta recursion from each input's end and turns alpha * beta, summed over the
states of each class, into the gradient w.r.t. log_probs (eq. 16):
exp(lp) - exp(log(sum alpha beta) + nll - lp), times the incoming gradient.

The lengths decide shapes (log_alpha is 2 max(L) + 1 wide) and the CPU's
checks, so they are read on the host: PyTorch's meta kernel checks them with
the CPU's messages.  Each (shapes, max(L), blank) builds one program; the
lengths themselves are traced, so other lengths reuse it.
"""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import torch
from jax import lax

from ..eager.launch import launch
from ..storage import buffers
from . import indexing
from .core import copy_into
from .registry import register_raw, to_meta

_NEG_INF = -np.inf


def _logsumexp(*terms):
    """log(sum exp(x)) with the CPU's guard: an all -inf max counts as 0."""
    m = functools.reduce(jnp.maximum, terms)
    m = jnp.where(m == _NEG_INF, 0, m)
    return jnp.log(sum(jnp.exp(x - m) for x in terms)) + m


def _shift(x, k):
    """x[..., s + k] along the states, -inf where that is off the end."""
    pad = jnp.full(x.shape[:-1] + (min(abs(k), x.shape[-1]),), _NEG_INF, x.dtype)
    if k > 0:
        return jnp.concatenate([x[..., k:], pad], axis=-1)
    return jnp.concatenate([pad, x[..., :k]], axis=-1)


def _extended(targets, tl, width, blank):
    """l' (N, 2 width + 1) from padded (N, S) or concatenated (sum L,) targets."""
    k = jnp.arange(width)
    if targets.ndim == 1:
        start = jnp.cumsum(tl) - tl
        labels = targets[jnp.clip(start[:, None] + k, 0, max(targets.shape[0] - 1, 0))]
    else:
        labels = targets[:, :width]
    labels = jnp.where(k < tl[:, None], labels, blank).astype(jnp.int32)
    ext = jnp.full((tl.shape[0], 2 * width + 1), blank, jnp.int32)
    return ext.at[:, 1::2].set(labels)


def _setup(lp, targets, tl, width, blank):
    ext = _extended(targets, tl, width, blank)
    s = jnp.arange(ext.shape[1])
    lpe = jnp.take_along_axis(lp, jnp.broadcast_to(ext, lp.shape[:1] + ext.shape), axis=2)  # lp[t, n, l'[s]]
    valid = s <= 2 * tl[:, None]
    return ext, s, lpe, valid


@functools.partial(jax.jit, static_argnames=("width", "blank"))
def _forward(lp, targets, il, tl, *, width, blank):
    ext, s, lpe, valid = _setup(lp, targets, tl, width, blank)
    skip = (s >= 2) & (ext != jnp.roll(ext, 2, axis=1))  # alpha[s-2] joins: l'[s-2] != l'[s]
    alpha0 = jnp.where((s <= 1) & valid, lpe[0], _NEG_INF)

    def step(alpha, xs):
        lpe_t, t = xs
        new = _logsumexp(alpha, _shift(alpha, -1), jnp.where(skip, _shift(alpha, -2), _NEG_INF)) + lpe_t
        live = (t < il)[:, None]  # past its input's end a sample keeps its last alpha
        alpha = jnp.where(live, jnp.where(valid, new, _NEG_INF), alpha)
        return alpha, jnp.where(live, alpha, _NEG_INF)

    last, rows = lax.scan(step, alpha0, (lpe[1:], jnp.arange(1, lp.shape[0])))
    log_alpha = jnp.concatenate([jnp.where((il > 0)[:, None], alpha0, _NEG_INF)[None], rows])
    at = functools.partial(jnp.take_along_axis, last, axis=1)
    end = at(2 * tl[:, None])[:, 0]
    before = at(jnp.maximum(2 * tl[:, None] - 1, 0))[:, 0]
    nll = -jnp.where(tl > 0, _logsumexp(end, before), end)
    nll = jnp.where(il > 0, nll, jnp.where(tl > 0, np.inf, 0).astype(lp.dtype))
    return nll, jnp.swapaxes(log_alpha, 0, 1)


@functools.partial(jax.jit, static_argnames=("width", "blank", "zero_infinity"))
def _backward(grad, lp, targets, il, tl, nll, log_alpha, *, width, blank, zero_infinity):
    ext, s, lpe, valid = _setup(lp, targets, tl, width, blank)
    skip = (s < 2 * tl[:, None] - 1) & (jnp.roll(ext, -2, axis=1) != ext)  # beta[s+2] joins: l'[s+2] != l'[s]
    n_time, n, c = lp.shape
    last = 2 * tl[:, None]
    beta_end = jnp.where(((s == last) | (s == last - 1)) & valid, 0, _NEG_INF)

    def step(beta, xs):
        lpe_t, t = xs
        new = _logsumexp(beta, jnp.where(s < last, _shift(beta, 1), _NEG_INF),
                         jnp.where(skip, _shift(beta, 2), _NEG_INF)) + lpe_t
        new = jnp.where(valid, new, _NEG_INF)
        at_end = (t == il - 1)[:, None]
        beta = jnp.where(at_end, beta_end + lpe_t, jnp.where((t < il - 1)[:, None], new, _NEG_INF))
        return beta, beta

    init = jnp.full(ext.shape, _NEG_INF, lp.dtype)
    _, betas = lax.scan(step, init, (lpe, jnp.arange(n_time)), reverse=True)
    log_ab = jnp.swapaxes(log_alpha, 0, 1) + betas  # (T, N, S)

    # per (t, n, class): the states of that class log-added one by one, s descending,
    # as the CPU loop does (the order shows in float32's last bits)
    def add_state(acc, xs):
        ab, cls = xs
        index = jnp.broadcast_to(cls[None, :, None], (n_time, n, 1))
        cur = jnp.take_along_axis(acc, index, axis=2)[..., 0]
        m = jnp.maximum(cur, ab)
        merged = jnp.where(cur == _NEG_INF, ab, jnp.log(jnp.exp(cur - m) + jnp.exp(ab - m)) + m)
        return acc.at[jnp.arange(n_time)[:, None], jnp.arange(n)[None, :], cls[None, :]].set(merged), None

    res, _ = lax.scan(add_state, jnp.full((n_time, n, c), _NEG_INF, lp.dtype),
                      (jnp.moveaxis(log_ab, 2, 0), ext.T), reverse=True)
    out = (jnp.exp(lp) - jnp.exp(res + nll[None, :, None] - lp)) * grad[None, :, None]
    keep = jnp.arange(n_time)[:, None] < il[None, :]
    if zero_infinity:
        keep = keep & (nll != np.inf)[None, :]
    return jnp.where(keep[..., None], out, 0)


# ---- the host side: lengths, checks, the call ----------------------------------------

def _lengths(v, what):
    if isinstance(v, torch.Tensor):
        if v.dtype.is_floating_point or v.dtype.is_complex or v.dtype == torch.bool:
            raise RuntimeError(f"{what} must be integral")
        return [int(e) for e in v.to("cpu", torch.int64).reshape(-1).tolist()]
    return [int(e) for e in v]


def _call(name, fn, *args, **static):
    inputs = [indexing._value(a) if isinstance(a, torch.Tensor) else jnp.asarray(np.asarray(a, np.int64))
              for a in args]
    return launch(name, functools.partial(fn, **static) if static else fn, inputs)


def _into(outs, tensors):
    for dst, src in zip(outs, tensors):
        if tuple(dst.shape) != tuple(src.shape):
            dst.resize_(src.shape)
        copy_into(dst, src)
    return outs


@register_raw("_ctc_loss.default")
def ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=0, zero_infinity=False):
    il, tl = _lengths(input_lengths, "input_lengths"), _lengths(target_lengths, "target_lengths")
    if log_probs.numel() == 0:
        raise RuntimeError("log_probs tensor must not be empty")
    # PyTorch's meta kernel: the CPU's checks and messages, and the output shapes
    meta = torch.ops.aten._ctc_loss.default(to_meta(log_probs), to_meta(targets), il, tl, blank, zero_infinity)
    width = (meta[1].shape[2] - 1) // 2
    nll, log_alpha = _call("aten::_ctc_loss", _forward, log_probs, targets, il, tl, width=width, blank=blank)
    return buffers.wrap(nll), buffers.wrap(log_alpha)


@register_raw("_ctc_loss.Tensor")
def ctc_loss_tensor(log_probs, targets, input_lengths, target_lengths, blank=0, zero_infinity=False):
    return ctc_loss(log_probs, targets, _lengths(input_lengths, "input_lengths"),
                    _lengths(target_lengths, "target_lengths"), blank, zero_infinity)


@register_raw("_ctc_loss.out", "_ctc_loss.Tensor_out")
def ctc_loss_out(log_probs, targets, input_lengths, target_lengths, blank=0, zero_infinity=False, *, out0, out1):
    return tuple(_into((out0, out1), ctc_loss(log_probs, targets, input_lengths, target_lengths, blank,
                                              zero_infinity)))


@register_raw("_ctc_loss_backward.default")
def ctc_loss_backward(grad, log_probs, targets, input_lengths, target_lengths, neg_log_likelihood, log_alpha,
                      blank, zero_infinity=False):
    il, tl = _lengths(input_lengths, "input_lengths"), _lengths(target_lengths, "target_lengths")
    torch.ops.aten._ctc_loss.default(to_meta(log_probs), to_meta(targets), il, tl, blank, zero_infinity)
    width = (log_alpha.shape[2] - 1) // 2
    if log_alpha.dim() != 3 or log_alpha.shape[:2] != log_probs.shape[1::-1] or width < max(tl, default=0):
        raise RuntimeError(f"_ctc_loss_backward: log_alpha of shape {tuple(log_alpha.shape)} does not fit "
                           f"log_probs of shape {tuple(log_probs.shape)} and the target lengths")
    g = _call("aten::_ctc_loss_backward", _backward, grad.expand(log_probs.shape[1]), log_probs, targets, il, tl,
              neg_log_likelihood, log_alpha, width=width, blank=blank, zero_infinity=bool(zero_infinity))
    return buffers.wrap(g)


@register_raw("_ctc_loss_backward.Tensor")
def ctc_loss_backward_tensor(grad, log_probs, targets, input_lengths, target_lengths, neg_log_likelihood, log_alpha,
                             blank, zero_infinity=False):
    return ctc_loss_backward(grad, log_probs, targets, _lengths(input_lengths, "input_lengths"),
                             _lengths(target_lengths, "target_lengths"), neg_log_likelihood, log_alpha, blank,
                             zero_infinity)


@register_raw("_ctc_loss_backward.out")
def ctc_loss_backward_out(grad, log_probs, targets, input_lengths, target_lengths, neg_log_likelihood, log_alpha,
                          blank, zero_infinity=False, *, out):
    return _into((out,), (ctc_loss_backward(grad, log_probs, targets, input_lengths, target_lengths,
                                            neg_log_likelihood, log_alpha, blank, zero_infinity),))[0]
