"""The optional native helper: PyTorch's view kernels registered for the tpu
key in C++ (views.cpp), so views never cross into Python.

setup.py builds it when torch is importable at build time (the README's
install does); it is used only with the torch it was built against.  Without
it (a pure-Python install, another torch, ``TORCH_TPU_NATIVE=0``) the same
kernels are reached through Python (ops/core.py): same results, ~5 us more a
view."""
import logging
import os

import torch

log = logging.getLogger("torch_tpu")

# The ops views.cpp registers (as ops/core.py names them).
VIEW_OPS = frozenset(("view.default", "as_strided.default", "_reshape_alias.default", "_unsafe_view.default",
                      "alias.default", "unfold.default", "view_as_real.default"))

_why_not = None  # why the helper is not in use (None: in use, or not asked yet)


def register_views() -> frozenset:
    """Register the native view kernels, once; the op names now served
    natively (empty when the pure-Python kernels must serve them)."""
    global _why_not
    if os.environ.get("TORCH_TPU_NATIVE", "1") == "0":
        _why_not = "TORCH_TPU_NATIVE=0"
        return frozenset()
    try:
        from . import _views
    except ImportError as e:  # not built (a pure-Python install)
        _why_not = f"not built ({e})"
        return frozenset()
    built_for = _views.torch_version
    if built_for != torch.__version__:
        # C++ kernels are bound to the ABI of the torch they were built with
        _why_not = f"built for torch {built_for}, running {torch.__version__}: rebuild with the README's install"
        log.warning("torch_tpu: native helper %s", _why_not)
        return frozenset()
    _views.register_views()
    return VIEW_OPS


def status() -> str:
    """One line for the environment report."""
    return "C++ (the native helper)" if _why_not is None else f"Python ({_why_not})"
