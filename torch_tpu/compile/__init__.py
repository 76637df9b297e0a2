"""torch.compile(backend="tpu"), and picking it for tpu inputs by default."""
import logging

import torch

from .backend import stats, tpu_backend  # noqa: F401

log = logging.getLogger("torch_tpu.compile")


def _skip_jax_in_dynamo() -> None:
    # Our kernels call into JAX while compiled code runs; Dynamo must not trace it.
    import torch._dynamo.trace_rules as trace_rules
    for name in ("jax", "jaxlib", "torch_tpu"):
        trace_rules.add(name)


def _has_tpu_input(inputs) -> bool:
    return any(isinstance(x, torch.Tensor) and x.device.type == "tpu" for x in inputs)


def _route_inductor_to_tpu() -> None:
    """``torch.compile(model)`` picks inductor by default; for a graph whose
    inputs are on tpu, which inductor cannot target, compile with "tpu" instead.
    CPU graphs keep PyTorch's default untouched."""
    wrapper = torch._TorchCompileInductorWrapper
    if getattr(wrapper.__call__, "_tpu_routed", False):
        return
    original = wrapper.__call__

    def __call__(self, model_, inputs_):
        if _has_tpu_input(inputs_):
            log.debug("torch.compile: tpu inputs, compiling with backend 'tpu'")
            return tpu_backend(model_, inputs_)
        return original(self, model_, inputs_)
    __call__._tpu_routed = True
    wrapper.__call__ = __call__


def install() -> None:
    from torch._dynamo import register_backend
    from torch._dynamo.backends.registry import _COMPILER_FNS
    if "tpu" not in _COMPILER_FNS:
        register_backend(name="tpu")(tpu_backend)
    _skip_jax_in_dynamo()
    _route_inductor_to_tpu()
