"""Tensor plumbing: views, allocation, copies between devices, scalars."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import torch
from torch._C import DispatchKey, DispatchKeySet

from .. import dtypes, logs, native, runtime
from ..casting import convert
from ..eager import access, checks, fusion
from ..eager.launch import launch
from ..storage import buffers, transfer, views
from . import errors, host_mirror
from .registry import entry_of, kernel, out_dtype, register_raw, resolve

_CPU = DispatchKeySet(DispatchKey.CPU)
_aten = torch.ops.aten


# Views only edit metadata: PyTorch's CPU kernels do exactly that, on our storage.
# (The handle's boxed redispatch, bound to the CPU key set, is called from C++
# with no Python frame: these run for every view, t() and detach.)
# With the native helper (torch_tpu/native) the views among them are these
# same CPU kernels registered from C++: no crossing into Python at all.
def _metadata_only(name, native_kernel):
    register_raw(name, native=native_kernel)(functools.partial(resolve(name)._handle.redispatch_boxed, _CPU))


_NATIVE_VIEWS = native.register_views()  # (empty: not built, see torch_tpu/native)
for _name in ("as_strided.default", "view.default", "_reshape_alias.default",
              "set_.source_Storage_storage_offset", "set_.source_Storage", "set_.source_Tensor",
              "unfold.default", "view_as_real.default", "_unsafe_view.default", "alias.default",
              "is_set_to.default"):  # (is_set_to: compares storages, offsets, sizes and strides)
    _metadata_only(_name, _name in _NATIVE_VIEWS)


# Views that reinterpret the dtype: refused at the op for a dtype the device
# cannot hold (complex32 from float16), rather than at the first read.
def _dtype_view(name):
    op = resolve(name)

    def kernel(*a, **k):
        out = op.redispatch(_CPU, *a, **k)
        _check_dtype(out.dtype, name.split(".")[0])
        return out
    register_raw(name)(kernel)


for _name in ("view_as_complex.default", "view.dtype"):
    _dtype_view(_name)


def _check_dtype(dtype, op_name=None):
    if dtype is not None and dtype not in dtypes.TORCH_TO_NP:
        raise errors.unsupported_dtype(op_name, dtype)


_INT64_MAX = 2**63 - 1


def _check_nonnegative(size):
    negative = [s for s in size if s < 0]
    if negative:
        raise RuntimeError(f"Trying to create tensor with negative dimension {negative[0]}: {list(size)}")


def _check_storage_size(size, strides, dtype, strided=False):
    """The CPU's overflow errors for a storage past int64 bytes (XLA would
    abort the process building a buffer of that many elements).  The CPU sums
    strides as unsigned numbers: a negative one overflows too."""
    if any(st > _INT64_MAX for st in strides):
        raise RuntimeError("Stride calculation overflowed")
    nbytes = buffers.storage_numel(size, strides) * dtype.itemsize
    if nbytes > _INT64_MAX or (nbytes and any(s > 1 and st < 0 for s, st in zip(size, strides))):
        shown = f"sizes={list(size)}" + (f" and strides={list(strides)}" if strided else "")
        raise RuntimeError(f"Storage size calculation overflowed with {shown}")


def _deterministic_fill(t):
    """With ``torch.use_deterministic_algorithms(True)`` (and
    ``torch.utils.deterministic.fill_uninitialized_memory``, its default) the
    CPU fills memory it hands out uninitialized: NaN for floating and complex
    dtypes, the largest value for integers, True for bool.  ``t`` is filled so."""
    if not (torch.are_deterministic_algorithms_enabled()
            and torch._C._get_deterministic_fill_uninitialized_memory()) or t.numel() == 0:
        return t
    if t.dtype.is_floating_point or t.dtype.is_complex:
        value = float("nan")
    elif t.dtype == torch.bool:
        value = True
    else:
        value = torch.iinfo(t.dtype).max
    t.fill_(value)
    return t


@register_raw("empty.memory_format")
def empty(size, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    return _deterministic_fill(_zeroed(size, dtype, device, memory_format))


def _zeroed(size, dtype, device, memory_format=None):
    """A new tensor (its buffer holds zeros; empty's values are unspecified)."""
    dtype = dtype or torch.get_default_dtype()
    size = tuple(int(s) for s in size)
    return buffers.allocate_like(size, _checked_strides(size, dtype, device, memory_format), dtype)


@functools.lru_cache(maxsize=1024)
def _checked_strides(size, dtype, device, memory_format):
    """The strides of a new tensor, after the CPU's checks of its arguments;
    remembered (an error is not), as each forward allocates the same few."""
    runtime.check_device(device)
    _check_dtype(dtype)
    _check_nonnegative(size)
    strides = buffers.contiguous_strides(size)
    if memory_format not in (None, torch.contiguous_format):
        # the meta tensor's strides, and its error for a format the rank cannot take
        strides = torch.empty(size, device="meta", memory_format=memory_format).stride()
    _check_storage_size(size, strides, dtype)
    return strides


@register_raw("_efficientzerotensor.default")
def efficient_zero_tensor(size, dtype=None, layout=None, device=None, pin_memory=None):
    """Backward formulas' zero gradient (sgn's, say).  CUDA marks it a
    read-only ZeroTensor that later ops skip; a plain zero-filled tensor has
    the same values."""
    return _zeroed(size, dtype, device)


@register_raw("empty_strided.default")
def empty_strided(size, stride, dtype=None, layout=None, device=None, pin_memory=None):
    runtime.check_device(device)
    dtype = dtype or torch.get_default_dtype()
    _check_dtype(dtype)
    size, stride = tuple(size), tuple(stride)
    if len(size) != len(stride):
        raise RuntimeError(f"dimensionality of sizes ({len(size)}) must match dimensionality of strides ({len(stride)})")
    _check_nonnegative(size)
    _check_storage_size(size, stride, dtype, strided=True)
    return _deterministic_fill(buffers.allocate_like(size, stride, dtype))


@register_raw("resize_.default")
def resize_(self, size, memory_format=None):
    size = tuple(int(s) for s in size)
    if memory_format is None:  # same shape: a no-op (a strided view stays strided)
        if tuple(self.shape) == size:
            return self
        strides = buffers.contiguous_strides(size)
    else:  # the CPU's strides for that format (and its error for another rank)
        strides = torch.empty(0, device="meta").resize_(size, memory_format=memory_format).stride()
        if tuple(self.shape) == size and self.stride() == strides:
            return self
    _check_storage_size(size, strides, self.dtype)
    itemsize = self.element_size()
    needed = (self.storage_offset() + buffers.storage_numel(size, strides)) * itemsize
    st = self.untyped_storage()
    if needed > st.nbytes():
        # the new storage starts with the old storage's elements, in storage
        # order (a strided tensor's gaps too), as the CPU's realloc keeps them
        kept = st.nbytes() // itemsize
        fresh = buffers.allocate_like((needed // itemsize,), (1,), self.dtype)
        if kept:
            access.write(fresh[:kept], access.read(buffers.new_tensor(st, self.dtype, (kept,))))
        _deterministic_fill(fresh[kept:])  # the CPU fills the grown part of the storage
        st = fresh.untyped_storage()
    _aten.set_.source_Storage_storage_offset.redispatch(
        _CPU, self, st, self.storage_offset(), size, strides)
    return self


@register_raw("set_.default")
def set_empty(self):
    st = buffers.empty_storage(0, dtypes.to_np(self.dtype))
    return _aten.set_.source_Storage_storage_offset.redispatch(_CPU, self, st, 0, (0,), (1,))


# ---- copies --------------------------------------------------------------------

def to_device_array(cpu_tensor):
    """A CPU tensor's value as a jax array on the device (a private copy)."""
    return transfer.put(dtypes.numpy_from_cpu_tensor(cpu_tensor))


def _moved_to_device(name, t):
    """CPU tensor ``t``'s values as a device array of its shape, one transfer
    launched as op ``name``; and the host array moved."""
    host = dtypes.numpy_from_cpu_tensor(_numpy_ranked(t))
    value = launch(name, transfer.put, (host,))
    if value.ndim != t.dim():  # past NumPy's 64 dims: moved flat, shaped on the device
        value = launch(name, functools.partial(jnp.reshape, shape=tuple(t.shape)), (value,))
    return value, host


_NUMPY_MAX_DIMS = 64  # PyTorch and XLA go further; NumPy (and DLPack into it) stop here


def _numpy_ranked(t):
    """``t``, flattened when NumPy could not hold its shape."""
    return t.reshape(-1) if t.dim() > _NUMPY_MAX_DIMS else t


def _read_for_host(t, what):
    # The host is about to wait: start every pending fused op now, not only the
    # ones this value needs, so a training loop's chains cut at the same places
    # each step; the ops this value needs go first, as their own chain.
    logs.host_read(t, what)  # TORCH_TPU_LOGS=sync
    fusion.flush("host read", first=buffers.get_buffer(t.untyped_storage()))
    checks.raise_failed()  # a failed index check raises before its results reach the host
    if t.dim() > _NUMPY_MAX_DIMS:  # flat on the device first (the caller shapes the CPU tensor)
        return launch("aten::_to_copy", functools.partial(jnp.reshape, shape=(-1,)), (access.read(t),))
    return access.read_host(t)


def to_cpu_tensor(t):
    """A tpu tensor's value as a new CPU tensor (waits for the device)."""
    arr = _read_for_host(t, ".cpu() / copy to the host")
    try:
        host = np.asarray(arr)
    except Exception as e:
        raise RuntimeError(f"tpu: reading a tensor back failed: {e}") from None
    out = dtypes.cpu_tensor_from_numpy(host)
    return out if out.shape == t.shape else out.reshape(tuple(t.shape))


# dst[...] = src through dst's view, cast and broadcast: one jitted write (or
# one recorded op in fused mode); src may be a CPU tensor (a host-to-device copy).
_copy_kernel = kernel("copy_.default", lambda self, src, non_blocking=False: src,
                      "inplace", allow_cpu=("src",))


_copy_enter = entry_of(_copy_kernel)  # (its native entry when built: a cached copy's call in C++)


def copy_into(dst, src) -> None:
    """dst[...] = src, with dst on tpu and src on tpu or the CPU."""
    _copy_enter(dst, src)


@functools.cache
def _warn_complex_to_real():
    # the CPU's copy_ warns once per process (TORCH_WARN_ONCE)
    errors.warn_at_caller("Casting complex values to real discards the imaginary part")


def _plain(t):
    """t seen as a plain Tensor: a lazy module's UninitializedParameter/Buffer (whose
    ``.shape`` raises) reaches _to_copy and copy_ when the module is moved before
    its first forward."""
    return t if type(t) is torch.Tensor or not isinstance(t, torch.nn.parameter.UninitializedTensorMixin) \
        else t.as_subclass(torch.Tensor)


def _takes_host_value(dst, src):
    """Whether copy_ from CPU tensor ``src`` is its values becoming all of ``dst``'s
    storage as they are (a CPU state dict loaded, a staging buffer filled):
    no cast, broadcast or view to write through."""
    npdtype = dtypes.TORCH_TO_NP.get(src.dtype)
    return (src.dtype == dst.dtype and src.shape == dst.shape and npdtype is not None
            and access.becomes_buffer(dst, buffers.get_buffer(dst.untyped_storage()),
                                      jax.ShapeDtypeStruct(tuple(src.shape), npdtype)))


def _copy_from_host(dst, src):
    """``dst.copy_(src)`` for ``_takes_host_value``: one transfer, the storage's
    new buffer (``access.write``'s whole-buffer case, already checked)."""
    buffers.set_buffer(dst.untyped_storage(), _moved_to_device("aten::copy_", src)[0])


@register_raw("copy_.default")
def copy_(self, src, non_blocking=False):
    self, src = _plain(self), _plain(src)
    if self.device.type == "tpu":
        if src.is_complex() and not self.is_complex():
            _warn_complex_to_real()
        write = _copy_from_host if src.device.type == "cpu" and _takes_host_value(self, src) else _copy_enter
        if self.is_floating_point():  # (no host values are kept for floats: host_mirror)
            write(self, src)
        else:
            host_mirror.write_known(self, src, lambda: write(self, src))
        return self
    # tpu -> CPU (or another device): bring the value to the host, then PyTorch copies.
    self.copy_(to_cpu_tensor(src))
    return self


@register_raw("_copy_from.default")
def _copy_from(self, dst, non_blocking=False):
    return copy_(dst, self, non_blocking)


@register_raw("_copy_from_and_resize.default")
def _copy_from_and_resize(self, dst):
    if tuple(dst.shape) != tuple(self.shape):
        dst.resize_(self.shape)
    return copy_(dst, self)


same_device_cast = kernel("_to_copy.default", lambda self, **_: convert(self, out_dtype()))
# (a cached cast, keywords and all, is matched by the native entry)
_cast_enter = entry_of(same_device_cast)


@register_raw("_to_copy.default")
def _to_copy(self, dtype=None, layout=None, device=None, pin_memory=None,
             non_blocking=False, memory_format=None):
    runtime.check_device(device)
    self = _plain(self)
    target = torch.device(device) if device is not None else self.device
    dtype = dtype or self.dtype
    if target.type == "tpu":
        _check_dtype(dtype)
        if self.device.type == "tpu":  # the meta kernel picks the strides memory_format asks for
            return _cast_enter(self, dtype=dtype, memory_format=memory_format)
        value, host = _moved_to_device(  # (a dtype a TPU refuses raises here)
            "aten::_to_copy", self if self.dtype == dtype else self.to(dtype))
        shape = tuple(self.shape)
        strides = _copy_strides(self, memory_format)
        if strides == buffers.contiguous_strides(shape):  # (the common case: as it came)
            out = buffers.wrap(value)
        else:
            spec = views.OutSpec(shape, strides, value.dtype)
            out = views.wrap_result(views.to_storage_layout(value, spec), spec)
        host_mirror.remember(out, host)
        return out
    host = to_cpu_tensor(self)
    strides = _copy_strides(self, memory_format)
    if strides != buffers.contiguous_strides(tuple(self.shape)):  # e.g. channels_last stays so
        host = torch.empty_strided(self.shape, strides, dtype=host.dtype).copy_(host)
    if target.type == "cpu" and host.dtype == dtype:  # (the common case: nothing left to do)
        return host
    return host.to(device=target, dtype=dtype)


def _copy_strides(t, memory_format):
    """The strides PyTorch gives a copy of ``t`` made with ``memory_format``
    (preserve: ``t``'s own when dense, e.g. channels_last; else row-major)."""
    if t.is_contiguous() and memory_format in (None, torch.preserve_format, torch.contiguous_format):
        return buffers.contiguous_strides(tuple(t.shape))
    meta = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")
    return torch.empty_like(meta, memory_format=memory_format or torch.preserve_format).stride()


@register_raw("_local_scalar_dense.default")
def _local_scalar_dense(self):
    pending_value = _read_for_host(self, ".item()")
    return np.asarray(pending_value).reshape(()).item()




# Module.to("tpu") keeps parameters (and so tied weights) as the same objects
# only if a CPU and a tpu tensor count as "shallow-copy compatible"; PyTorch's
# C++ check lists the built-in dense backends but not PrivateUse1.
def _shallow_copy_compatible(self, from_):
    def dense(t):
        return t.layout == torch.strided and t.device.type in ("cpu", "tpu") and not t.is_quantized
    return dense(self) and dense(from_)


_autograd_lib = torch.library.Library("aten", "IMPL")
_autograd_lib.impl("_has_compatible_shallow_copy_type", _shallow_copy_compatible, "AutogradPrivateUse1")
