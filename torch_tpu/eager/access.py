"""Reading a whole tpu tensor as a jax array, and writing one into it, outside
of an op's own computation (copies, the CPU fallback, ``to_jax``)."""
import functools
import math
import operator
import sys
import weakref

import jax
import jax.numpy as jnp
import numpy as np
from torch._prims_common import is_non_overlapping_and_dense_or_false

from .. import dtypes, runtime
from ..casting import convert
from ..storage import buffers, views
from . import fusion, modes, pending
from .launch import launch


@functools.lru_cache(maxsize=None)
def _jit_reader(spec, bits=()):
    read = views.reader(spec)
    return jax.jit(lambda buf: views.apply_bits(read(buf), bits))


@functools.lru_cache(maxsize=None)
def _jit_writer(spec, value_shape, value_dtype, bits=(), donate=False):
    write = views.writer(spec)
    _, _, size, _, _, dtype = spec
    return jax.jit(lambda buf, value: write(buf, views.apply_bits(
        jnp.broadcast_to(convert(value, dtype), size), bits)), donate_argnums=(0,) if donate else ())


# ---- writes into part of a large buffer ----------------------------------------
# A write through a view (x[i] = v, out= into a slice, DDP's copies of the
# gradients into its buckets) gives the storage a new buffer.  XLA must keep
# an executable's inputs intact, so it first copies the whole old buffer:
# O(storage) per write.  When nothing but the storage holds the old buffer it
# is handed to the executable ("donated") and XLA updates it in place: O(view).
# Below this size the copy costs less than compiling the donating executable.
DONATE_BYTES = 1 << 18
donations = 0  # writes that donated their buffer (tests count them)


@functools.cache
def _array_type():
    # jax's concrete array type (a LazyBuffer or NumPy buffer is never
    # donated), asked once the runtime is up: not at import, which must leave
    # jax.distributed.initialize free to run first
    return type(jnp.zeros(()))


def worth_donating(specs, positions) -> tuple:
    """Of in-place destinations ``specs`` whose buffers are the inputs at
    ``positions``, the positions whose write would copy a large buffer."""
    return tuple(sorted({p for spec, p in zip(specs, positions)
                         if not views.covers_buffer(spec)
                         and math.prod(spec[0]) * np.dtype(spec[1]).itemsize >= DONATE_BYTES}))


def can_donate(inputs, positions, owners, held=0) -> bool:
    """Whether the buffers at ``positions`` of ``inputs`` may be donated: each a
    device array, the buffer of the storage of the tensor of ``owners`` at the
    same index, passed once, held by no one but that storage, the queue of
    launched work (``pending``: a donated array counts there as done) and the
    caller (``held`` references besides ``inputs``).  Shared buffers (one
    zero-filled array backs many fresh storages; ``read`` hands out a
    storage's array as it is) and fused mode's recorded buffers are kept."""
    if modes.is_fused():
        return False
    global donations
    array, fewest = _array_type(), 1 + 1 + held + 2  # (once per call: a compiled optimizer asks for ~100 buffers)
    for p, owner in zip(positions, owners, strict=True):
        buf = inputs[p]
        if type(buf) is not array or buf.is_deleted():
            return False
        st = owner.untyped_storage()
        try:
            held_by_storage = st._tpu_buf is buf  # (get_buffer's common case, without its frame)
        except AttributeError:
            held_by_storage = buffers.get_buffer(st) is buf
        if not held_by_storage:  # e.g. a LazyBuffer holds it
            return False
        # references: the storage, `inputs` (uses), the caller's, `buf` here, getrefcount's argument
        refs = sys.getrefcount(buf)
        if refs == fewest:  # the fewest there can be: used once, not queued (no scans)
            continue
        uses = sum(map(operator.is_, inputs, [buf] * len(inputs)))
        if uses != 1 or not pending.holds(buf, refs - (1 + uses + held + 2)):
            return False
    donations += 1
    return True


# ---- an out= op's result written inside the op's own program ----------------
# ``torch.mul(g, s, out=bucket_view)`` (DDP's gradient into its bucket) would
# otherwise run the op into a fresh buffer and then copy that through the view:
# two launches.  Composing the op with the write through ``out``'s view makes
# it one, and with a donated buffer an O(view) in-place update.

@functools.lru_cache(maxsize=4096)
def _jit_result_writer(fn, spec, donate):
    """``(buf, *inputs[, offset])``: the op's result written through view
    ``spec``; a spec whose offset is None (``views.split_offset``) takes the
    offset as the last argument, so one executable serves every row."""
    write = views.writer(spec)
    size = spec[2]  # a ViewSpec's fields
    fn = runtime.nestable(fn)  # (a jit with compile options cannot be nested)
    if spec[4] is None:
        def run(buf, *rest):
            return write(buf, fn(*rest[:-1])[0].reshape(size), rest[-1])
    else:
        def run(buf, *inputs):
            return write(buf, fn(*inputs)[0].reshape(size))
    return jax.jit(run, donate_argnums=(0,) if donate else ())


def write_result(name, fn, inputs, out_spec, out) -> bool:
    """Run op ``name``'s ``fn(*inputs)``, whose one result has out spec
    ``out_spec`` (size, stride, dtype), writing it straight through tpu tensor
    ``out``; False (nothing run) when ``out`` needs what the separate copy
    does (a resize, a cast, a lazy conj/neg bit, a permuted result layout) or
    when ops are being recorded (fused mode)."""
    if (modes.is_fused() or isinstance(out, (list, tuple)) or out.device.type != "tpu" or out.is_conj() or out.is_neg()
            or tuple(out.shape) != out_spec.size or views.permuted_order(out_spec) is not None):
        return False
    dtype = dtypes.TORCH_TO_NP[out.dtype]
    if dtype != out_spec.dtype:
        return False
    spec, buf = views.spec_of(out, dtype)
    if type(buf) is not _array_type():  # a LazyBuffer or a host buffer: the copy resolves it
        return False
    every = [buf, *inputs]
    del buf
    donate = bool(worth_donating([spec], [0])) and can_donate(every, (0,), (out,))
    free, offset = views.split_offset(spec)
    if offset is not None:  # a run-time argument: out= into x[i] compiles once for every i
        every.append(np.int64(offset))
    new = launch(name, _jit_result_writer(fn, free, donate), every, [(spec[0], spec[1])])
    buffers.set_buffer(out.untyped_storage(), new)
    return True


def take_result(out, result) -> bool:
    """Give tpu tensor ``out`` the buffer of ``result`` (a fresh op result of
    the same shape and dtype, dropped after this) instead of copying it, when
    each is its whole buffer in row-major order: an out= (resized or not)
    then compiles no copy per shape.  False (nothing done) when the copy's
    write through a view, cast or lazy conj/neg bit is needed."""
    if (modes.is_fused() or out.dtype != result.dtype or out.shape != result.shape or out.is_conj() or out.is_neg()
            or result.is_conj() or result.is_neg()):
        return False
    dtype = dtypes.TORCH_TO_NP[out.dtype]
    spec, buf = views.spec_of(out, dtype)
    result_spec, value = views.spec_of(result, dtype)
    del buf
    if type(value) is not _array_type() or not (views.covers_buffer(spec) and views.covers_buffer(result_spec)):
        return False
    buffers.set_buffer(out.untyped_storage(), value)
    return True


def zero_whole(t) -> bool:
    """Zero tpu tensor ``t`` by giving its storage its own zero-filled buffer
    (copied from the host: no program compiled per shape) when ``t`` covers
    its whole buffer once, in any order (channels_last too); False (nothing
    done) otherwise."""
    if modes.is_fused() or t.storage_offset() or not is_non_overlapping_and_dense_or_false(t):
        return False
    buf = buffers.get_buffer(t.untyped_storage())
    if type(buf) is not _array_type() or buf.dtype != dtypes.TORCH_TO_NP[t.dtype] or buf.size != t.numel():
        return False
    # the buffer shape the zero_ program gives (a row-major write: the tensor's), so later programs match
    zeros = buffers.own_zero_buffer(tuple(t.shape) if t.is_contiguous() else buf.shape, buf.dtype)
    if zeros is None:
        return False
    buffers.set_buffer(t.untyped_storage(), zeros)
    return True


def read(t, keep_pending=False):
    """The value of tpu tensor ``t`` as a jax array of its shape and dtype.
    ``keep_pending``: when ``t`` is all of a pending fused result, that
    LazyBuffer as it is (an input ``launch`` records after it in fused mode,
    instead of running the pending chain first)."""
    spec, buf = views.spec_of(t, dtypes.TORCH_TO_NP[t.dtype])
    bits = views.lazy_bits(t)
    buf_shape, _, size, _, _, _ = spec  # a ViewSpec's fields
    if not bits and views.covers_buffer(spec) and buf_shape == size:
        return buf if keep_pending else fusion.resolve(buf)
    return _jit_reader(spec, bits)(fusion.resolve(buf))


# A view is cut on the host from its whole buffer (no executable compiled for
# the view's shape and offset) when the buffer is this small or the view is
# most of it; else only the view's elements move, through a jitted reader.
_HOST_VIEW_NUMEL = 1 << 16


def read_host(t) -> np.ndarray:
    """The value of tpu tensor ``t`` as a NumPy array (waits for the device)."""
    spec, buf = views.spec_of(t, dtypes.TORCH_TO_NP[t.dtype])
    buf = fusion.resolve(buf)
    buf_shape, buf_dtype, size, _, _, dtype = spec
    whole = math.prod(buf_shape)
    if buf_dtype != dtype:
        return np.asarray(read(t))
    if whole > _HOST_VIEW_NUMEL and whole > 2 * math.prod(size):
        host = _host_copy_on_second_read(buf, whole * np.dtype(buf_dtype).itemsize)
        if host is None:
            return np.asarray(read(t))
        buf = host
    value = views.host_read(spec, buf)
    bits = views.lazy_bits(t)
    if bits and bits[0]:
        value = np.conj(value)
    if bits and bits[1]:
        value = np.negative(value)
    return value


# The buffer whose small views were read last, and its host copy once it has been
# read twice: reading a big tensor element by element (``for v in t``, ``all(t)``)
# then moves it once, where a jitted reader would compile per element's offset.
# A buffer never changes (a write makes a new one), so the copy stays valid.
_LAST_READ = {"buf": None, "host": None}
_HOST_COPY_BYTES = 1 << 26


def _host_copy_on_second_read(buf, nbytes):
    last = _LAST_READ["buf"]
    if last is None or last() is not buf:
        _LAST_READ.update(buf=_weak(buf), host=None)
        return None
    if _LAST_READ["host"] is None and nbytes <= _HOST_COPY_BYTES:
        host = _LAST_READ["host"] = np.array(buf)  # a copy: never aliases a buffer a later write donates
        host.flags.writeable = False
    return _LAST_READ["host"]


def _weak(buf):
    def forget(ref):  # the buffer is gone: drop its host copy with it
        if _LAST_READ["buf"] is ref:
            _LAST_READ.update(buf=None, host=None)
    try:
        return weakref.ref(buf, forget)
    except TypeError:  # not weak-referenceable: never cached
        return None


def becomes_buffer(t, buf, value) -> bool:
    """Whether writing ``value`` through tpu tensor ``t`` over its storage's
    buffer ``buf`` is handing the storage ``value`` as its new buffer: ``t``
    is the whole storage, row-major, of ``value``'s shape and dtype."""
    old, new = getattr(buf, "aval", buf), getattr(value, "aval", value)  # shape, dtype as attributes
    return (new.dtype == old.dtype and not t.storage_offset() and new.shape == t.shape
            and t.numel() == math.prod(old.shape) and t.is_contiguous()
            and new.dtype == dtypes.TORCH_TO_NP[t.dtype] and not t.is_conj() and not t.is_neg())


def write(t, value) -> None:
    """Store ``value`` (broadcast and cast as needed) through tpu tensor ``t``."""
    st = t.untyped_storage()
    if becomes_buffer(t, buffers.get_buffer(st), value):
        # the whole storage, row-major (a compiled graph's new parameter or
        # optimizer state): the value becomes the buffer, with no need to
        # wait for the old contents
        buffers.set_buffer(st, value)
        return
    spec, buf = views.spec_of(t, dtypes.TORCH_TO_NP[t.dtype])
    bits = views.lazy_bits(t)
    _, _, size, _, _, dtype = spec  # a ViewSpec's fields
    if not bits and views.covers_buffer(spec) and tuple(value.shape) == size and value.dtype == dtype:
        new = value  # the old contents do not matter: no need to wait for them
    else:
        buf = fusion.resolve(buf)
        inputs = [buf, value]
        del buf
        donate = bool(worth_donating([spec], [0])) and can_donate(inputs, (0,), (t,))
        new = _jit_writer(spec, tuple(value.shape), value.dtype, bits, donate)(*inputs)
    buffers.set_buffer(t.untyped_storage(), new)
