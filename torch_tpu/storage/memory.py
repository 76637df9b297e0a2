"""The device's address space and live bytes: each tpu storage gets a fake,
unique, aligned address range (nothing dereferences it; PyTorch compares
ranges to detect aliasing) and its bytes count as allocated until it dies.

A storage's death is only queued (one atomic deque append, from whichever
thread drops it); the next allocation or statistics read applies the queued
deaths first, under the lock, so the live bytes and the peak are what they
would be had each death taken the lock itself.  With the native helper the
same ledger is kept in C++ (native/storages.cpp), each call atomic under the
GIL: no lock, no queue."""
import collections
import threading

from .. import native

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


_deaths = collections.deque()  # byte counts of storages that died, not yet subtracted
freed_bytes = _deaths.append  # (called as a storage dies: every op's dropped result)


def _apply_deaths(s) -> None:
    """Subtract the queued deaths (the caller holds the lock)."""
    n = 0
    while _deaths:
        s.allocated -= _deaths.popleft()
        n += 1
    s.count -= n
    s.num_free += n


def allocate(nbytes: int) -> int:
    """The address of a new range of ``nbytes``, counted as allocated
    (one lock for both: this runs for every op's output)."""
    size = -(-nbytes // _ALIGN) * _ALIGN or _ALIGN  # rounded up; an empty storage still gets a range
    s = _stats
    with _lock:
        if _deaths:
            _apply_deaths(s)
        addr = s.next_address
        s.next_address = addr + size
        allocated = s.allocated = s.allocated + nbytes
        s.count += 1
        s.num_alloc += 1
        if allocated > s.peak:
            s.peak = allocated
    return addr


def span(nbytes: int) -> int:
    """The address range ``allocate`` gives ``nbytes``: rounded up to the alignment."""
    return -(-nbytes // _ALIGN) * _ALIGN or _ALIGN


def allocate_range(size: int, nbytes: int, count: int) -> int:
    """The address of a new range of ``size`` (the spans of ``count``
    storages of ``nbytes`` in all), counted as ``count`` allocations: a
    compiled graph's outputs under one lock instead of one each."""
    s = _stats
    with _lock:
        if _deaths:
            _apply_deaths(s)
        addr = s.next_address
        s.next_address = addr + size
        allocated = s.allocated = s.allocated + nbytes
        s.count += count
        s.num_alloc += count
        if allocated > s.peak:
            s.peak = allocated
    return addr


def _counts() -> tuple:
    """(allocated bytes, peak, live storages, allocations, frees)."""
    s = _stats
    with _lock:
        _apply_deaths(s)
        return s.allocated, s.peak, s.count, s.num_alloc, s.num_free


def reset_peak() -> None:
    with _lock:
        _apply_deaths(_stats)
        _stats.peak = _stats.allocated


# With the native helper the ledger is kept in C++ (native/storages.cpp):
# each call whole under the GIL, so no lock and no queue of deaths; the
# addresses and counts are the ones above.
_native = native.ledger(_BASE_ADDRESS, _ALIGN)
if _native is not None:
    allocate, allocate_range, freed_bytes = _native.allocate, _native.allocate_range, _native.freed
    _counts, reset_peak = _native.ledger_counts, _native.reset_peak


def allocated() -> int:
    return _counts()[0]


def peak() -> int:
    return _counts()[1]


def stats() -> dict:
    allocated, peak, count, num_alloc, num_free = _counts()
    return {
        "allocated_bytes.all.current": allocated,
        "allocated_bytes.all.peak": peak,
        "allocation.all.current": count,
        "allocation.all.allocated": num_alloc,
        "allocation.all.freed": num_free,
        "active_bytes.all.current": allocated,
        "reserved_bytes.all.current": allocated,
    }
