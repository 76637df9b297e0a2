"""Run a function right after a module is first imported (or now, if it is);
another name for a module, imported when first imported by that name."""
import builtins
import importlib
import importlib.abc
import importlib.util
import sys
import threading
import warnings

_pending = {}  # module name -> functions to call with the module
_half_built = set()  # of those, the ones whose body was running when watched: import is wrapped meanwhile
_lock = threading.Lock()


def _initializing(module) -> bool:
    """The module's body is still running (it is importing us, directly or not)."""
    return bool(getattr(getattr(module, "__spec__", None), "_initializing", False))


def _call(fullname, module) -> None:
    with _lock:
        callbacks = _pending.pop(fullname, [])
        if not _pending and _finder in sys.meta_path:
            sys.meta_path.remove(_finder)  # nothing left to watch
        _half_built.discard(fullname)
        if not _half_built and builtins.__import__ is _import_then_check:
            builtins.__import__ = _real_import
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


_real_import = builtins.__import__


def _import_then_check(*args, **kwargs):
    """``import`` while a watched module is half-built: after each import
    statement, even of a module already loaded (which asks no finder), its
    callbacks run if its body has finished since."""
    try:
        return _real_import(*args, **kwargs)
    finally:
        if _half_built:
            _call_loaded()


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
    torch_tpu through torch's autoload) gets ``fn`` at the first import
    statement or module search after its body has finished (``import`` is
    wrapped meanwhile)."""
    module = sys.modules.get(name)
    if module is not None and not _initializing(module):
        fn(module)
        return
    with _lock:
        _pending.setdefault(name, []).append(fn)
        if module is not None:
            _half_built.add(name)
            if builtins.__import__ is _real_import:
                builtins.__import__ = _import_then_check
    if _finder not in sys.meta_path:
        sys.meta_path.insert(0, _finder)


class _Aliases(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """``import alias`` gives the module ``target``, imported then (not before)."""

    def __init__(self):
        self.targets = {}

    def find_spec(self, fullname, path, target=None):
        if fullname not in self.targets:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        return importlib.import_module(self.targets[spec.name])  # (its attributes are kept)

    def exec_module(self, module):
        pass


_aliases = _Aliases()


def alias(name: str, target: str) -> None:
    """Make ``import name`` import module ``target`` and give it, when first run."""
    _aliases.targets[name] = target
    parent = sys.modules.get(name.rpartition(".")[0])
    if parent is not None and not hasattr(parent, "__path__"):
        parent.__path__ = []  # (a submodule is imported only from a package; none is found on this path)
    if _aliases not in sys.meta_path:
        sys.meta_path.append(_aliases)
