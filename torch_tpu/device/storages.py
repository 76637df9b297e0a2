"""PyTorch paths that allocate device storage through the C++ allocator, which a
Python backend cannot provide (they would crash): ``torch.UntypedStorage(n,
device="tpu")``, used by ``storage.clone()``, ``copy.deepcopy``, ``pickle`` and
``torch.load(map_location="tpu")``.  We route them to our own storages
(installed at ``import torch``: the first such storage loads torch_tpu)."""
import torch

from .. import loading

_original_new = torch.UntypedStorage.__new__


def _untyped_storage_new(cls, *args, device=None, **kwargs):
    if device is not None and torch.device(device).type == "tpu":
        loading.load()
        from .. import dtypes, runtime
        from ..storage import buffers
        runtime.check_device(device)
        if len(args) == 1 and isinstance(args[0], int) and not kwargs:
            return buffers.empty_storage(args[0], dtypes.to_np(torch.uint8))
        if not args and not kwargs:
            return buffers.empty_storage(0, dtypes.to_np(torch.uint8))
        if len(args) == 1 and isinstance(args[0], (list, tuple)) and not kwargs:
            # a sequence of byte values: the CPU's storage of them (and its errors), copied over
            host = _original_new(cls, args[0])
            st = buffers.empty_storage(host.nbytes(), dtypes.to_np(torch.uint8))
            if host.nbytes():
                st.copy_(host)
            return st
        raise TypeError("torch.UntypedStorage(..., device='tpu') takes a size in bytes or a sequence of bytes")
    return _original_new(cls, *args, device=device, **kwargs) if device is not None \
        else _original_new(cls, *args, **kwargs)


_original_resize = torch.UntypedStorage.resize_


def _untyped_storage_resize(self, nbytes):
    """FSDP2 frees unsharded parameters with ``storage.resize_(0)`` and brings
    them back with ``resize_(n)``.  A Python backend cannot change a
    StorageImpl's size, so on tpu both are accepted and the storage keeps its
    buffer: FSDP2 runs correctly, without returning that memory in between."""
    if self.device.type != "tpu":
        return _original_resize(self, nbytes)
    if nbytes in (0, self.nbytes()):
        return self
    raise RuntimeError(
        f"tpu storages cannot be resized in place (from {self.nbytes()} to {nbytes} bytes); "
        "resize the tensor instead (Tensor.resize_)")


def install() -> None:
    torch.UntypedStorage.__new__ = _untyped_storage_new
    torch.UntypedStorage.resize_ = _untyped_storage_resize
