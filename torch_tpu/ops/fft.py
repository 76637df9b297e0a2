"""``torch.fft``: the three ATen transforms every ``torch.fft`` function and
``stft`` reduce to.  Each is computed unnormalized, then scaled as ATen's
``normalization`` asks (0: none, 1: 1/sqrt(n), 2: 1/n, with n the signal
size along the transformed dims), so forward and inverse share one rule.
"""
import math

import jax.numpy as jnp
import torch

from ..storage import buffers
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


# The CPU lays out a transform's result its own way (pocketfft's and MKL's,
# not the meta kernels': rfftn of a (5, 6, 7) tensor is row-major there,
# (6, 1, 30)-strided by the meta kernel; hfftn over dims (0, -1) likewise),
# and ``.view`` of the result works or fails by it.  The layout depends on the
# input's geometry only: the CPU kernel is asked once per signature, on a zero
# tensor of that geometry (inputs past _CPU_PROBE_NUMEL elements keep the meta
# kernel's layout).
_CPU_PROBE_NUMEL = 1 << 16
_aten = torch.ops.aten


def _layout_like_cpu(op, probe_dtype):
    """A ``layout`` option: the strides ``op`` (the CPU's kernel) gives a
    ``probe_dtype`` input of the same geometry."""
    def layout(args, out_specs):
        x = args[0]
        if x.numel() > _CPU_PROBE_NUMEL:
            return out_specs
        shape, stride = tuple(x.shape), x.stride()
        probe = torch.zeros(buffers.storage_numel(shape, stride), dtype=probe_dtype).as_strided(shape, stride)
        try:
            on_cpu = op(probe, *args[1:])
        except RuntimeError:  # (the op's own error comes from the meta kernel, before this)
            return out_specs
        return [out_specs[0]._replace(stride=on_cpu.stride())] if on_cpu.shape == out_specs[0].size else out_specs
    return layout


@register("_fft_c2c.default", layout=_layout_like_cpu(_aten._fft_c2c.default, torch.complex64))
def fft_c2c(self, dim, normalization, forward):
    dim = tuple(dim)
    y = (jnp.fft.fftn(self, axes=dim, norm="backward") if forward
         else jnp.fft.ifftn(self, axes=dim, norm="forward"))  # "forward": the inverse unscaled
    return _scaled(y, _signal_size(self.shape, dim), normalization).astype(out_dtype())


@register("_fft_r2c.default", layout=_layout_like_cpu(_aten._fft_r2c.default, torch.float32))
def fft_r2c(self, dim, normalization, onesided):
    dim = tuple(dim)
    y = (jnp.fft.rfftn(self, axes=dim, norm="backward") if onesided
         else jnp.fft.fftn(self.astype(out_dtype()), axes=dim, norm="backward"))
    return _scaled(y, _signal_size(self.shape, dim), normalization).astype(out_dtype())


@register("_fft_c2r.default", layout=_layout_like_cpu(_aten._fft_c2r.default, torch.complex64))
def fft_c2r(self, dim, normalization, last_dim_size):
    dim = tuple(dim)
    sizes = [self.shape[d] for d in dim[:-1]] + [int(last_dim_size)]
    y = jnp.fft.irfftn(self, s=sizes, axes=dim, norm="forward")
    return _scaled(y, math.prod(sizes), normalization).astype(out_dtype())
