"""Run a function right after a module is first imported (or now, if it is)."""
import importlib.abc
import sys
import threading
import warnings

_pending = {}  # module name -> functions to call with the module
_lock = threading.Lock()


def _initializing(module) -> bool:
    """The module's body is still running (it is importing us, directly or not)."""
    return bool(getattr(getattr(module, "__spec__", None), "_initializing", False))


def _call(fullname, module) -> None:
    with _lock:
        callbacks = _pending.pop(fullname, [])
        if not _pending and _finder in sys.meta_path:
            sys.meta_path.remove(_finder)  # nothing left to watch
    for fn in callbacks:
        try:
            fn(module)
        except Exception as e:  # (it may run inside another module's import: that import must not fail)
            warnings.warn(f"torch_tpu: {getattr(fn, '__qualname__', fn)} after importing {fullname} "
                          f"failed ({type(e).__name__}: {e})", stacklevel=2)


def _call_loaded() -> None:
    """Callbacks of watched modules that were mid-import when registered and
    have finished since: their loader could no longer be wrapped."""
    for name in list(_pending):
        module = sys.modules.get(name)
        if module is not None and not _initializing(module):
            _call(name, module)


class _Finder(importlib.abc.MetaPathFinder):
    """Wraps the real loader of a watched module so that its callbacks run
    after the module body has executed."""

    def find_spec(self, fullname, path, target=None):
        _call_loaded()
        if fullname not in _pending:
            return None
        for finder in sys.meta_path:
            if finder is self:
                continue
            find = getattr(finder, "find_spec", None)
            spec = find(fullname, path, target) if find else None
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        exec_module = loader.exec_module

        def exec_then_call(module):
            exec_module(module)
            _call(fullname, module)

        loader.exec_module = exec_then_call
        return spec


_finder = _Finder()


def after_import(name: str, fn) -> None:
    """Call ``fn(module)`` once ``name`` is imported: now if it already is.

    A module whose body is still running (``import torch`` inside it loaded
    torch_tpu through torch's autoload) gets ``fn`` at the first import that
    starts after its body has finished."""
    module = sys.modules.get(name)
    if module is not None and not _initializing(module):
        fn(module)
        return
    with _lock:
        _pending.setdefault(name, []).append(fn)
    if _finder not in sys.meta_path:
        sys.meta_path.insert(0, _finder)
