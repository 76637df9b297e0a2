"""Executables held past the kernel's memory-map limit.

Each XLA:CPU executable keeps a few memory maps (about 3 per compiled XLA
kernel) for as long as its jitted function lives, and the kernel caches keep
every signature's.  A process that builds thousands of programs (an eager
loop over ever-new shapes, a long test run) would reach ``vm.max_map_count``
and die of SIGSEGV in its next compile.  Every ``CHECK_BUILDS`` signatures
built, the process's maps are counted; past ``SHARE`` of the limit the
caller's ``release`` drops the cached executables (later calls build them
again, or load them from the disk compile cache).
"""
import logging

CHECK_BUILDS = 256
SHARE = 0.6
_MAPS = "/proc/self/maps"
_LIMIT = "/proc/sys/vm/max_map_count"

_builds = 0
_limit = None  # the kernel's limit, read once (0: none known, never checked)
releases = 0  # times the executables were released (tests count them)


def map_count() -> int:
    with open(_MAPS, "rb") as f:
        return f.read().count(b"\n")


def _read_limit() -> int:
    try:
        with open(_LIMIT) as f:
            return int(f.read())
    except (OSError, ValueError):  # not Linux: no such limit to stay under
        return 0


def note_build(release) -> None:
    """One more signature built; ``release()`` when the maps near the limit."""
    global _builds, _limit, releases
    _builds += 1
    if _builds % CHECK_BUILDS:
        return
    if _limit is None:
        _limit = _read_limit()
    if not _limit:
        return
    used = map_count()
    if used > SHARE * _limit:
        release()
        releases += 1
        logging.getLogger("torch_tpu").warning(
            "torch_tpu: %d memory maps of vm.max_map_count's %d are in use, most by the XLA executables of "
            "%d op signatures built so far; the cached executables were released (later calls build them again)",
            used, _limit, _builds)
