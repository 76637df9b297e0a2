"""``spmd_safe``: a region whose ranks all run the same ops, so collectives
need not cut the fused-eager chain first (Google's torch_tpu semantics)."""
import contextlib
import functools
import threading

_local = threading.local()


def active() -> bool:
    return getattr(_local, "depth", 0) > 0


@contextlib.contextmanager
def _region():
    _local.depth = getattr(_local, "depth", 0) + 1
    try:
        yield
    finally:
        _local.depth -= 1


def spmd_safe(fn=None):
    """Decorator (or context manager when called bare) marking an SPMD region."""
    if fn is None:
        return _region()

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with _region():
            return fn(*args, **kwargs)
    return wrapper
