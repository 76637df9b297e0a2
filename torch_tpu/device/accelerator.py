"""``torch.accelerator`` entry points that torch 2.13 serves from C++ hooks a
Python backend cannot implement (synchronize, memory statistics).  For the tpu
accelerator we answer them from ``torch.tpu``; other devices are untouched."""
import functools

import torch

# torch.accelerator's name: torch.tpu's (looked up at the call: this is
# installed at ``import torch``, and torch.tpu loads torch_tpu on first use)
_ROUTES = {
    "synchronize": "synchronize",
    "empty_cache": "empty_cache",
    "memory_allocated": "memory_allocated",
    "max_memory_allocated": "max_memory_allocated",
    "memory_reserved": "memory_reserved",
    "max_memory_reserved": "max_memory_reserved",
    "memory_stats": "memory_stats",
    "reset_peak_memory_stats": "reset_peak_memory_stats",
    "reset_accumulated_memory_stats": None,  # (no accumulated statistics: nothing to reset)
    "get_memory_info": "mem_get_info",
}


def _route(name, original, ours):
    @functools.wraps(original)
    def call(*args, **kwargs):
        acc = torch.accelerator.current_accelerator()
        if acc is not None and acc.type == "tpu":
            return None if ours is None else getattr(torch.tpu, ours)(*args, **kwargs)
        return original(*args, **kwargs)
    call._tpu_routed = True
    return call


def install() -> None:
    for name, ours in _ROUTES.items():
        original = getattr(torch.accelerator, name, None)
        if original is None or getattr(original, "_tpu_routed", False):
            continue
        routed = _route(name, original, ours)
        setattr(torch.accelerator, name, routed)
        memory = getattr(torch.accelerator, "memory", None)
        if memory is not None and getattr(memory, name, None) is original:
            setattr(memory, name, routed)
