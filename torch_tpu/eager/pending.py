"""Work dispatched but maybe not finished: what ``synchronize`` waits for.

JAX dispatch is asynchronous and XLA may run independent ops concurrently,
so a device-wide sync waits on every recent result, not just the last one.
Past a limit the oldest results are dropped once finished, or waited for
(a bounded launch queue, as CUDA's).  The native entry replaces the newest
result when the next launch reads it (that launch starts only once its inputs
are computed), so a chain of ops holds one entry.
"""
import collections
import operator
import threading

import jax

_LIMIT = 256
_lock = threading.Lock()
_pending = collections.deque()  # one result array per launch, oldest first


def note(results) -> None:
    """Remember a launch by one of its results (one array, or a tuple/list of
    them): all outputs of one XLA execution become ready together."""
    if type(results) is tuple or type(results) is list:
        first = results[0] if results else None
        if first is None or type(first) is tuple or type(first) is list:  # rare: look further
            first = _first(results)
            if first is None:
                return
        results = first
    _pending.append(results)  # deque.append is atomic; pruning takes the lock
    if len(_pending) > _LIMIT:
        _overflow()


def _overflow() -> None:
    """The queue is past its limit (after ``note``'s append; the native
    kernel entry appends a cached op's launch itself and calls this then)."""
    with _lock:
        _prune()


def holds(x, n) -> bool:
    """Whether ``n`` references to ``x`` are the noted results' (donation
    checks count them as the queue's, not a user's): at most ``n`` can be, and
    a buffer written again is usually the newest launch's result, so the
    queue is read newest first and only until ``n`` are found."""
    if n <= 0:
        return n == 0
    try:
        for noted in reversed(_pending):
            if noted is x:
                n -= 1
                if n == 0:
                    return True
        return False
    except RuntimeError:  # another thread noted meanwhile: count a snapshot
        noted = list(_pending)
        return sum(map(operator.is_, noted, [x] * len(noted))) == n


def _first(results):
    """The first array of a (nested) tuple or list of results, or None."""
    for r in results:
        if type(r) is tuple or type(r) is list:
            r = _first(r)
        if r is not None:
            return r
    return None


def _prune() -> None:
    # (between two steps of this loop another thread may note a launch, or the
    # native entry replace the newest note: see its noted(); a queue emptied
    # under us is pruned)
    try:
        while _pending and _ready(_pending[0]):
            _pending.popleft()
        while len(_pending) > _LIMIT // 2:
            jax.block_until_ready(_pending.popleft())
    except IndexError:
        pass


def _ready(x) -> bool:
    # (every launch passes here once: two C calls, no more)
    try:
        # a buffer donated to a later executable (a training step updating its
        # parameters in place) is done: that executable's results stand for it
        return x.is_deleted() or x.is_ready()
    except AttributeError:  # anything but a jax.Array (a number) is done
        return True


def take_all() -> list:
    """Every noted launch, leaving none (``sync.wait_all`` waits for them)."""
    with _lock:
        items = [x for x in _pending if not (hasattr(x, "is_deleted") and x.is_deleted())]
        _pending.clear()
    return items
