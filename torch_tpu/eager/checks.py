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
import threading

import jax
import numpy as np

from .. import dtypes
from ..storage import views
from . import fusion, modes

# Past this many unread checks, the finished ones are looked at (a loop that
# never reads a value back must not hold them forever); past four times as
# many, the oldest are waited for.
_LIMIT = 64

_lock = threading.Lock()
_pending: list = []  # [(device array or LazyBuffer, verdict)], oldest first


@functools.lru_cache(maxsize=None)
def _summarizer(summary, layouts):
    """A jitted ``summary`` of the tensors laid out as ``layouts`` [(view spec, lazy bits)],
    each read through its view, followed by the extra arguments."""
    readers = [(views.reader(spec), bits) for spec, bits in layouts]

    def run(*args):
        values = [views.apply_bits(read(buf), bits) for (read, bits), buf in zip(readers, args)]
        return summary(*values, *args[len(readers):])
    return jax.jit(run)


def defer(t, summary, out, verdict, *extra) -> None:
    """Check tpu tensor ``t`` (or a tuple of tpu tensors): ``summary(value(s),
    *extra)`` (a traceable module-level function giving a small array of shape
    and dtype ``out``) runs on the device, and ``verdict(numpy value)`` returns
    the exception to raise, or None."""
    tensors = t if isinstance(t, tuple) else (t,)
    layouts, bufs = [], []
    for x in tensors:
        spec, buf = views.spec_of(x, dtypes.TORCH_TO_NP[x.dtype])
        layouts.append((spec, views.lazy_bits(x)))
        bufs.append(buf)
    fn = _summarizer(summary, tuple(layouts))
    mode = modes.current()
    if mode is modes.EagerMode.FUSED:
        value = fusion.record(fn, [*bufs, *extra], [out], urgent=True)[0]
    else:
        value = fn(*[fusion.resolve(b) for b in bufs], *extra)
        if mode is modes.EagerMode.DEBUG:
            _raise_first([(value, verdict)])
            return
    with _lock:
        _pending.append((value, verdict))
        crowded = len(_pending) > _LIMIT
    if crowded:
        _look_at_finished()


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
    """Read the numbers of ``items`` [(value, verdict)] in one transfer; raise the first failure."""
    hosts = jax.device_get([fusion.resolve(value) for value, _ in items])
    for (_, verdict), host in zip(items, hosts):
        error = verdict(np.asarray(host))
        if error is not None:
            raise error


def _look_at_finished():
    with _lock:
        finished = [_finished(value) for value, _ in _pending]
        if finished.count(False) > 4 * _LIMIT:  # none finishing: wait for the oldest half too
            finished[:len(finished) // 2] = [True] * (len(finished) // 2)
        done = [item for item, f in zip(_pending, finished) if f]
        _pending[:] = [item for item, f in zip(_pending, finished) if not f]
    _raise_first(done)


def _finished(value):
    if type(value) is fusion.LazyBuffer:
        value = value.value
    return value is not None and value.is_ready()
