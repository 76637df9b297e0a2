"""Moving torch tensors (tpu or cpu) in and out of jax arrays for collectives."""
import jax
import numpy as np
import torch

from ..eager import access


def _np_of_cpu(t):
    t = t.detach().contiguous()
    if t.dtype == torch.bfloat16:
        import ml_dtypes
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


def to_jax(t, device):
    """``t``'s value as a jax array on ``device`` (the rank's own device)."""
    if t.device.type == "tpu":
        return access.read(t)
    return jax.device_put(_np_of_cpu(t), device)


def write(t, value) -> None:
    """Store jax array ``value`` (of ``t``'s element count) into ``t``."""
    # (a jax array's shape property is Python: its aval's is an attribute)
    if tuple(getattr(value, "aval", value).shape) != tuple(t.shape):
        value = value.reshape(t.shape)
    if t.device.type == "tpu":
        access.write(t, value)
        return
    host = np.array(value)  # a writable copy
    if t.dtype == torch.bfloat16:
        src = torch.from_numpy(host.view(np.int16).copy()).view(torch.bfloat16)
    else:
        src = torch.from_numpy(np.ascontiguousarray(host))
    with torch.no_grad():
        t.copy_(src)
