"""Fused optimizer ops (``torch.optim.AdamW(fused=True)``, the Trainer's
default ``adamw_torch_fused``; SGD and Adagrad too): the whole parameter list
is updated by one jitted XLA executable, then every state tensor gets its new
buffer.

The registry's in-place wrapper writes only one list argument, and these ops
write four or five, so they are raw kernels over ``eager.access``, their
lists read and written in one pass where they can be (``tensor_lists``).
"""
import functools
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import torch

from .. import dtypes, target
from ..dtypes import to_opmath
from ..eager import access, modes
from ..eager.launch import launch
from . import tensor_lists
from .division import true_div
from .registry import register_raw


def _fma(a, b, c, wide):
    """a * b + c rounded once, as the CPU kernels' vec::fmadd (and the
    products their compiler contracts): on the CPU platform, float32 (and
    half's float32) operands through float64, where the product of two 24-bit
    significands is exact (the sum rounded twice, which can differ from one
    rounding only in a rare tie); float64 operands as XLA computes them (no
    wider type: an ulp off at times).  On a TPU or GPU, XLA contracts the
    product and the add into the hardware's own fused multiply-add, and
    float64 would be emulated (TPU: ~10x slower), so the plain expression
    (``wide``: the kernels are for the CPU, target.kernel_platform())."""
    if a.dtype == np.float64 or not wide:
        return a * b + c
    once = a.astype(np.float64) * b.astype(np.float64) + c.astype(np.float64)
    return once.astype(a.dtype)


@functools.lru_cache(maxsize=None)
def _adam_fn(adamw: bool, amsgrad: bool, maximize: bool, scaled: bool, decay: bool, wide: bool):
    """The Adam(W) update over lists, traced inside ``_flat``'s jit: the
    CPU kernel's vectorized arithmetic (FusedAdamKernel.cpp): the coefficients
    computed in double from the step read as a float, then each rounded to the
    opmath type; exp_avg by lerp's fused multiply-add, and the products the
    CPU's compiler contracts into one (weight decay's, exp_avg_sq's) likewise;
    the gradient divided by the scale (and stored back unscaled, appended to
    the results: the CPU unscales the gradients in place)."""
    def step(params, grads, exp_avgs, exp_avg_sqs, max_sqs, steps, lr, beta1, beta2, wd, eps, grad_scale):
        outs = ([], [], [], [], [])
        for i, (p, g, m, v, s) in enumerate(zip(params, grads, exp_avgs, exp_avg_sqs, steps)):
            p32, g32, m32, v32 = (to_opmath(x) for x in (p, g, m, v))
            ct = p32.dtype
            lr64, b1, b2, wd64, eps64 = (jnp.asarray(x).astype(np.float64) for x in (lr, beta1, beta2, wd, eps))
            t = s.astype(np.float32).astype(np.float64)
            bc2_sqrt = jnp.sqrt(1 - b2 ** t)
            step_size = lr64 / (1 - b1 ** t)
            if scaled:  # (the float scale, widened for a double parameter)
                g32 = true_div(g32, grad_scale.astype(np.float32).astype(ct))
                outs[4].append(g32.astype(g.dtype))
            if maximize:
                g32 = -g32
            if decay:
                if adamw:  # (XLA fuses this product into the update's add, the CPU does not: an ulp at times)
                    p32 = p32 * (1 - lr64 * wd64).astype(ct)
                else:
                    g32 = _fma(p32, wd64.astype(ct), g32, wide)
            w = (1 - b1).astype(ct)  # exp_avg.lerp_(grad, 1 - beta1)
            m32 = jnp.where(jnp.abs(w) < 0.5, _fma(w, g32 - m32, m32, wide), _fma(w - 1, g32 - m32, g32, wide))
            v32 = _fma((1 - b2).astype(ct) * g32, g32, v32 * b2.astype(ct), wide)
            if amsgrad:
                vmax = jnp.maximum(to_opmath(max_sqs[i]), v32)
                outs[3].append(vmax.astype(max_sqs[i].dtype))
            else:
                vmax = v32
            denom = true_div(jnp.sqrt(vmax), bc2_sqrt.astype(ct)) + eps64.astype(ct)
            p32 = p32 + (-step_size).astype(ct) * m32 / denom
            outs[0].append(p32.astype(p.dtype))
            outs[1].append(m32.astype(m.dtype))
            outs[2].append(v32.astype(v.dtype))
        return outs
    return step


@functools.lru_cache(maxsize=None)
def _flat(step, sizes, reshapes=(), skip_sources=None, donate=()):
    """``step`` (lists of ``sizes`` lengths, then scalars -> lists of results)
    as one jitted function of one flat argument list with one flat result list:
    what ``launch`` records in fused mode.  ``reshapes``: the arguments to
    reshape first (``tensor_lists.Layout``).  ``skip_sources``: per list of
    results, the list of arguments it replaces (None: an empty one); then the
    last argument is GradScaler's found_inf, and where it is not 0 every result
    is its argument unchanged (the CPU kernels return at once: the step
    skipped without a host read).  ``donate``: the argument positions whose
    buffers the results may take."""
    def flat(*xs):
        if reshapes:
            xs = list(xs)
            for i, shape in reshapes:
                xs[i] = xs[i].reshape(shape)
        lists, at = [], 0
        for k in sizes:
            lists.append(list(xs[at:at + k]))
            at += k
        if skip_sources is None:
            return tuple(r for results in step(*lists, *xs[at:]) for r in results)
        skip = xs[-1].reshape(-1)[0] != 0
        return tuple(jnp.where(skip, old, new)
                     for results, source in zip(step(*lists, *xs[at:-1]), skip_sources)
                     for old, new in zip(lists[source] if source is not None else (), results))
    return jax.jit(flat, donate_argnums=donate)


def _scalar(x):
    if isinstance(x, torch.Tensor):
        return access.read(x) if x.device.type == "tpu" else jnp.asarray(x.item())
    return tensor_lists.scalar(x)


def _run_fused(name, step, lists, scalars, sources, found_inf):
    """Launch ``step`` (see ``_flat``) over the tensor ``lists`` read flat, then
    the ``scalars`` (and ``found_inf``, when given); its lists of results go
    into the lists ``sources`` names (one per list of results, None where the
    step makes none).  In strict mode the written tensors' buffers are donated
    when nothing else holds them: the update happens in place, as on a GPU,
    instead of needing a second copy of parameters and state at its peak."""
    sizes = tuple(map(len, lists))
    arrays, layout = tensor_lists.read((name, *sizes), list(itertools.chain.from_iterable(lists)))
    written = [t for source in sources if source is not None for t in lists[source]]
    donate = ()
    if layout is not None and not modes.is_fused():
        positions = layout.written_positions(sizes, sources)
        if positions and tensor_lists.donatable(arrays, positions):
            donate = positions
    fn = _flat(step, sizes, layout.reshapes if layout is not None else (),
               None if found_inf is None else sources, donate)
    arrays.extend(scalars)
    if found_inf is not None:  # (a pending fused result as it is: read in the program, not first)
        arrays.append(access.read(found_inf, keep_pending=True) if found_inf.device.type == "tpu"
                      else _scalar(found_inf))
    # (the results' shapes only for fused mode to record them: ~0.5 us a tensor)
    out_buffers = [(tuple(t.shape), dtypes.TORCH_TO_NP[t.dtype]) for t in written] if modes.is_fused() else None
    tensor_lists.write(written, launch(name, fn, arrays, out_buffers), layout)


def _fused_adam(adamw, self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, *, lr, beta1,
                beta2, weight_decay, eps, amsgrad, maximize, grad_scale=None, found_inf=None):
    if not self:
        return
    scaled = grad_scale is not None
    maxes = list(max_exp_avg_sqs) if amsgrad else []
    scalars = [_scalar(lr), _scalar(beta1), _scalar(beta2), _scalar(weight_decay), _scalar(eps),
               _scalar(grad_scale) if scaled else _scalar(1.0)]
    wide = target.kernel_platform() == "cpu"  # (part of the cache key: a TPU lowering check traces anew)
    step = _adam_fn(adamw, bool(amsgrad), bool(maximize), scaled, float(weight_decay) != 0, wide)
    _run_fused("aten::_fused_adamw_" if adamw else "aten::_fused_adam_", step,
               (self, grads, exp_avgs, exp_avg_sqs, maxes, state_steps), scalars,
               (0, 2, 3, 4, 1 if scaled else None), found_inf)


@register_raw("_fused_adamw_.default", "_fused_adamw_.tensor_lr")
def fused_adamw_(*args, **kwargs):
    _fused_adam(True, *args, **kwargs)


@register_raw("_fused_adam_.default", "_fused_adam_.tensor_lr")
def fused_adam_(*args, **kwargs):
    _fused_adam(False, *args, **kwargs)


def _as_param_dtype(value, p):
    # The CPU kernels round a double hyperparameter to the parameter's dtype,
    # then compute in its opmath type.
    return jnp.asarray(value).astype(p.dtype).astype(to_opmath(p).dtype)


def _step_grad(p, g, grad_scale, maximize, wd, new_grads):
    """The fused SGD/Adagrad kernels' common start, in the opmath type: a
    GradScaler's gradient unscaled (and stored back, appended to ``new_grads``),
    negated to maximize, plus weight decay (``wd`` None: none, as the CPU skips
    it at 0, where p * 0 would be NaN for an infinite p).  Returns (p, g)."""
    p32, g32 = to_opmath(p), to_opmath(g)
    if grad_scale is not None:
        g32 = g32 / grad_scale.astype(g32.dtype)
        new_grads.append(g32.astype(g.dtype))
    if maximize:
        g32 = -g32
    if wd is not None:
        g32 = g32 + p32 * _as_param_dtype(wd, p)
    return p32, g32


@functools.lru_cache(maxsize=None)
def _sgd_fn(momentum: bool, nesterov: bool, maximize: bool, first: bool, scaled: bool, decay: bool):
    def step(params, grads, bufs, lr, wd, mom, dampening, grad_scale):
        new_p, new_g, new_b = [], [], []
        for i, (p, g) in enumerate(zip(params, grads)):
            p32, g32 = _step_grad(p, g, grad_scale if scaled else None, maximize, wd if decay else None, new_g)
            if momentum:
                m = _as_param_dtype(mom, p)
                b = g32 if first else to_opmath(bufs[i]) * m + g32 * _as_param_dtype(1 - dampening, p)
                new_b.append(b.astype(bufs[i].dtype))
                g32 = g32 + b * m if nesterov else b
            new_p.append((p32 + g32 * (-lr).astype(p32.dtype)).astype(p.dtype))
        return new_p, new_g, new_b
    return step


@register_raw("_fused_sgd_.default", "_fused_sgd_.tensor_lr")
def fused_sgd_(self, grads, momentum_buffer_list, *, weight_decay, momentum, lr, dampening, nesterov,
               maximize, is_first_step, grad_scale=None, found_inf=None):
    if momentum == 0 and momentum_buffer_list:
        raise RuntimeError("Expected momentum_buffer_list.empty() to be true, but got false.")
    if not self:
        return
    scaled = grad_scale is not None
    step = _sgd_fn(momentum != 0, bool(nesterov), bool(maximize), bool(is_first_step), scaled, weight_decay != 0)
    _run_fused("aten::_fused_sgd_", step, (self, grads, momentum_buffer_list),
               [_scalar(lr), _scalar(weight_decay), _scalar(momentum), _scalar(dampening),
                _scalar(grad_scale) if scaled else _scalar(1.0)],
               (0, 1 if scaled else None, 2 if momentum != 0 else None), found_inf)


@functools.lru_cache(maxsize=None)
def _adagrad_fn(maximize: bool, scaled: bool, decay: bool):
    def step(params, grads, sums, steps, lr, lr_decay, wd, eps, grad_scale):
        new_p, new_g, new_s = [], [], []
        for p, g, acc, t in zip(params, grads, sums, steps):
            p32, g32 = _step_grad(p, g, grad_scale if scaled else None, maximize, wd if decay else None, new_g)
            total = to_opmath(acc) + g32 * g32
            new_s.append(total.astype(acc.dtype))
            # the CPU reads the step as a float and decays the rate in double
            clr = lr.astype(np.float64) / (1.0 + (t.astype(np.float32).astype(np.float64) - 1.0) * lr_decay)
            std = jnp.sqrt(total) + _as_param_dtype(eps, p)
            new_p.append((p32 - _as_param_dtype(clr, p) * g32 / std).astype(p.dtype))
        return new_p, new_g, new_s
    return step


@register_raw("_fused_adagrad_.default", "_fused_adagrad_.tensor_lr")
def fused_adagrad_(self, grads, state_sums, state_steps, *, lr, lr_decay, weight_decay, eps, maximize,
                   grad_scale=None, found_inf=None):
    if not self:
        return
    scaled = grad_scale is not None
    step = _adagrad_fn(bool(maximize), scaled, weight_decay != 0)
    _run_fused("aten::_fused_adagrad_", step, (self, grads, state_sums, state_steps),
               [_scalar(lr), _scalar(lr_decay), _scalar(weight_decay), _scalar(eps),
                _scalar(grad_scale) if scaled else _scalar(1.0)], (0, 1 if scaled else None, 2), found_inf)


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
