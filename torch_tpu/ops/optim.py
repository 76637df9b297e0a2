"""Fused optimizer ops (``torch.optim.AdamW(fused=True)``, the Trainer's
default ``adamw_torch_fused``): the whole parameter list is updated by one
jitted XLA executable, then every state tensor gets its new buffer.

The registry's in-place wrapper writes only one list argument, and these ops
write four or five, so they are raw kernels over ``storage.access``.
"""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import torch

from ..storage import access
from .registry import register_raw

_LOW = (np.dtype(jnp.bfloat16), np.dtype(np.float16))


def _opmath(x):
    return x.astype(np.float32) if x.dtype in _LOW else x


@functools.lru_cache(maxsize=None)
def _adam_fn(adamw: bool, amsgrad: bool, maximize: bool):
    def step(params, grads, exp_avgs, exp_avg_sqs, max_sqs, steps, lr, beta1, beta2, wd, eps, inv_scale):
        outs = ([], [], [], [])
        for i, (p, g, m, v, s) in enumerate(zip(params, grads, exp_avgs, exp_avg_sqs, steps)):
            p32, g32, m32, v32 = (_opmath(x) for x in (p, g, m, v))
            ct = p32.dtype
            g32 = g32 * inv_scale.astype(ct)
            if maximize:
                g32 = -g32
            lr_, b1, b2, wd_, eps_ = (jnp.asarray(x).astype(ct) for x in (lr, beta1, beta2, wd, eps))
            if adamw:
                p32 = p32 * (1 - lr_ * wd_)
            else:
                g32 = g32 + wd_ * p32
            m32 = m32 + (g32 - m32) * (1 - b1)
            v32 = v32 * b2 + (1 - b2) * g32 * g32
            t = s.astype(ct)
            bc1 = 1 - b1 ** t
            bc2_sqrt = jnp.sqrt(1 - b2 ** t)
            if amsgrad:
                vmax = jnp.maximum(_opmath(max_sqs[i]), v32)
                outs[3].append(vmax.astype(max_sqs[i].dtype))
            else:
                vmax = v32
            denom = jnp.sqrt(vmax) / bc2_sqrt + eps_
            p32 = p32 - (lr_ / bc1) * m32 / denom
            outs[0].append(p32.astype(p.dtype))
            outs[1].append(m32.astype(m.dtype))
            outs[2].append(v32.astype(v.dtype))
        return outs
    return jax.jit(step)


def _scalar(x):
    if isinstance(x, torch.Tensor):
        return access.read(x) if x.device.type == "tpu" else jnp.asarray(x.item())
    return jnp.asarray(float(x))


def _fused_adam(adamw, self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, *, lr, beta1,
                beta2, weight_decay, eps, amsgrad, maximize, grad_scale=None, found_inf=None):
    if not self:
        return
    # GradScaler: a step with inf/nan gradients is skipped entirely
    if found_inf is not None and float(found_inf.cpu().item()) != 0.0:
        return
    inv_scale = 1.0 / _scalar(grad_scale) if grad_scale is not None else jnp.asarray(1.0)
    read = lambda ts: [access.read(t) for t in ts]  # noqa: E731
    fn = _adam_fn(adamw, bool(amsgrad), bool(maximize))
    new_p, new_m, new_v, new_max = fn(
        read(self), read(grads), read(exp_avgs), read(exp_avg_sqs),
        read(max_exp_avg_sqs) if amsgrad else [], read(state_steps),
        _scalar(lr), _scalar(beta1), _scalar(beta2), _scalar(weight_decay), _scalar(eps), inv_scale)
    for ts, vals in ((self, new_p), (exp_avgs, new_m), (exp_avg_sqs, new_v),
                     (max_exp_avg_sqs if amsgrad else [], new_max)):
        for t, v in zip(ts, vals):
            access.write(t, v)


@register_raw("_fused_adamw_.default", "_fused_adamw_.tensor_lr")
def fused_adamw_(*args, **kwargs):
    _fused_adam(True, *args, **kwargs)


@register_raw("_fused_adam_.default", "_fused_adam_.tensor_lr")
def fused_adam_(*args, **kwargs):
    _fused_adam(False, *args, **kwargs)


# ---- GradScaler (torch.amp): unscale-and-check, and the scale update --------------
# Written with tpu ops, so the step's flags never leave the device (no host
# read of found_inf) and fused mode records them like any other op.

@register_raw("_amp_foreach_non_finite_check_and_unscale_.default")
def _amp_foreach_non_finite_check_and_unscale_(self, found_inf, inv_scale):
    """Every gradient times inv_scale; found_inf becomes 1 if any value is inf or NaN."""
    if not self:
        return
    peaks = torch.stack(torch._foreach_norm(self, float("inf")))  # NaN and inf survive a max
    found_inf.copy_(torch.maximum(found_inf, (~torch.isfinite(peaks).all()).to(found_inf.dtype)))
    torch._foreach_mul_(self, inv_scale.reshape(()))  # GradScaler keeps it as a 1-element tensor


@register_raw("_amp_update_scale_.default")
def _amp_update_scale_(self, growth_tracker, found_inf, scale_growth_factor, scale_backoff_factor,
                       growth_interval):
    """After an overflow: scale * backoff and the count restarts.  Else the count
    of good steps grows, and at growth_interval the scale grows (if that stays finite)."""
    overflow = found_inf > 0
    count = growth_tracker + 1
    grown = self * scale_growth_factor
    grow = ~overflow & (count == growth_interval)
    self.copy_(torch.where(overflow, self * scale_backoff_factor,
                           torch.where(grow & torch.isfinite(grown), grown, self)))
    growth_tracker.copy_(torch.where(overflow | grow, torch.zeros_like(count), count))
    return self
