"""The two stages of torch_tpu's start.

``import torch`` imports torch_tpu (the backend autoloads), and every PyTorch
process on a machine with torch_tpu installed pays for that import, whether it
ever touches the device or not: a DataLoader worker, a CPU script, a tool.  So
the import does only what PyTorch must know before the first tpu op (the
device's name, hooks and guard: ``torch_tpu/__init__.py``), and ``load()``
does the rest -- JAX, the kernels, the patches of PyTorch's Python entry
points -- the first time the device is used: PyTorch's lazy init of the
device (a factory or ``.to()`` naming tpu), an attribute of ``torch.tpu``, the
first op dispatched to tpu, a tpu storage or generator, a ``tpu_dist`` group,
the ``tpu`` compile backend.
"""
import importlib.abc
import importlib.util
import sys
import threading

_lock = threading.RLock()
_loaded = False
_loading = False
_installer = None  # what load() runs: torch_tpu/__init__.py's _install_all, set at its import


def set_installer(fn) -> None:
    global _installer
    _installer = fn


def loaded() -> bool:
    return _loaded


def device_started() -> bool:
    """Whether the JAX device has started: runtime.is_initialized, which
    replaces this when the runtime is imported (by the load)."""
    return False


def load() -> None:
    """Install everything (once; a failure raises again at the next use).
    A call from inside the load itself returns at once."""
    global _loaded, _loading
    if _loaded:
        return
    with _lock:
        if _loaded or _loading:
            return
        _loading = True
        try:
            _installer()
            _loaded = True
        finally:
            _loading = False


class _Submodules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """``import torch.tpu.<name>`` before the load: loads, then gives the
    module the load put in ``sys.modules`` (distributed, profiler...)."""

    def find_spec(self, fullname, path, target=None):
        if not fullname.startswith("torch.tpu.") or fullname.count(".") != 2:
            return None
        load()
        if fullname not in sys.modules:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        return sys.modules[spec.name]

    def exec_module(self, module):
        pass


def install_submodule_finder() -> None:
    if not any(isinstance(f, _Submodules) for f in sys.meta_path):
        sys.meta_path.append(_Submodules())
