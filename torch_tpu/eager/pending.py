"""Work dispatched but maybe not finished: what ``synchronize`` waits for.

JAX dispatch is asynchronous and XLA may run independent ops concurrently,
so a device-wide sync waits on every recent result, not just the last one.
"""
import collections
import threading

import jax

_LIMIT = 256
_lock = threading.Lock()
_pending = collections.deque()


def note(results) -> None:
    _pending.append(results)  # deque.append is atomic; pruning takes the lock
    if len(_pending) > _LIMIT:
        with _lock:
            _prune()


def _prune() -> None:
    while _pending and _ready(_pending[0]):
        _pending.popleft()
    while len(_pending) > _LIMIT // 2:
        jax.block_until_ready(_pending.popleft())


def _ready(results) -> bool:
    leaves = jax.tree_util.tree_leaves(results)
    return all(getattr(x, "is_ready", lambda: True)() for x in leaves)


def wait_all() -> None:
    from . import fusion
    fusion.flush("synchronize")
    with _lock:
        items = list(_pending)
        _pending.clear()
    jax.block_until_ready(items)
