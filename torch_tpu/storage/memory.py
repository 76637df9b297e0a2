"""The device's address space and live bytes: each tpu storage gets a fake,
unique, aligned address range (nothing dereferences it; PyTorch compares
ranges to detect aliasing) and its bytes count as allocated until it dies."""
import threading

_ALIGN = 64
_BASE_ADDRESS = 1 << 44
_lock = threading.Lock()


class _Stats:
    # plain attributes: this runs for every op's output, so no dict lookups
    __slots__ = ("next_address", "allocated", "peak", "count", "num_alloc", "num_free")

    def __init__(self):
        self.next_address = _BASE_ADDRESS
        self.allocated = self.peak = self.count = self.num_alloc = self.num_free = 0


_stats = _Stats()


def allocate(nbytes: int) -> int:
    """The address of a new range of ``nbytes``, counted as allocated
    (one lock for both: this runs for every op's output)."""
    size = -(-nbytes // _ALIGN) * _ALIGN or _ALIGN  # rounded up; an empty storage still gets a range
    s = _stats
    with _lock:
        addr = s.next_address
        s.next_address = addr + size
        allocated = s.allocated = s.allocated + nbytes
        s.count += 1
        s.num_alloc += 1
        if allocated > s.peak:
            s.peak = allocated
    return addr


def freed_bytes(nbytes: int) -> None:
    s = _stats
    with _lock:
        s.allocated -= nbytes
        s.count -= 1
        s.num_free += 1


def allocated() -> int:
    return _stats.allocated


def peak() -> int:
    return _stats.peak


def reset_peak() -> None:
    with _lock:
        _stats.peak = _stats.allocated


def stats() -> dict:
    s = _stats
    with _lock:
        return {
            "allocated_bytes.all.current": s.allocated,
            "allocated_bytes.all.peak": s.peak,
            "allocation.all.current": s.count,
            "allocation.all.allocated": s.num_alloc,
            "allocation.all.freed": s.num_free,
            "active_bytes.all.current": s.allocated,
            "reserved_bytes.all.current": s.allocated,
        }
