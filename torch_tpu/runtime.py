"""Which PJRT platform backs the ``tpu`` device, and starting it lazily.

A real TPU (libtpu installed) wins; otherwise ``TORCH_TPU_PLATFORM`` names one
(``cpu`` or ``gpu``/``cuda``); otherwise the CPU.  Each process drives one
chip, exposed as ``tpu:0``, as Google's torch_tpu does.
"""
import importlib.util
import os
import threading

import jax
import torch

# int64 indices and float64 must be exact, as on PyTorch's CPU (on a TPU XLA
# emulates them: see tpu_dtypes.py).
jax.config.update("jax_enable_x64", True)


def cache_dir() -> str:
    """Where compiled XLA executables persist across processes."""
    default = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
                           "torch_tpu", "xla")
    return os.environ.get("TORCH_TPU_CACHE_DIR", default)


def _configure_persistent_cache() -> None:
    # JAX's persistent compilation cache, on by default, for every executable:
    # a per-op kernel is a few KB on disk and loads in a quarter of its compile
    # time (benchmarks/first_call.py), which a second run with the same shapes
    # (a test suite) pays for every op.  TORCH_TPU_CACHE_DIR="" turns it off.
    path = cache_dir()
    if not path:
        return
    try:
        os.makedirs(path, exist_ok=True)
    except OSError:
        return
    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs",
                      float(os.environ.get("TORCH_TPU_CACHE_MIN_COMPILE_SECS", "0")))
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


_configure_persistent_cache()

_lock = threading.Lock()
_device = None


def platform_name() -> str:
    """The JAX platform we will use (without starting it)."""
    requested = os.environ.get("TORCH_TPU_PLATFORM", "").strip().lower()
    if requested in ("cuda", "rocm"):
        requested = "gpu"
    if requested:
        if requested not in ("tpu", "gpu", "cpu"):
            raise RuntimeError(
                f"TORCH_TPU_PLATFORM={requested!r} is not one of 'tpu', 'gpu', 'cpu'")
        return requested
    if importlib.util.find_spec("libtpu") is not None:
        return "tpu"
    return "cpu"


def platform_installed() -> bool:
    """Whether the chosen platform's PJRT plugin is installed (nothing is started)."""
    name = platform_name()
    if name == "cpu":
        return True
    if name == "tpu":
        return importlib.util.find_spec("libtpu") is not None
    return any(importlib.util.find_spec(m) is not None
               for m in ("jax_cuda13_plugin", "jax_cuda12_plugin", "jax_rocm60_plugin", "jax_rocm7_plugin"))


def jax_device():
    """The jax.Device behind tpu:0, started on first use."""
    global _device
    if _device is None:
        with _lock:
            if _device is None:
                name = platform_name()
                try:
                    # Local devices: after jax.distributed.initialize, jax.devices()
                    # lists every process's devices.
                    devices = jax.local_devices(backend=name)
                except RuntimeError as e:
                    raise RuntimeError(
                        f"torch_tpu could not start the JAX platform {name!r}: {e}") from None
                device = devices[_local_index(len(devices))]
                # Factories (zeros, randn) run jitted functions with no inputs:
                # they land on the default device, which must be ours.
                jax.config.update("jax_default_device", device)
                from . import tpu_dtypes
                tpu_dtypes.started(device.platform)  # 64-bit types on a TPU: see tpu_dtypes.py
                _device = device
    return _device


def _local_index(n: int) -> int:
    # Under torchrun every process owns one chip: LOCAL_RANK picks it when the
    # platform exposes several devices to each process.
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    return local_rank if local_rank < n else 0


def is_initialized() -> bool:
    return _device is not None


def device_count() -> int:
    return 1


def check_device(device) -> None:
    """``tpu:N`` for N past the device count is an error, as on CUDA."""
    if device is not None:
        d = torch.device(device)
        if d.type == "tpu" and d.index is not None and d.index >= device_count():
            raise RuntimeError(
                f"Invalid device index {d}: this process has {device_count()} tpu device(s) "
                "(each process drives one chip, exposed as tpu:0)")


def device_description() -> str:
    d = jax_device()
    kind = getattr(d, "device_kind", "") or d.platform
    if d.platform == "cpu":
        return "XLA CPU"
    if d.platform == "tpu":
        return kind if kind.lower().startswith("tpu") else f"TPU {kind}"
    return f"XLA {d.platform.upper()} ({kind})"


def _configure_cpu_dispatch() -> None:
    # JAX's CPU client runs each executable on a worker thread and hands the
    # caller futures.  For small eager ops (microseconds of compute) that
    # hand-off and the workers' spinning between launches cost more CPU than
    # the ops (a 64x64 elementwise op: ~35 instead of ~80 us of CPU inline),
    # but compute-heavy strict steps lose the overlap of Python with XLA's work
    # (the CNN benchmark's step ~25% longer in wall time on 2 cores).  So the
    # asynchronous dispatch stays the default; TORCH_TPU_CPU_INLINE=1 runs
    # executables in the calling thread.  Results are the same either way.
    try:
        cpu = platform_name() == "cpu"
    except RuntimeError:  # a bad TORCH_TPU_PLATFORM: reported when the device starts
        return
    if cpu and os.environ.get("TORCH_TPU_CPU_INLINE", "") == "1":
        jax.config.update("jax_cpu_enable_async_dispatch", False)


_configure_cpu_dispatch()  # before the CPU client starts (jax_device)
