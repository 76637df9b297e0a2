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

from .. import dtypes
from ..eager import access
from ..storage import buffers

MAX_NUMEL = 4096  # index-sized tensors only: larger ones are not kept


def remember(t: torch.Tensor, host: np.ndarray, copy=True) -> None:
    """``t`` (a tpu tensor filling its whole storage, row-major) now holds
    ``host`` (kept as it is with ``copy=False``: a flat array nobody writes)."""
    if t.is_floating_point() or t.is_complex() or t.numel() > MAX_NUMEL:
        return
    st = t.untyped_storage()
    if (t.storage_offset() != 0 or not t.is_contiguous()
            or t.numel() * t.element_size() != st.nbytes()):
        return
    keep(buffers.storage_of(st), buffers.get_buffer(st), t.dtype, np.array(host).reshape(-1) if copy else host)


def keep(owner, buf, dtype, flat) -> None:
    """``owner`` (a storage of ours, holding ``buf``) has the values ``flat``
    (row-major, of ``dtype``; read-only to everyone else): ``remember``
    without its checks, for a caller that made the storage whole itself."""
    owner._tpu_host = (buf, dtype, flat)


def recall(t: torch.Tensor):
    """``t``'s values as a NumPy array if its storage still holds what was
    remembered (else None)."""
    st = t.untyped_storage()
    owner = buffers.storage_of(st)
    kept = getattr(owner, "_tpu_host", None)
    if kept is None or kept[0] is not buffers.get_buffer(st) or kept[1] != t.dtype:
        return None
    flat = kept[2]
    if t.storage_offset() == 0 and t.numel() == flat.size and t.is_contiguous():  # (the usual index)
        whole = flat.reshape(tuple(t.shape))
        whole.flags.writeable = False
        return whole
    return np.lib.stride_tricks.as_strided(
        flat[t.storage_offset():], shape=tuple(t.shape),
        strides=tuple(s * flat.itemsize for s in t.stride()), writeable=False)


# ---- writes of host-known values keep the values known -------------------------
# ``ind = torch.ones(20, dtype=torch.long, device="tpu"); ind[-1] = 10`` is
# empty + fill_ and then copy_ of a filled 0-d tensor into a view: following
# those writes on the host keeps ``a[ind]``'s range check at the op, as on the CPU.

def _flat_before_write(dst):
    """The host values of ``dst``'s storage that a write to ``dst`` updates
    (a fresh array when the write covers the whole storage), or None."""
    if dst.is_floating_point() or dst.is_complex():
        return None
    st = dst.untyped_storage()
    numel = st.nbytes() // dst.element_size()
    if numel > MAX_NUMEL or dst.device.type != "tpu":
        return None
    if dst.storage_offset() == 0 and dst.is_contiguous() and dst.numel() == numel:
        return np.empty(numel, dtypes.TORCH_TO_NP[dst.dtype])
    kept = getattr(buffers.storage_of(st), "_tpu_host", None)
    if kept is None or kept[0] is not buffers.get_buffer(st) or kept[1] != dst.dtype:
        return None
    return kept[2].copy()


def _host_value(value):
    """An integer or bool value's host array (a Python number, a whole float, a
    CPU tensor, or a tpu tensor whose values are known), else None."""
    if isinstance(value, (bool, int)):
        return np.asarray(value)
    if isinstance(value, float):  # torch.ones fills with 1.0: whole numbers are exact
        return np.asarray(int(value)) if value.is_integer() else None
    if not isinstance(value, torch.Tensor) or value.is_floating_point() or value.is_complex():
        return None
    if value.device.type == "cpu":
        return dtypes.numpy_from_cpu_tensor(value)
    return recall(value)


def write_known(dst, value, write):
    """``write()`` (which stores ``value`` into ``dst``), keeping ``dst``'s
    storage's host values known when they were and ``value`` is known."""
    flat = _flat_before_write(dst)
    result = write()
    host = _host_value(value) if flat is not None else None
    if host is None:
        return result  # the write replaced the buffer: the old values are forgotten
    try:
        cast = np.broadcast_to(host, tuple(dst.shape)).astype(flat.dtype)
    except (ValueError, OverflowError):
        return result
    flat_view = np.lib.stride_tricks.as_strided(
        flat[dst.storage_offset():], shape=tuple(dst.shape),
        strides=tuple(s * flat.itemsize for s in dst.stride()))
    flat_view[...] = cast
    st = dst.untyped_storage()
    keep(buffers.storage_of(st), buffers.get_buffer(st), dst.dtype, flat)
    return result


def _fill_known(kernel, self, value):
    return write_known(self, value, lambda: kernel(self, value))


def _zero_known(kernel, self):
    # zeros(shape) is empty + zero_: a zero-filled buffer where it can, not a program per shape
    return write_known(self, 0, lambda: self if access.zero_whole(self) else kernel(self))


def follow_fills():
    """Keep host values known through ``fill_``/``zero_`` (zeros/ones/full/
    scalar_tensor arrive as empty + fill_ or zero_); called once their kernels
    are registered."""
    from .registry import wrap_entry
    wrap_entry("fill_.Scalar", "fill_.Tensor", around=_fill_known)
    wrap_entry("zero_.default", around=_zero_known)


def copy_known(src, dst) -> None:
    """``dst``, just made a copy of ``src`` (a clone), has ``src``'s host
    values when those are known."""
    if not (src.is_floating_point() or src.is_complex()):
        host = recall(src)
        if host is not None:
            remember(dst, host)
