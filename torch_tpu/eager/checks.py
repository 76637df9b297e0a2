"""Checks of device values that PyTorch's CPU kernels make before computing
(an index in range, a class target in bounds, a divisor not zero: see
``ops.domain_checks``), run the way CUDA runs its
device-side asserts: without stopping the op to wait for the device.

In strict and fused mode the few numbers a check needs (an index's min and
max) are computed on the device along with the op, and looked at when the
host next waits for the device: a host read (``.cpu()``, ``.item()``,
printing), ``torch.tpu.synchronize()``, an export to JAX.  A failed check
raises there, with PyTorch's CPU exception type and message, before any value
reaches the host; the check is then done with and does not raise again.
Debug mode checks at the op itself, so the error points at its line (as
``CUDA_LAUNCH_BLOCKING=1`` does).

Before this, every indexing op with an index on the device, embeddings and
``nll_loss`` among them, waited for the device on its own: a training step
stalled at each one, and fused eager cut its chain there.
"""
import functools
import math
import threading

import jax
import numpy as np

from .. import dtypes
from ..storage import transfer, views
from . import fusion, modes

# Past this many unread checks, the finished ones are looked at (a loop that
# never reads a value back must not hold them forever); past four times as
# many, the oldest are waited for.
_LIMIT = 64

_lock = threading.Lock()
_pending: list = []  # [(value: device array, LazyBuffer or NumPy array; verdict[; wait])], oldest first


@functools.lru_cache(maxsize=None)
def _summarizer(summary, layouts):
    """A jitted ``summary`` of the tensors laid out as ``layouts`` [(view spec, lazy bits)],
    each read through its view, followed by the extra arguments."""
    readers = [(views.reader(spec), bits, spec[4] is None) for spec, bits in layouts]
    n = len(readers)
    m = sum(at for _, _, at in readers)  # views read at run-time offsets: their offsets follow the buffers

    def run(*args):
        offsets = iter(args[n:n + m])
        values = [views.apply_bits(read(buf, next(offsets)) if at else read(buf), bits)
                  for (read, bits, at), buf in zip(readers, args)]
        return summary(*values, *args[n + m:])
    return jax.jit(run)


def defer(t, summary, out, verdict, *extra, host=False) -> None:
    """Check tpu tensor ``t`` (or a tuple of tpu tensors): ``summary(value(s),
    *extra)`` (a traceable module-level function giving a small array of shape
    and dtype ``out``) runs on the device, and ``verdict(numpy value)`` returns
    the exception to raise, or None.

    ``host=True``: ``summary`` also runs on NumPy arrays given ``xp=numpy``;
    when every tensor is small and already computed, it runs on the host
    instead (no executable to compile for each new shape, no device time);
    the verdict is still raised at the next host wait, as a device check's."""
    tensors = t if isinstance(t, tuple) else (t,)
    layouts, bufs = [], []
    for x in tensors:
        spec, buf = views.spec_of(x, dtypes.TORCH_TO_NP[x.dtype])
        layouts.append((spec, views.lazy_bits(x)))
        bufs.append(buf)
    mode = modes.current()
    if host:
        values = [_host_value(spec, bits, buf) for (spec, bits), buf in zip(layouts, bufs)]
        if all(v is not None for v in values):
            _note((np.asarray(summary(*values, *extra, xp=np)), verdict), mode)
            return
    # a view that can move in its buffer (an index row idx[i]) passes its
    # offset at run time: one summarizer for every offset
    free, offsets = [], []
    for spec, bits in layouts:
        spec, offset = views.split_offset(spec)
        free.append((spec, bits))
        if offset is not None:
            offsets.append(np.int64(offset))
    fn = _summarizer(summary, tuple(free))
    if mode is modes.EagerMode.FUSED:
        value = fusion.record(fn, [*bufs, *offsets, *extra], [out], urgent=True)[0]
    else:
        value = fn(*[fusion.resolve(b) for b in bufs], *offsets, *extra)
    _note((value, verdict), mode)


def defer_launch(value, verdict, wait) -> None:
    """Check a launched program's small output ``value`` at the next host wait,
    as the checks above: ``wait()`` first waits for the program and may raise
    (a collective's group timeout: a peer that never joins must not hang the
    host read), then ``verdict(numpy value)`` returns the exception or None."""
    _note((value, verdict, wait), modes.current())


def _note(item, mode):
    """Keep a check's (value, verdict[, wait]) for the next host wait (debug mode: look now)."""
    if mode is modes.EagerMode.DEBUG:
        _raise_first([item])
        return
    with _lock:
        _pending.append(item)
        crowded = len(_pending) > _LIMIT
    if crowded:
        _look_at_finished()


# Host copies of larger tensors cost more than the device check's compile saves.
_HOST_NUMEL = 1 << 16


def _host_value(spec, bits, buf):
    """The values of the view ``spec`` of ``buf`` as a NumPy array, when the
    buffer is small and computed (reading it then waits for nothing); else None."""
    buf_shape, buf_dtype, _, _, _, dtype = spec
    if type(buf) is fusion.LazyBuffer:  # fused mode: only a value already computed
        buf = buf.value
    if not isinstance(buf, jax.Array) or bits or buf_dtype != dtype:
        return None
    if math.prod(buf_shape) > _HOST_NUMEL or not buf.is_ready():
        return None
    return views.host_read(spec, buf)


def raise_failed() -> None:
    """Wait for every pending check's numbers and raise the first failure
    (the host is about to see device values)."""
    with _lock:
        if not _pending:
            return
        items = _pending[:]
        _pending.clear()
    _raise_first(items)


def _raise_first(items):
    """Read the numbers of ``items`` [(value, verdict[, wait])] in one transfer; raise the first failure."""
    # the last first: collectives complete in the order they were issued, so
    # once the last is done the others are (each wait that finds its program
    # unfinished hands a blocking wait to another thread: one handoff, not one
    # per collective issued since the last host wait)
    for item in reversed(items):
        if len(item) == 3:
            item[2]()  # (a collective given up on raises its timeout here, finished or not)
    hosts = transfer.fetch([fusion.resolve(item[0]) for item in items])
    for item, host in zip(items, hosts):
        error = item[1](host)
        if error is not None:
            raise error


def _look_at_finished():
    """Read the oldest checks that are computed, up to the first that is not
    (work finishes about in the order it was issued: asking every pending
    check each time asked the dozens a loop of collectives keeps running
    ahead of the host again and again); past four times the limit of them
    unread, the oldest half is read, waited for if need be."""
    with _lock:
        ready = 0
        for item in _pending:
            if not _finished(item[0]):
                break
            ready += 1
        waited = len(_pending) // 2 if len(_pending) - ready > 4 * _LIMIT else 0
        done = _pending[:max(ready, waited)]
        del _pending[:len(done)]
    _raise_first(done)


def _finished(value):
    if type(value) is fusion.LazyBuffer:
        value = value.value
    if isinstance(value, np.ndarray):  # computed on the host
        return True
    return value is not None and value.is_ready()
