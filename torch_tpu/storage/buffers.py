"""Device storages: a fake, unique data pointer per storage, with the
``jax.Array`` that holds its bytes hanging off the storage's Python object.

Every view of a tensor shares its StorageImpl, so every alias sees the same
buffer.  Nothing ever dereferences the fake addresses.
"""
import functools
import math
import weakref

import jax.numpy as jnp
import numpy as np
import torch
from torch._C import DispatchKey, DispatchKeySet

from .. import dtypes, native, runtime, tpu_dtypes
from . import memory, transfer

DEVICE = torch.device("privateuseone", 0)  # renamed to tpu at registration

_BY_ADDRESS: dict = {}  # address -> weakref(storage); C++ paths make alias StorageImpls

_CPU_KEYSET = DispatchKeySet(DispatchKey.CPU)
# The CPU kernel of set_ only points the TensorImpl at the storage; calling the
# handle directly skips OpOverload's Python frame (this runs for every output).
_set_storage = torch.ops.aten.set_.source_Storage_storage_offset._handle.redispatch_boxed


class _StorageRef(weakref.ref):
    """The weakref that registers a storage by address and, when the storage
    dies, releases its address and bytes (one object per storage, no closure)."""
    __slots__ = ("addr", "nbytes")


def _release(ref) -> None:
    _BY_ADDRESS.pop(ref.addr, None)
    _freed_bytes(ref.nbytes)


_freed_bytes = memory.freed_bytes

# With the native helper a storage's death is released in C++, and wrap_as
# (OutputTensors: for all its outputs) makes the tensor, its storage, the
# weakref and the ledger entry in one C++ call (native/storages.cpp: ~1 us
# less an output and its death).
_owner = native.storage_owner(_BY_ADDRESS, _StorageRef)
_own_new = _own_many = None
if _owner is not None:
    _release, _own_new, _own_many = _owner


_construct_storage = torch._C._construct_storage_from_data_pointer


def new_storage(nbytes: int, buf) -> torch.UntypedStorage:
    """A tpu storage of ``nbytes`` whose bytes are the jax array ``buf``."""
    addr = memory.allocate(nbytes)
    return _own(_construct_storage(addr, DEVICE, nbytes), addr, nbytes, buf)


def _own(st, addr, nbytes, buf):
    """``st`` (holding the range ``addr``, ``nbytes``) as a storage of ours with bytes ``buf``."""
    st._tpu_buf = buf
    # One weakref serves the address registry and the live-bytes accounting.
    ref = _StorageRef(st, _release)
    ref.addr = addr
    ref.nbytes = nbytes
    _BY_ADDRESS[addr] = ref
    return st


def storage_of(st):
    """The storage object that owns the buffer for ``st`` (which may be a C++ alias)."""
    if hasattr(st, "_tpu_buf"):
        return st
    ref = _BY_ADDRESS.get(st.data_ptr())
    owner = ref() if ref is not None else None
    if owner is None:
        raise RuntimeError("tpu storage has no device buffer (it was freed or never written)")
    return owner


def get_buffer(st):
    try:
        return st._tpu_buf
    except AttributeError:
        return storage_of(st)._tpu_buf


def set_buffer(st, buf) -> None:
    if hasattr(st, "_tpu_buf"):  # the storage's own object (every in-place op: no storage_of call)
        st._tpu_buf = buf
    else:
        storage_of(st)._tpu_buf = buf


@functools.lru_cache(maxsize=4096)
def contiguous_strides(shape):
    strides, acc = [], 1
    for s in reversed(shape):
        strides.append(acc)
        acc *= max(s, 1)
    return tuple(reversed(strides))


_create_empty = torch._C._acc.create_empty_tensor


def new_tensor(st, dtype, shape, strides=None, offset=0) -> torch.Tensor:
    t = _create_empty((0,), dtype)
    if strides is None:
        strides = contiguous_strides(shape)
    _set_storage(_CPU_KEYSET, t, st, offset, shape, strides)
    return t


def adopt(t, arr) -> None:
    """Point tpu tensor ``t`` at a new storage holding ``arr``, at ``arr``'s
    shape, row-major (an out= that factories allocate empty, resized to its result)."""
    aval = getattr(arr, "aval", arr)
    st = new_storage(math.prod(aval.shape) * aval.dtype.itemsize, arr)
    _set_storage(_CPU_KEYSET, t, st, 0, aval.shape, contiguous_strides(aval.shape))


def wrap(arr, shape=None, strides=None) -> torch.Tensor:
    """A new tpu tensor whose storage holds ``arr`` as it is (no copy)."""
    # A jax.Array's shape and dtype are computed properties; its abstract
    # value holds both as plain attributes (a LazyBuffer or NumPy array has
    # them itself).  Per-op code reads them this way.
    aval = getattr(arr, "aval", arr)
    dtype, arr_shape = aval.dtype, aval.shape
    return wrap_as(arr, dtypes.NP_TO_TORCH[dtype], math.prod(arr_shape) * dtype.itemsize,
                   arr_shape if shape is None else shape, strides)


# A row-major output is made at its shape and its own (empty) storage is
# given our address range by swapping in a storage that holds it: about half
# the cost of the boxed set_ per output.  (A private PyTorch method: without
# it, every output takes set_.)
_SWAP_STORAGE = hasattr(torch.UntypedStorage, "_swap_data_ptr_")


def wrap_as(arr, dtype, nbytes, shape, strides) -> torch.Tensor:
    """``wrap`` for a caller that knows the result's torch dtype, byte size and
    geometry in advance (a cached kernel's outputs): no questions to ``arr``.
    ``strides`` None: row-major."""
    if _own_new is not None:  # (all of it in one C++ call)
        return _own_new(arr, dtype, nbytes, shape, strides)
    if strides is None:
        if _SWAP_STORAGE:
            t = _create_empty(shape, dtype)
            st = t.untyped_storage()
            addr = memory.allocate(nbytes)
            st._swap_data_ptr_(_construct_storage(addr, DEVICE, nbytes))
            _own(st, addr, nbytes, arr)
            return t
        strides = contiguous_strides(shape)
    t = _create_empty((0,), dtype)
    _set_storage(_CPU_KEYSET, t, new_storage(nbytes, arr), 0, shape, strides)
    return t


class OutputTensors:
    """``wrap_as`` for a fixed list of results (a compiled graph's outputs),
    their ``wrap_as`` arguments known in advance: their addresses are one
    range allocated per call, at offsets worked out once, and each tensor is
    made inline (no frames per output)."""
    __slots__ = ("metas", "offsets", "size", "nbytes")

    def __init__(self, metas):
        self.metas = [tuple(m) for m in metas]  # per result: wrap_as's (dtype, nbytes, shape, strides)
        self.offsets, self.size = [], 0
        for _, nbytes, _, _ in metas:
            self.offsets.append(self.size)
            self.size += memory.span(nbytes)
        self.nbytes = sum(m[1] for m in metas)

    def __call__(self, arrays):
        if _own_many is not None:  # (all of it in one C++ call)
            return _own_many(arrays, self.metas, self.offsets, self.size, self.nbytes)
        base = _allocate_range(self.size, self.nbytes, len(self.metas))
        tensors = []
        for arr, (dtype, nbytes, shape, strides), offset in zip(arrays, self.metas, self.offsets):
            addr = base + offset
            if strides is None and _SWAP_STORAGE:  # as wrap_as
                t = _create_empty(shape, dtype)
                st = t.untyped_storage()
                st._swap_data_ptr_(_construct_storage(addr, DEVICE, nbytes))
            else:
                st = _construct_storage(addr, DEVICE, nbytes)
                t = _create_empty((0,), dtype)
                _set_storage(_CPU_KEYSET, t, st, 0, shape, strides or contiguous_strides(shape))
            st._tpu_buf = arr  # as _own
            ref = _StorageRef(st, _release)
            ref.addr = addr
            ref.nbytes = nbytes
            _BY_ADDRESS[addr] = ref
            tensors.append(t)
        return tensors


_allocate_range = memory.allocate_range


_SHARED_ZEROS_BYTES = 1 << 22


def _zeros(n, npdtype):
    # jax arrays are immutable and every write gives a storage a new buffer,
    # so one zero-filled array can back any number of fresh small storages.
    if n * npdtype.itemsize <= _SHARED_ZEROS_BYTES:
        return _shared_zeros(n, npdtype)
    return _zeros_fn(n, npdtype)()


_OWN_ZEROS_BYTES = 1 << 16  # a host copy per call: small enough to cost no more than a launch on a TPU's PCIe link


def own_zero_buffer(shape, npdtype):
    """A zero-filled buffer of ``shape`` that no other storage holds (a
    compiled graph may donate it), copied from the host: no compile per shape;
    None past 64 KB (``grad.zero_()`` in a training loop: a compiled fill,
    not a transfer per step)."""
    if math.prod(shape) * npdtype.itemsize > _OWN_ZEROS_BYTES:
        return None
    return transfer.put(np.zeros(shape, npdtype))


@functools.lru_cache(maxsize=256)
def _shared_zeros(n, npdtype):
    # A host copy, not a jitted jnp.zeros: that is an XLA compile for every
    # new size (an eager program's new shapes); a few MB move in far less.
    return transfer.put(np.zeros((n,), npdtype))


@functools.lru_cache(maxsize=None)
def _zeros_fn(n, npdtype):
    runtime.jax_device()  # starts the platform and makes it JAX's default device
    return runtime.device_jit(lambda: jnp.zeros((n,), npdtype))


def storage_numel(shape, strides) -> int:
    if any(s == 0 for s in shape):
        return 0
    return 1 + sum((s - 1) * st for s, st in zip(shape, strides))


def empty_storage(nbytes: int, npdtype) -> torch.UntypedStorage:
    n = nbytes // npdtype.itemsize
    return new_storage(n * npdtype.itemsize, _zeros(n, npdtype))


def allocate_like(shape, strides, dtype) -> torch.Tensor:
    """A zero-filled tpu tensor with the given geometry (used for empty*)."""
    if tpu_dtypes.active:  # on a TPU: float64 warns, complex128 is refused
        tpu_dtypes.entering(dtype)
    npdtype = dtypes.to_np(dtype)
    shape, strides = tuple(shape), tuple(strides)
    n = storage_numel(shape, strides)
    if strides == contiguous_strides(shape):  # (most: made as a kernel's output is)
        return wrap_as(_zeros(n, npdtype), dtype, n * npdtype.itemsize, shape, None)
    return new_tensor(new_storage(n * npdtype.itemsize, _zeros(n, npdtype)), dtype, shape, strides)
