"""Make PrivateUse1 the ``tpu`` device: hooks, guard, ``torch.tpu`` module.

This runs at ``import torch`` (see torch_tpu/loading.py), so nothing here
imports JAX: ``torch.tpu`` starts as a stand-in that loads the device module
on first use, and the hooks read the runtime only once it is loaded."""
import importlib
import types

import torch
import torch.utils.backend_registration as backend_registration

from .. import loading, native, platforms
from . import rng


def is_available() -> bool:
    """Whether the backing platform can be used, without starting it (as CUDA's
    is_available): starting JAX early would forbid a later multi-process init.
    (``torch.accelerator.is_available()`` asks it at every optimizer step.)"""
    if loading.device_started():
        return True
    try:
        return platforms.platform_installed()
    except RuntimeError:
        return False


class _Hooks(torch._C._acc.PrivateUse1Hooks):
    def is_available(self) -> bool:
        return True

    def has_primary_context(self, device_index) -> bool:
        return loading.device_started()

    def is_built(self) -> bool:
        return True


_PRIVATE_USE_1 = torch._C._autograd.DeviceType.PrivateUse1


class _Guard(torch._C._acc.DeviceGuard):
    """The guard without the native helper: PyTorch's Python-backed one, which
    calls this for every question it is asked (~530 in one training step of
    the benchmarks' micro GPT; native/device_guard.cpp answers them in C++)."""

    def type_(self):
        return _PRIVATE_USE_1


def _device_module():
    """The real ``torch.tpu`` (loading torch_tpu when needed)."""
    loading.load()
    return importlib.import_module("torch_tpu.device.module")


def get_amp_supported_dtype():
    return [torch.bfloat16, torch.float16, torch.float32]


def current_device() -> int:
    return 0  # (one device a process)


def _is_in_bad_fork() -> bool:
    return False


class _StandIn(types.ModuleType):
    """``torch.tpu`` until the load: any attribute loads torch_tpu and comes
    from the device module (which then replaces this one as ``torch.tpu``).
    Only what PyTorch asks of every device module on CPU-only paths is
    answered here without loading (each the device module's own answer):
    ``torch.manual_seed``/``torch.seed`` seed the device's stream through it,
    optimizers ask ``is_available``, activation checkpointing ``_initialized``
    and ``get_amp_supported_dtype``, Dynamo's tracer ``current_device`` and
    the lazy init."""

    __path__ = []  # (``import torch.tpu.<name>``: loading.install_submodule_finder)

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(_device_module(), name)

    def __setattr__(self, name, value):
        setattr(_device_module(), name, value)

    is_available = staticmethod(is_available)
    get_amp_supported_dtype = staticmethod(get_amp_supported_dtype)  # (any torch.autocast("tpu"), enabled or not)
    _initialized = property(lambda self: loading.device_started())  # (torch.utils.checkpoint asks the default device)
    current_device = staticmethod(current_device)  # (Dynamo asks the accelerator's stream)
    # PyTorch's lazy init of the device (once a process: torch.compile of CPU
    # code asks for the accelerator's device index): nothing to do until an
    # op reaches tpu, and that op loads (device/first_op.py)
    _lazy_init = staticmethod(lambda: None)
    _is_in_bad_fork = staticmethod(_is_in_bad_fork)
    manual_seed = manual_seed_all = staticmethod(rng.manual_seed)
    seed = seed_all = staticmethod(rng.seed)
    initial_seed = staticmethod(rng.initial_seed)


def register_device() -> None:
    if torch._C._get_privateuse1_backend_name() == "tpu":
        return
    stand_in = _StandIn("torch.tpu", "torch.tpu: the tpu device (loaded on first use)")
    backend_registration._setup_privateuseone_for_python_backend(
        rename="tpu", backend_module=stand_in, hook=_Hooks(), device_guard=_Guard())
    native.register_device_guard()  # (when the helper is built: replaces _Guard)
    loading.install_submodule_finder()
