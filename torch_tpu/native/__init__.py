"""The optional native helper: what torch_tpu registers with PyTorch from C++
instead of Python (module.cpp): PyTorch's view kernels for the tpu key
(views.cpp), so views never cross into Python, and the tpu device's guard
(device_guard.cpp), which PyTorch asks for the current device and stream
hundreds of times a training step; the call of every Python kernel from the
dispatcher (boxed.cpp, in place of torch.library's holder); and hot spots of
the op path, a cached signature's check, its tensors' geometry (geometry.cpp)
and leaf by leaf (leaves.cpp), making an output tensor (tensors.cpp) and
accounting for its storage (storages.cpp), recording a predicted op in fused
mode (recorder.cpp), and a kernel's cached path as the dispatcher's entry
(entry.cpp).

setup.py builds it when torch is importable at build time (the README's
install does); it is used only with the torch it was built against.  Without
it (a pure-Python install, another torch, ``TORCH_TPU_NATIVE=0``) the same
kernels are reached through Python (ops/core.py), PyTorch's Python-backed
guard serves the device (device/registration.py), signatures are checked
leaf by leaf in Python (ops/signature_match.py) and output tensors are made
through PyTorch's Python API (storage/buffers.py), accounted for under a lock
(storage/memory.py), fused ops are recorded in Python (eager/fusion.py) and
every op enters through Kernel.__call__ (ops/registry.py), registered with
torch.library: same results, ~5 us more a view, ~1 us more a guard call, a
fused op or an output, ~0.5 us more a checked leaf, ~3 us more a cached op."""
import logging
import os

import torch

log = logging.getLogger("torch_tpu")

# The ops views.cpp registers (as ops/core.py names them).
VIEW_OPS = frozenset(("view.default", "as_strided.default", "_reshape_alias.default", "_unsafe_view.default",
                      "alias.default", "unfold.default", "view_as_real.default"))

_why_not = None  # why the helper is not in use (None: in use, or not asked yet)

# The fields of signature_match.Matcher.checks (guard_check, tensor_at,
# repeats, leaves, list_lens, moving), as the helper's kernel entry reads them.
MATCHER_CHECKS = 6
# The arguments of the helper's entry_context and kernel_entry (entry.cpp).
ENTRY_INTERFACE = 6


def _helper():
    """The built helper module, or None (``_why_not`` says why)."""
    global _why_not
    if os.environ.get("TORCH_TPU_NATIVE", "1") == "0":
        _why_not = "TORCH_TPU_NATIVE=0"
        return None
    try:
        from . import _native
    except ImportError as e:  # not built (a pure-Python install)
        _why_not = f"not built ({e})"
        return None
    built_for = _native.torch_version
    if built_for != torch.__version__:
        # C++ code is bound to the ABI of the torch it was built with
        if _why_not is None:
            log.warning("torch_tpu: native helper built for torch %s, running %s: rebuild with the README's install",
                        built_for, torch.__version__)
        _why_not = f"built for torch {built_for}, running {torch.__version__}: rebuild with the README's install"
        return None
    return _native


def register_views() -> frozenset:
    """Register the native view kernels, once; the op names now served
    natively (empty when the pure-Python kernels must serve them)."""
    helper = _helper()
    if helper is None:
        return frozenset()
    helper.register_views()
    return VIEW_OPS


def register_device_guard() -> bool:
    """Put the C++ device guard in place of the Python-backed one PyTorch
    registered for the tpu device; whether it is now in place."""
    helper = _helper()
    if helper is None:
        return False
    helper.register_device_guard()
    return True


def leaf_matcher():
    """The C++ per-leaf check of a cached signature (``Matcher.match``'s loop:
    ``match_leaves(leaves, specs, fused, lazy_type, resolve, on_device)``),
    or None."""
    helper = _helper()
    return None if helper is None else helper.match_leaves


def geometry_guard():
    """The C++ maker of a signature's tensor check (geometry.cpp:
    ``geometry_guard(*tensors).check(*tensors)``), or None (PyTorch's
    TensorGuards checks them)."""
    return getattr(_helper(), "geometry_guard", None)  # (None: a helper built before it existed)


def fused_recorder(fusion_globals, fallback):
    """fusion.record with a predicted op recorded in C++ (recorder.cpp;
    ``fallback``, fusion's Python ``_record``, takes every other call), or
    None."""
    make = getattr(_helper(), "fused_recorder", None)  # (None: a helper built before it existed)
    return None if make is None else make(fusion_globals, fallback)


def ledger(base: int, align: int):
    """The helper's device ledger (storages.cpp: ``allocate``, ``allocate_range``,
    ``freed``, ``ledger_counts``, ``reset_peak``), its first address ``base``
    and alignment set; or None (storage/memory.py keeps its own)."""
    helper = _helper()
    if getattr(helper, "ledger_start", None) is None:  # (None: a helper built before it existed)
        return None
    helper.ledger_start(base, align)
    return helper


def storage_owner(by_address: dict, ref_type):
    """(release, own_new, own_many): the weakref callback of a storage's
    death and the makers of output tensors over new storages of ours
    (storages.cpp), set up with storage/buffers.py's address registry and
    weakref type; or None."""
    helper = _helper()
    if getattr(helper, "own_many", None) is None:  # (None: a helper built before they existed)
        return None
    return helper.storage_owner(by_address, ref_type), helper.own_new, helper.own_many


def kernel_entries(modes, fusion, precision, note, own_new, numbers, identity_groups, can_donate):
    """The maker of a registered kernel's C++ entry (entry.cpp:
    ``kernel_entry(kernel, cache, plain_arity, returns_one, inplace,
    writes_list, checks_overlap, keywords, draw)``), its shared context set up from the modules the cached
    path reads; or None (also without the native output maker ``own_new``)."""
    helper = _helper()
    # (a helper built before the entry made the matchers' checks itself, or
    # for another layout of them, or taking other arguments, is not used:
    # MATCHER_CHECKS, ENTRY_INTERFACE)
    if (getattr(helper, "matcher_checks", None) != MATCHER_CHECKS
            or getattr(helper, "entry_interface", None) != ENTRY_INTERFACE or own_new is None):
        return None
    leaf_refs = (fusion.LazyBuffer, fusion.resolve, numbers.on_device, numbers._floats, numbers._ints)
    helper.entry_context(vars(modes), modes.EagerMode.FUSED, modes.EagerMode.STRICT, vars(fusion), vars(precision),
                         torch.autograd.profiler, note, own_new, leaf_refs,
                         identity_groups, can_donate)
    return helper.kernel_entry


def python_kernel_registrar():
    """``register(op, fn)``: ``fn`` as the tpu key's kernel of OpOverload
    ``op``, called from C++ (boxed.cpp) as torch.library's holder would call
    it, only cheaper; or None (torch.library registers it)."""
    register = getattr(_helper(), "register_python_kernel", None)  # (None: a helper built before it existed)
    if register is None:
        return None

    def register_op(op, fn):
        schema = op._schema
        namespace, name = schema.name.split("::")
        register(namespace, f"{name}.{schema.overload_name}" if schema.overload_name else name, fn)
    return register_op


def call_matcher():
    """The C++ check of a call against a Matcher's ``checks``, as kernel
    entries check it (leaves.cpp: ``match_call(checks, args, fused, lazy_type,
    resolve, on_device, floats, ints)``), or None."""
    helper = _helper()
    return helper.match_call if getattr(helper, "matcher_checks", None) == MATCHER_CHECKS else None


def status() -> str:
    """One line for the environment report."""
    _helper()  # (sets _why_not if it cannot be used)
    if _why_not is not None:
        return f"Python ({_why_not})"
    return ("C++ (view kernels, device guard, kernel calls, cached-op entry, signature checks, output tensors and "
            "their accounting, fused recording)")
