"""``torch.fft``: the three ATen transforms every ``torch.fft`` function and
``stft`` reduce to.  Each is computed unnormalized, then scaled as ATen's
``normalization`` asks (0: none, 1: 1/sqrt(n), 2: 1/n, with n the signal
size along the transformed dims), so forward and inverse share one rule.
"""
import math

import jax.numpy as jnp
import torch

from .registry import out_dtype, register

_NONE, _BY_ROOT_N, _BY_N = 0, 1, 2


def _scaled(y, n, normalization):
    if normalization == _BY_ROOT_N:
        return y / math.sqrt(n)
    if normalization == _BY_N:
        return y / n
    return y


def _signal_size(shape, dim):
    return math.prod(shape[d] for d in dim)


@register("_fft_c2c.default")
def fft_c2c(self, dim, normalization, forward):
    dim = tuple(dim)
    y = (jnp.fft.fftn(self, axes=dim, norm="backward") if forward
         else jnp.fft.ifftn(self, axes=dim, norm="forward"))  # "forward": the inverse unscaled
    return _scaled(y, _signal_size(self.shape, dim), normalization).astype(out_dtype())


# The CPU's r2c lays its result out its own way (pocketfft's and MKL's, not the
# meta kernel's: rfftn of a (5, 6, 7) tensor is row-major there, (6, 1, 30)-
# strided by the meta kernel), and ``.view`` of the result works or fails by
# it.  The layout depends on the input's geometry only: the CPU kernel is
# asked once per signature, on a zero tensor of that geometry (inputs past
# _CPU_PROBE_NUMEL elements keep the meta kernel's layout).
_CPU_PROBE_NUMEL = 1 << 16


def _r2c_layout_like_cpu(args, out_specs):
    x, dim, normalization, onesided = args[:4]
    if x.numel() > _CPU_PROBE_NUMEL:
        return out_specs
    probe = torch.zeros(x.shape).as_strided(x.shape, x.stride()) if x.numel() else torch.zeros(x.shape)
    try:
        on_cpu = torch.ops.aten._fft_r2c(probe, dim, normalization, onesided)
    except RuntimeError:  # (the op's own error comes from the meta kernel, before this)
        return out_specs
    return [out_specs[0]._replace(stride=on_cpu.stride())] if on_cpu.shape == out_specs[0].size else out_specs


@register("_fft_r2c.default", layout=_r2c_layout_like_cpu)
def fft_r2c(self, dim, normalization, onesided):
    dim = tuple(dim)
    y = (jnp.fft.rfftn(self, axes=dim, norm="backward") if onesided
         else jnp.fft.fftn(self.astype(out_dtype()), axes=dim, norm="backward"))
    return _scaled(y, _signal_size(self.shape, dim), normalization).astype(out_dtype())


@register("_fft_c2r.default")
def fft_c2r(self, dim, normalization, last_dim_size):
    dim = tuple(dim)
    sizes = [self.shape[d] for d in dim[:-1]] + [int(last_dim_size)]
    y = jnp.fft.irfftn(self, s=sizes, axes=dim, norm="forward")
    return _scaled(y, math.prod(sizes), normalization).astype(out_dtype())
