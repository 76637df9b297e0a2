"""The device's address space and live bytes: each tpu storage gets a fake,
unique, aligned address range (nothing dereferences it; PyTorch compares
ranges to detect aliasing) and its bytes count as allocated until it dies."""
import threading

_ALIGN = 64
_BASE_ADDRESS = 1 << 44
_lock = threading.Lock()
_next_address = [_BASE_ADDRESS]
_stats = {"allocated": 0, "peak": 0, "count": 0, "num_alloc": 0, "num_free": 0}


def allocate(nbytes: int) -> int:
    """The address of a new range of ``nbytes``, counted as allocated
    (one lock for both: this runs for every op's output)."""
    size = max(_ALIGN, -(-nbytes // _ALIGN) * _ALIGN)
    with _lock:
        addr = _next_address[0]
        _next_address[0] = addr + size
        _stats["allocated"] += nbytes
        _stats["count"] += 1
        _stats["num_alloc"] += 1
        if _stats["allocated"] > _stats["peak"]:
            _stats["peak"] = _stats["allocated"]
    return addr


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
