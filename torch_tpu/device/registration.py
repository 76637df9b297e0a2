"""Make PrivateUse1 the ``tpu`` device: hooks, guard, ``torch.tpu`` module."""
import sys

import torch
import torch.utils.backend_registration as backend_registration

from .. import native, runtime
from . import module as tpu_module


class _Hooks(torch._C._acc.PrivateUse1Hooks):
    def is_available(self) -> bool:
        return True

    def has_primary_context(self, device_index) -> bool:
        return runtime.is_initialized()

    def is_built(self) -> bool:
        return True


_PRIVATE_USE_1 = torch._C._autograd.DeviceType.PrivateUse1


class _Guard(torch._C._acc.DeviceGuard):
    """The guard without the native helper: PyTorch's Python-backed one, which
    calls this for every question it is asked (~530 in one training step of
    the benchmarks' micro GPT; native/device_guard.cpp answers them in C++)."""

    def type_(self):
        return _PRIVATE_USE_1


def register_device() -> None:
    if torch._C._get_privateuse1_backend_name() == "tpu":
        return
    backend_registration._setup_privateuseone_for_python_backend(
        rename="tpu", backend_module=tpu_module, hook=_Hooks(), device_guard=_Guard())
    native.register_device_guard()  # (when the helper is built: replaces _Guard)
    sys.modules["torch.tpu"] = tpu_module
