"""``torch.tpu``: the device module, with the names CUDA users and Hugging
Face call (``torch.tpu.manual_seed``, ``empty_cache``, ``memory_allocated``...)."""
import contextlib
import importlib
import sys
import time
import types

import torch

from .. import precision as _precision
from .. import runtime
from ..eager import modes, sync
from ..eager.modes import EagerMode  # noqa: F401  (public name)
from ..precision import Precision, set_precision  # noqa: F401  (public names)
from ..storage import memory
from . import rng
from .registration import (  # noqa: F401  (torch.tpu's, answered before the load too)
    _is_in_bad_fork, current_device, get_amp_supported_dtype, is_available)


def _index(device) -> int:
    if device is None:
        return 0
    if isinstance(device, int):
        idx = device
    else:
        d = torch.device(device)
        if d.type != "tpu":
            raise ValueError(f"Expected a tpu device, but got: {d}")
        idx = 0 if d.index is None else d.index
    if idx < 0 or idx >= device_count():
        raise RuntimeError(
            f"Invalid device index tpu:{idx}: this process has {device_count()} tpu device(s); "
            "each process drives one chip, exposed as tpu:0")
    return idx


# ---- devices -----------------------------------------------------------------

def is_initialized() -> bool:
    return runtime.is_initialized()


def init() -> None:
    runtime.jax_device()


def _lazy_init() -> None:
    runtime.jax_device()


def device_count() -> int:
    return runtime.device_count()


def set_device(device) -> None:
    _index(device)


class device:
    """Context manager selecting a tpu device (only tpu:0 exists per process)."""

    def __init__(self, device):
        self.idx = -1 if device is None else _index(device)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class device_of(device):
    def __init__(self, obj):
        super().__init__(obj.device if getattr(obj, "device", None) is not None
                         and obj.device.type == "tpu" else None)


def get_device_name(device=None) -> str:
    _index(device)
    return runtime.device_description()


class _DeviceProperties:
    def __init__(self):
        d = runtime.jax_device()
        self.name = runtime.device_description()
        self.platform = d.platform
        self.type = "tpu"
        free, total = mem_get_info()
        self.total_memory = total
        self.multi_processor_count = 1

    def __repr__(self):
        return (f"_TpuDeviceProperties(name='{self.name}', platform='{self.platform}', "
                f"total_memory={self.total_memory // (1024 * 1024)}MB)")


def get_device_properties(device=None) -> _DeviceProperties:
    _index(device)
    return _DeviceProperties()


def get_device_capability(device=None):
    _index(device)
    return (0, 0)


def synchronize(device=None) -> None:
    """Wait for all work queued on the device."""
    _index(device)
    sync.wait_all()


# ---- random ------------------------------------------------------------------

def manual_seed(seed: int) -> None:
    rng.manual_seed(seed)


manual_seed_all = manual_seed


def seed() -> None:
    rng.seed()


seed_all = seed


def initial_seed() -> int:
    return rng.initial_seed()


def get_rng_state(device="tpu") -> torch.Tensor:
    _index(device)
    return rng.get_state()


def set_rng_state(new_state: torch.Tensor, device="tpu") -> None:
    _index(device)
    rng.set_state(new_state)


def get_rng_state_all():
    return [rng.get_state()]


def set_rng_state_all(new_states) -> None:
    rng.set_state(new_states[0])


# ---- memory ------------------------------------------------------------------

def empty_cache() -> None:
    """Buffers are freed when their last tensor dies; nothing is cached."""


def memory_allocated(device=None) -> int:
    _index(device)
    return memory.allocated()


def max_memory_allocated(device=None) -> int:
    _index(device)
    return memory.peak()


memory_reserved = memory_allocated
max_memory_reserved = max_memory_allocated


def reset_peak_memory_stats(device=None) -> None:
    _index(device)
    memory.reset_peak()


reset_max_memory_allocated = reset_peak_memory_stats


def memory_stats(device=None) -> dict:
    _index(device)
    return memory.stats()


def mem_get_info(device=None):
    """(free, total) bytes of the backing device, as torch.cuda.mem_get_info."""
    _index(device)
    d = runtime.jax_device()
    stats = {}
    try:
        stats = d.memory_stats() or {}
    except Exception:
        stats = {}
    total = stats.get("bytes_limit")
    if total:
        return max(total - stats.get("bytes_in_use", 0), 0), total
    import os
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    free = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
    return free, total


# ---- streams and events ------------------------------------------------------

class Stream:
    """The device's single in-order queue (JAX exposes no user streams)."""

    def __init__(self, device=None, priority=0, **kwargs):
        self.device = torch.device("tpu", _index(device))
        self.priority = priority

    def synchronize(self) -> None:
        sync.wait_all()

    def wait_stream(self, stream) -> None:
        pass

    def wait_event(self, event) -> None:
        pass

    def record_event(self, event=None):
        event = event or Event()
        event.record(self)
        return event

    def query(self) -> bool:
        return True

    def __eq__(self, other):
        return isinstance(other, Stream) and other.device == self.device

    def __hash__(self):
        return hash(("tpu-stream", self.device))


_default_stream = None


def default_stream(device=None) -> Stream:
    global _default_stream
    if _default_stream is None:
        _default_stream = Stream(device)
    return _default_stream


current_stream = default_stream


def set_stream(stream) -> None:
    pass


@contextlib.contextmanager
def stream(stream=None):
    yield stream


class Event:
    """Recording an event waits for the queued work, then stamps the host clock,
    so ``elapsed_time`` measures the device work between two events."""

    def __init__(self, enable_timing=False, blocking=False, interprocess=False):
        self.enable_timing = enable_timing
        self._time = None

    def record(self, stream=None) -> None:
        sync.wait_all()
        self._time = time.perf_counter()

    def synchronize(self) -> None:
        sync.wait_all()

    def wait(self, stream=None) -> None:
        pass

    def query(self) -> bool:
        return True

    def elapsed_time(self, end_event) -> float:
        if self._time is None or end_event._time is None:
            raise RuntimeError("Both events must be recorded before calculating elapsed time.")
        return (end_event._time - self._time) * 1000.0


# ---- AMP and dtype support -------------------------------------------------------

def is_bf16_supported(including_emulation: bool = True) -> bool:
    return True


def _is_compiled() -> bool:
    return True


# ---- eager modes ---------------------------------------------------------------

class _set_eager_mode:
    """``torch.tpu.set_eager_mode(mode)``: a call, or a ``with`` block."""

    def __init__(self, mode):
        self.previous = modes.set_mode(mode)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        modes.set_mode(self.previous)
        return False


set_eager_mode = _set_eager_mode


def eager_cache_stats() -> dict:
    """Fused-eager executable cache: hits, misses, compile seconds, flushes."""
    from ..eager import fusion
    return fusion.stats.as_dict()


_lazy = {}  # attribute -> (module, its attribute or None: the module), imported when first used


def lazy_attribute(name: str, module: str, attr: str = None) -> None:
    """``torch.tpu.<name>``: module ``module`` (or its ``attr``), imported on
    first use (for modules that import Dynamo: see torch_tpu/compile/__init__.py)."""
    _lazy[name] = (module, attr)


class _TpuModule(types.ModuleType):
    def __getattr__(self, name):  # (only names not found otherwise)
        if name not in _lazy:
            raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}")
        module, attr = _lazy[name]
        value = importlib.import_module(module)
        value = value if attr is None else getattr(value, attr)
        setattr(self, name, value)
        return value

    @property
    def _initialized(self):
        # torch.utils.checkpoint saves and restores a device's RNG state only
        # when its module says it is initialized (torch.cuda's attribute)
        return runtime.is_initialized()

    @property
    def eager_mode(self):
        return modes.current()

    @eager_mode.setter
    def eager_mode(self, mode):
        modes.set_mode(mode)

    @property
    def precision(self):
        """Float32 matmul precision (``torch.tpu.Precision``); ``torch.set_float32_matmul_precision``
        sets it too ("medium"/"high"/"highest": DEFAULT/HIGH/HIGHEST)."""
        return _precision.get()

    @precision.setter
    def precision(self, value):
        _precision.set(value)

    @property
    def allow_excess_precision(self):
        """XLA's xla_allow_excess_precision flag (XLA_FLAGS); False when unset."""
        return _precision.allow_excess_precision()

    @allow_excess_precision.setter
    def allow_excess_precision(self, value):
        _precision.set_allow_excess_precision(bool(value))


sys.modules[__name__].__class__ = _TpuModule
