"""``max_unpool2d`` / ``max_unpool3d`` (``F.max_unpool1d`` is the 2d op on a
height-1 plane): each input value is written to the flat position its index
names within its (N, C) plane of the output, the rest is 0.

When two values name one position the CPU's result is nondeterministic (its
loop runs in parallel); here a scatter-max of source positions keeps the
later one, always.  Indices
outside the plane raise the CPU's error, checked on the host first.
"""
import jax.numpy as jnp
import numpy as np
import torch

from ..storage import views
from . import indexing
from .registry import guard, register


def _max_unpool(x, indices, output_size):
    nsp = len(output_size)
    lead = x.shape[:-nsp]
    shape = lead + tuple(output_size)
    planes, k, hw = int(np.prod(lead)), int(np.prod(x.shape[-nsp:])), int(np.prod(output_size))
    if planes * k * hw == 0:
        return jnp.zeros(shape, x.dtype)
    xs, ix = x.reshape(planes, k), indices.reshape(planes, k)
    source = jnp.broadcast_to(jnp.arange(k), (planes, k))
    last = jnp.full((planes, hw), -1, np.int64).at[jnp.arange(planes)[:, None], ix].max(source)
    out = jnp.where(last >= 0, jnp.take_along_axis(xs, jnp.maximum(last, 0), axis=1), 0)
    return out.reshape(shape)


# (the CPU's 2d result follows a channels_last input; its 3d one is row-major)
@register("max_unpool2d.default", layout=views.channels_last_from(0))
def max_unpool2d(self, indices, output_size):
    return _max_unpool(self, indices, output_size)


@register("max_unpool3d.default")
def max_unpool3d(self, indices, output_size, stride, padding):
    return _max_unpool(self, indices, output_size)


def _prepare(bound):
    indices, size = bound["indices"], [int(s) for s in bound["output_size"]]
    if indices.dtype != torch.int64:
        return  # the meta kernel raises PyTorch's dtype error
    hw = int(np.prod(size))
    r = indexing._index_range(indices)
    if r is not None and (r[0] < 0 or r[1] >= hw):
        host = np.asarray(indexing._value(indices)).reshape(-1)
        bad = int(host[np.flatnonzero((host < 0) | (host >= hw))[0]])
        raise RuntimeError(f"Found an invalid max index: {bad} (output volumes are of size "
                           f"{'x'.join(str(s) for s in size)})")


guard("max_unpool2d.default", "max_unpool3d.default", prepare=_prepare)
