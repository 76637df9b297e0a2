"""Zero-copy hand-over between tpu tensors and jax.Arrays.

A tpu tensor's storage already holds a jax.Array, so ``to_jax`` returns that
very array when the tensor covers its storage (a view is read through its
strides, which is a computation, not a host copy).  JAX arrays are immutable:
an in-place op on the tensor later swaps in a new array and leaves the one
handed out unchanged.
"""
import jax
import numpy as np
import torch

from .. import dtypes, runtime
from ..eager import checks
from ..eager import access
from ..storage import buffers


def to_jax(t: torch.Tensor) -> jax.Array:
    """The jax.Array behind tpu tensor ``t`` (its shape, dtype and view)."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"to_jax expects a torch.Tensor, got {type(t).__name__}")
    if t.device.type != "tpu":
        raise RuntimeError(f"to_jax expects a tensor on the tpu device, got one on {t.device}; "
                           "move it with .to('tpu') first")
    checks.raise_failed()  # the caller will see device values: pending index checks first
    return access.read(t.detach())


def from_jax(a) -> torch.Tensor:
    """A tpu tensor whose storage is ``a`` itself (moved to the tpu device first
    only when it lives elsewhere)."""
    if not isinstance(a, jax.Array):
        raise TypeError(f"from_jax expects a jax.Array, got {type(a).__name__}")
    if np.dtype(a.dtype) not in dtypes.NP_TO_TORCH:
        raise TypeError(f"from_jax: dtype {a.dtype} has no torch equivalent on tpu")
    device = runtime.jax_device()
    if a.devices() != {device}:
        a = jax.device_put(a, device)
    return buffers.wrap(a)
