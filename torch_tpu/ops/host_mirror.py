"""Small integer tensors copied from the host keep their host values until
their storage is written again.

An index built from host data (``x[[0, 10]]``, ``torch.tensor([...],
device="tpu")``, ``idx.to("tpu")``) is then range-checked at the op, as on the
CPU, with no wait for the device; only indices computed on the device are
checked at the next host read (``eager.checks``).  The values are tied to the
storage's current buffer: any write to the storage replaces the buffer and so
forgets them.
"""
import numpy as np
import torch

from ..storage import buffers

_MAX_NUMEL = 4096  # index-sized tensors only: larger ones are not kept


def remember(t: torch.Tensor, host: np.ndarray) -> None:
    """``t`` (a tpu tensor filling its whole storage, row-major) now holds ``host``."""
    if t.is_floating_point() or t.is_complex() or t.numel() > _MAX_NUMEL:
        return
    st = t.untyped_storage()
    if (t.storage_offset() != 0 or not t.is_contiguous()
            or t.numel() * t.element_size() != st.nbytes()):
        return
    owner = buffers.storage_of(st)
    owner._tpu_host = (buffers.get_buffer(st), t.dtype, np.array(host).reshape(-1))


def recall(t: torch.Tensor):
    """``t``'s values as a NumPy array if its storage still holds what was
    remembered (else None)."""
    st = t.untyped_storage()
    owner = buffers.storage_of(st)
    kept = getattr(owner, "_tpu_host", None)
    if kept is None or kept[0] is not buffers.get_buffer(st) or kept[1] != t.dtype:
        return None
    flat = kept[2]
    return np.lib.stride_tricks.as_strided(
        flat[t.storage_offset():], shape=tuple(t.shape),
        strides=tuple(s * flat.itemsize for s in t.stride()), writeable=False)
