"""torch.compile(backend="tpu"), and picking it for tpu inputs by default.

Nothing of Dynamo is imported until Dynamo itself is: every ``import torch``
imports torch_tpu (the backend autoloads), and Dynamo with the backend's
AOTAutograd would add ~1.4 s to it in every process, compiling or not.  The
backend is registered, and JAX kept out of Dynamo's tracing, right after
``torch._dynamo`` is first imported (``torch.compile`` does that).
"""
import logging

import torch

from .. import import_hook

log = logging.getLogger("torch_tpu.compile")


def __getattr__(name):
    if name == "stats":  # (the backend module imports AOTAutograd)
        from . import backend
        return backend.stats
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def tpu_backend(gm, example_inputs, mode=None, options=None):
    """The ``"tpu"`` backend of ``torch.compile`` (compile/backend.py's, imported on first use)."""
    from .. import loading
    loading.load()
    from . import backend
    return backend.tpu_backend(gm, example_inputs, mode, options)


def _skip_jax_in_dynamo() -> None:
    # Our kernels call into JAX while compiled code runs; Dynamo must not trace
    # it, nor ml_dtypes, where JAX builds its dtypes' iinfo/finfo (an eager
    # region under Dynamo's frame hook, such as DDP's forward wrapper running
    # the model, had Dynamo trace and graph-break in ml_dtypes' _iinfo/_finfo)
    import torch._dynamo.trace_rules as trace_rules
    for name in ("jax", "jaxlib", "ml_dtypes", "torch_tpu"):
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


def _register_with_dynamo(dynamo) -> None:
    from torch._dynamo.backends.registry import _COMPILER_FNS
    if "tpu" not in _COMPILER_FNS:
        dynamo.register_backend(name="tpu")(tpu_backend)
    _skip_jax_in_dynamo()


def install() -> None:
    import_hook.after_import("torch._dynamo", _register_with_dynamo)
    _route_inductor_to_tpu()
