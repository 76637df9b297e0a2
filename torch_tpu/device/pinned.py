"""``Tensor.pin_memory()`` when the accelerator is tpu.

PyTorch pins host memory through the backend hook's pinned-memory allocator,
which the Python hooks of torch 2.13 cannot provide, so ``DataLoader(pin_memory=True)``
(the Trainer's default) raises.  Pinning buys nothing here: host->tpu copies go
through JAX's transfer (``storage/transfer.py``) from ordinary memory.  So pinning for tpu is a copy
into ordinary host memory; pinning for any other device keeps PyTorch's kernel.
"""
import torch

_LIB = None
_PIN = torch.ops.aten._pin_memory.default


def _for_tpu(device) -> bool:
    if device is not None:
        return torch.device(device).type == "tpu"
    acc = torch.accelerator.current_accelerator()
    return acc is not None and acc.type == "tpu"


def _pin_memory(self, device=None):
    if _for_tpu(device):
        return self.clone()
    return _PIN._op_dk(torch._C.DispatchKey.CompositeExplicitAutograd, self, device)


def install() -> None:
    global _LIB
    if _LIB is None:
        _LIB = torch.library.Library("aten", "IMPL")
        _LIB.impl("_pin_memory", _pin_memory, "CPU")
