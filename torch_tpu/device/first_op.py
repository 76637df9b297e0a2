"""The PrivateUse1 fallback kernel, registered at ``import torch``: an op that
reaches tpu with no kernel of its own.  Before the load (torch_tpu/loading.py)
that is any op -- most first ops pass PyTorch's lazy init of the device, which
loads first, but not all (a CPU kernel allocating its result on tpu) -- so it
loads and calls the op again, now reaching its tpu kernel.  After the load it
is an op torch_tpu has no kernel for: ops/fallback.py runs it on the CPU."""
import torch

from .. import loading

_LIB = None
_without_kernel = None  # ops/fallback.py's cpu_fallback, set by it (it is loaded with the kernels)


def set_without_kernel(fn) -> None:
    global _without_kernel
    _without_kernel = fn


def _fallback(op, *args, **kwargs):
    if not loading.loaded():
        loading.load()
        if torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "PrivateUse1"):
            return op(*args, **kwargs)
    return _without_kernel(op, *args, **kwargs)


def install() -> None:
    global _LIB
    if _LIB is None:
        _LIB = torch.library.Library("_", "IMPL")
        _LIB.fallback(_fallback, "PrivateUse1")
