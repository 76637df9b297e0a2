"""Seeing a storage buffer through a tensor's (size, stride, offset, dtype),
and writing a value back through it.  These build traceable functions that
run inside the op's jitted computation, so a view costs no extra dispatch.

A tensor's ``ViewSpec`` says how it sees its storage's buffer; an op
result's ``OutSpec`` says the geometry PyTorch gives it.
"""
import functools
import math
from typing import NamedTuple

import jax.numpy as jnp
import numpy as np
import torch
from jax import lax

from .buffers import contiguous_strides, get_buffer, wrap


class ViewSpec(NamedTuple):
    """A tensor's view of its storage's buffer (NumPy dtypes; ``stride`` and
    ``offset`` count elements of ``dtype``, which may differ from the buffer's)."""
    buf_shape: tuple
    buf_dtype: np.dtype
    size: tuple
    stride: tuple
    offset: int
    dtype: np.dtype


class OutSpec(NamedTuple):
    """An op result's geometry as PyTorch gives it (``stride`` None: row-major)."""
    size: tuple
    stride: tuple
    dtype: np.dtype


def spec_of(t, np_dtype):
    """The view spec of tpu tensor ``t`` (ViewSpec's fields as a plain tuple:
    this runs for every op input, and a NamedTuple costs a call to build; it
    hashes and compares equal to ``ViewSpec(*spec)``) and the buffer it reads."""
    buf = get_buffer(t.untyped_storage())
    return (buf.shape, buf.dtype, tuple(t.shape), t.stride(), t.storage_offset(), np_dtype), buf


def lazy_bits(t):
    """``()`` for a plain tensor; ``(conj, neg)`` for a lazy conjugate or
    negative view (``x.conj()`` of a complex tensor), whose buffer holds the
    unconjugated / unnegated values."""
    conj, neg = t.is_conj(), t.is_neg()
    return (conj, neg) if conj or neg else ()


def apply_bits(value, bits):
    """A lazy view's value from its buffer's, or the buffer's from a value
    written through the view (each bit is its own inverse)."""
    if bits:
        if bits[0]:
            value = jnp.conj(value)
        if bits[1]:
            value = -value
    return value


def covers_buffer(spec) -> bool:
    """Whether the view is its whole buffer in row-major order (the buffer may
    have another shape with the same elements, e.g. flat)."""
    buf_shape, buf_dtype, size, stride, offset, dtype = spec
    if offset or offset is None or dtype != buf_dtype or stride != contiguous_strides(size):
        return False
    return size == buf_shape or math.prod(size) == math.prod(buf_shape)


# ---- the storage offset as a runtime argument ----------------------------------
# An op on ``x[i]`` (a row, a column, a window, a KV-cache slot) would build
# one executable per offset ``i`` if the offset were part of the view's spec.
# A view that does not span its whole buffer therefore reads its offset at run
# time: its spec's offset is None, and the reader and writer take the offset
# as an argument (``lax.dynamic_slice`` of the view's extent, then the view's
# static geometry within it).  Shape, strides and dtypes stay static.

def span(size, stride) -> int:
    """Elements from a non-empty view's first element to one past its last."""
    return 1 + sum((s - 1) * st for s, st in zip(size, stride))


def split_offset(spec):
    """``(spec, offset)``: the spec with its offset None and the offset, for a
    view that could sit at another offset of its buffer; else ``(spec, None)``
    (an empty view's offset becomes 0: it reads nothing)."""
    buf_shape, buf_dtype, size, stride, offset, dtype = spec
    n = math.prod(size)
    if n == 0:
        return (spec if offset == 0 else spec[:4] + (0,) + spec[5:]), None
    elements = math.prod(buf_shape)
    if dtype != buf_dtype:
        elements = elements * np.dtype(buf_dtype).itemsize // np.dtype(dtype).itemsize
    if span(size, stride) >= elements:  # the whole buffer (row-major, transposed, ...): one offset only
        return spec, None
    return spec[:4] + (None,) + spec[5:], offset


def _window_spec(spec):
    """A dynamic-offset view's spec within its window (its extent, offset 0)."""
    _, _, size, stride, _, dtype = spec
    return ((span(size, stride),), dtype, size, stride, 0, dtype)


def _read_at(spec):
    buf_shape, buf_dtype, size, stride, _, dtype = spec
    window = _window_spec(spec)
    read = reader(window)

    def read_at(buf, offset):
        flat = _flat_as(buf, buf_dtype, dtype)
        # in bounds by construction (a valid view), so XLA's clamping never moves it
        return read(lax.dynamic_slice(flat, (offset,), window[0]))
    return read_at


def _write_at(spec):
    buf_shape, buf_dtype, size, stride, _, dtype = spec
    window = _window_spec(spec)
    write = writer(window)

    def write_at(buf, value, offset):
        flat = _flat_as(buf, buf_dtype, dtype)
        part = write(lax.dynamic_slice(flat, (offset,), window[0]), value).reshape(-1)
        return _flat_back(lax.dynamic_update_slice(flat, part, (offset,)), buf_shape, buf_dtype, dtype)
    return write_at


# ---- bytes <-> typed flat arrays -------------------------------------------

def _to_bytes(flat):
    if flat.dtype == np.bool_:
        return flat.astype(np.uint8)
    if jnp.issubdtype(flat.dtype, jnp.complexfloating):
        part = np.float32 if flat.dtype == np.complex64 else np.float64
        flat = jnp.stack([jnp.real(flat), jnp.imag(flat)], axis=-1).reshape(-1).astype(part)
    if flat.dtype.itemsize == 1:
        return lax.bitcast_convert_type(flat, np.uint8)
    return lax.bitcast_convert_type(flat, np.uint8).reshape(-1)


def _from_bytes(raw, dtype):
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return raw != 0
    if np.issubdtype(dtype, np.complexfloating):
        part = np.dtype(np.float32 if dtype == np.complex64 else np.float64)
        pairs = _from_bytes(raw, part).reshape(-1, 2)
        return lax.complex(pairs[:, 0], pairs[:, 1])
    if dtype.itemsize == 1:
        return lax.bitcast_convert_type(raw, dtype)
    return lax.bitcast_convert_type(raw.reshape(-1, dtype.itemsize), dtype)


def _flat_as(buf, buf_dtype, dtype):
    """The buffer as a flat array of ``dtype`` (a bitcast when they differ)."""
    flat = buf.reshape(-1)
    if dtype == buf_dtype:
        return flat
    raw = _to_bytes(flat)
    usable = raw.shape[0] - raw.shape[0] % np.dtype(dtype).itemsize
    return _from_bytes(raw[:usable], dtype)


def _flat_back(flat, buf_shape, buf_dtype, dtype):
    if dtype == buf_dtype:
        return flat.reshape(buf_shape)
    raw = _to_bytes(flat)
    total = math.prod(buf_shape) * np.dtype(buf_dtype).itemsize
    if raw.shape[0] < total:  # a tail shorter than one element of dtype
        raise NotImplementedError("partial-element write through a bitcast view")
    return _from_bytes(raw, buf_dtype).reshape(buf_shape)


# ---- index geometry ---------------------------------------------------------

def _flat_indices(size, stride, offset):
    idx = np.full((), offset, dtype=np.int64)
    for s, st in zip(size, stride):
        idx = idx[..., None] + np.arange(s, dtype=np.int64) * st
    return idx.reshape(size)


def _dense_permutation(size, stride):
    """If the view is a permutation of a dense block, the permutation (else None)."""
    dims = [d for d in range(len(size))]
    order = sorted(dims, key=lambda d: (-stride[d], d))
    expect = 1
    for d in reversed(order):
        if size[d] != 1 and stride[d] != expect:
            return None
        expect *= size[d]
    return order


def _strided_block(size, stride):
    """Express a non-overlapping strided view as a corner of a dense block.

    Returns (order, block_shape, length): the view's dims sorted outermost
    first, the dense block those strides imply (each dim's extent is the ratio
    of the neighbouring strides; an innermost stride > 1 adds a trailing dim we
    index at 0), and how many flat elements the block spans.  None when the
    strides don't nest (overlap, or not divisible): then a gather is needed.
    """
    order = [d for d in sorted(range(len(size)), key=lambda d: (-stride[d], d)) if size[d] != 1]
    if not order:
        return None
    block = []
    for outer, inner in zip(order, order[1:]):
        if stride[inner] == 0 or stride[outer] % stride[inner] or stride[outer] // stride[inner] < size[inner]:
            return None
        block.append(stride[outer] // stride[inner])
    innermost = stride[order[-1]]
    if innermost <= 0:
        return None
    shape = [size[order[0]]] + block + ([innermost] if innermost > 1 else [])
    return order, tuple(shape), math.prod(shape)


def _block_of(flat, offset, length):
    """flat[offset:offset+length], zero-padded past the end of the buffer."""
    short = offset + length - flat.shape[0]
    if short > 0:
        flat = jnp.pad(flat, (0, short))
    return lax.slice(flat, (offset,), (offset + length,))


def _from_block(block, size, order, innermost):
    """The view's values out of its dense block (see _strided_block)."""
    corner = tuple(size[d] for d in order) + ((1,) if innermost > 1 else ())
    picked = lax.slice(block, (0,) * block.ndim, corner)
    if innermost > 1:
        picked = picked[..., 0]
    return jnp.transpose(picked, np.argsort(order)).reshape(size)


def _read_flat(flat, size, stride, offset):
    n = math.prod(size)
    if n == 0:
        return jnp.zeros(size, flat.dtype)
    if stride == contiguous_strides(size):
        return lax.slice(flat, (offset,), (offset + n,)).reshape(size)
    # Broadcast dims (stride 0): read the rest, then broadcast.
    if any(st == 0 and s > 1 for s, st in zip(size, stride)):
        inner_size = tuple(1 if st == 0 else s for s, st in zip(size, stride))
        inner_stride = tuple(0 if st == 0 else st for st in stride)
        return jnp.broadcast_to(_read_flat(flat, inner_size, inner_stride, offset), size)
    order = _dense_permutation(size, stride)
    if order is not None:
        block = lax.slice(flat, (offset,), (offset + n,)).reshape([size[d] for d in order])
        return jnp.transpose(block, np.argsort(order))
    layout = _strided_block(size, stride)
    if layout is not None:  # slices and steps (x[..., a:b], x[:, ::2]): no gather
        order, shape, length = layout
        block = _block_of(flat, offset, length).reshape(shape)
        return _from_block(block, size, order, stride[order[-1]])
    return flat[_flat_indices(size, stride, offset)]


# ---- results laid out as PyTorch strides them ---------------------------------
# An op's result whose strides PyTorch permutes (channels_last, a transposed
# copy) is stored as a row-major buffer of the permuted shape.

def permuted_order(spec):
    """Storage order of the dims of a result with out spec ``(size, stride,
    dtype)`` that PyTorch lays out permuted (None: row-major)."""
    if spec is None:
        return None
    size, stride, _ = spec
    if stride is None or len(size) < 2 or stride == contiguous_strides(size):
        return None
    return _dense_permutation(size, stride)


def buffer_shape(spec):
    """The shape of the buffer that holds a result of out spec ``spec``."""
    order = permuted_order(spec)
    return spec.size if order is None else tuple(spec.size[d] for d in order)


def to_storage_layout(arr, spec):
    """A result's value (traced or not) as its buffer stores it."""
    order = permuted_order(spec)
    return arr if order is None else jnp.transpose(arr, order)


def wrap_result(buf, spec):
    """A new tpu tensor for a result of out spec ``spec`` stored in ``buf``."""
    if permuted_order(spec) is None:
        return wrap(buf)
    return wrap(buf, shape=spec.size, strides=spec.stride)


def channels_last_from(*positions):
    """An op's ``layout`` option (ops/registry.py): the outputs of the rank of
    the first argument at ``positions`` laid out channels_last (PyTorch's
    suggested format for it) take channels_last strides too."""
    def layout(args, out_specs):
        for i in positions:
            t = args[i] if i < len(args) else None
            if isinstance(t, torch.Tensor) and t.dim() in (4, 5):
                fmt = torch._prims_common.suggest_memory_format(t)
                if fmt in (torch.channels_last, torch.channels_last_3d):
                    return [s._replace(stride=torch.empty(s.size, device="meta", memory_format=fmt).stride())
                            if len(s.size) == t.dim() else s for s in out_specs]
        return out_specs
    return layout


def laid_out_like(t, spec):
    """Output ``spec`` with the strides ``torch.empty_like(t)`` has (for
    another shape of ``t``'s rank: dense, in ``t``'s dimension order), as
    PyTorch's kernels lay out SDPA's output after its query."""
    if len(spec.size) != t.dim():
        return spec
    if spec.size == tuple(t.shape):
        return spec._replace(stride=torch.empty_like(t, device="meta").stride())
    order = sorted(range(t.dim()), key=t.stride, reverse=True)  # (stable: ties keep their dim order)
    return spec._replace(stride=dense_strides(spec.size, order))


def dense_strides(size, order):
    """The strides of a dense tensor of ``size`` stored dim ``order[0]``
    outermost to ``order[-1]`` innermost (row-major: ``range(len(size))``)."""
    stored = contiguous_strides(tuple(size[d] for d in order))
    stride = [0] * len(size)
    for d, st in zip(order, stored):
        stride[d] = st
    return tuple(stride)


@functools.lru_cache(maxsize=None)
def reader(spec):
    """A traceable ``buf -> array`` for the view spec (``(buf, offset) ->
    array`` when its offset is None: see ``split_offset``)."""
    buf_shape, buf_dtype, size, stride, offset, dtype = spec
    if offset is None:
        return _read_at(spec)
    if covers_buffer(spec):
        return (lambda buf: buf) if size == buf_shape else (lambda buf: buf.reshape(size))
    return lambda buf: _read_flat(_flat_as(buf, buf_dtype, dtype), size, stride, offset)


@functools.lru_cache(maxsize=None)
def writer(spec):
    """A traceable ``(buf, value) -> new buf`` writing ``value`` through the
    view (``(buf, value, offset) -> new buf`` when its offset is None)."""
    buf_shape, buf_dtype, size, stride, offset, dtype = spec
    if offset is None:
        return _write_at(spec)
    n = math.prod(size)
    if covers_buffer(spec):
        return lambda buf, value: value
    if n == 0:
        return lambda buf, value: buf

    def write(buf, value):
        flat = _flat_as(buf, buf_dtype, dtype)
        layout = _strided_block(size, stride)
        if stride == contiguous_strides(size):
            flat = lax.dynamic_update_slice(flat, value.reshape(-1), (offset,))
        elif layout is not None:
            # Update the view's corner of its dense block, then the block in place.  The block
            # may run past the buffer's end (x[:, ::2] of a buffer, or a dynamic-offset view's
            # window, ends at the view's last element, not at its stride's padding): padded
            # for the update, cut back after; no view element lies in the padding.
            order, shape, length = layout
            end = flat.shape[0]
            if offset + length > end:
                flat = jnp.pad(flat, (0, offset + length - end))
            block = lax.slice(flat, (offset,), (offset + length,)).reshape(shape)
            kept = [size[d] for d in sorted(order)]  # size-1 dims are not in the block
            part = jnp.transpose(value.reshape(kept), np.argsort(np.argsort(order)))
            part = part.reshape(part.shape + ((1,) if len(shape) > len(order) else ()))
            block = lax.dynamic_update_slice(block, part.astype(block.dtype), (0,) * block.ndim)
            flat = lax.dynamic_update_slice(flat, block.reshape(-1), (offset,))[:end]
        else:
            idx = _flat_indices(size, stride, offset)
            flat = flat.at[idx.reshape(-1)].set(value.reshape(-1))
        return _flat_back(flat, buf_shape, buf_dtype, dtype)
    return write


def host_read(spec, buf):
    """The view ``spec`` of the computed buffer ``buf`` (view and buffer of one
    dtype), cut on the host from the whole buffer: no executable is compiled
    for the view's shape and offset, as ``reader`` needs.  Read-only."""
    buf_shape, buf_dtype, size, stride, offset, dtype = spec
    if size == buf_shape and not offset and stride == contiguous_strides(size):  # the whole buffer, as stored
        whole = np.asarray(buf)
        if whole.flags.writeable:  # (a host copy: the caller gets it read-only, as every view)
            whole = whole.view()
            whole.flags.writeable = False
        return whole
    flat = np.asarray(buf).reshape(-1)
    if not size:  # one element (``.item()``, a loop over a tensor): no strided view to build
        one = flat[offset:offset + 1].reshape(())
        one.flags.writeable = False
        return one
    return np.lib.stride_tricks.as_strided(flat[offset:], size, [s * flat.itemsize for s in stride],
                                           writeable=False)
