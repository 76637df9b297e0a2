"""Live device bytes: the sum of the buffers that tpu storages hold."""
import threading

_lock = threading.Lock()
_stats = {"allocated": 0, "peak": 0, "count": 0, "num_alloc": 0, "num_free": 0}


def allocated_bytes(nbytes: int) -> None:
    with _lock:
        _stats["allocated"] += nbytes
        _stats["count"] += 1
        _stats["num_alloc"] += 1
        if _stats["allocated"] > _stats["peak"]:
            _stats["peak"] = _stats["allocated"]


def freed_bytes(nbytes: int) -> None:
    with _lock:
        _stats["allocated"] -= nbytes
        _stats["count"] -= 1
        _stats["num_free"] += 1


def allocated() -> int:
    return _stats["allocated"]


def peak() -> int:
    return _stats["peak"]


def reset_peak() -> None:
    with _lock:
        _stats["peak"] = _stats["allocated"]


def stats() -> dict:
    with _lock:
        return {
            "allocated_bytes.all.current": _stats["allocated"],
            "allocated_bytes.all.peak": _stats["peak"],
            "allocation.all.current": _stats["count"],
            "allocation.all.allocated": _stats["num_alloc"],
            "allocation.all.freed": _stats["num_free"],
            "active_bytes.all.current": _stats["allocated"],
            "reserved_bytes.all.current": _stats["allocated"],
        }
