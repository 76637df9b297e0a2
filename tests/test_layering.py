"""The package layers of torch_tpu (docs/architecture.md), checked so they
cannot regress: each package imports only packages below it, never one above
or beside it, and no private name crosses a package boundary.

Bottom to top: the base modules (each a layer of its own, in BASE's order),
storage, eager, device, ops, then the front ends (compile, distributed,
pallas, amp, profiler), the tools built on them (the lowering check, the
optimizers and trainer, the TPU ops, the Hugging Face defaults), then the
torch_tpu package itself and its commands.  Inside eager the modules are
layered too, with synchronization on top.
"""
import ast
import pathlib
import subprocess
import sys
import textwrap

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1] / "torch_tpu"

# the base modules, bottom to top: each imports only modules before it
BASE = ["import_hook", "loading", "unsupported", "versions", "tpu_dtypes", "install_hints", "platforms", "logs", "dtypes", "casting", "runtime", "precision", "target", "native"]
ENTRY = {"__init__", "__main__", "_autoload", "env_report", "lower"}  # the package and its commands: anything
LAYERS = [*({m} for m in BASE), {"storage"}, {"eager"}, {"device"}, {"ops"},
          {"compile", "distributed", "pallas", "amp", "profiler"},
          {"lowering_check", "optimizers", "tpu_ops", "hf", "testing"}, ENTRY]
RANK = {unit: rank for rank, units in enumerate(LAYERS) for unit in units}

# eager's modules, bottom to top: each imports only modules before it
EAGER_ORDER = ["ranges", "pending", "fusion", "modes", "checks", "launch", "access", "sync"]


def _unit(module: str) -> str:
    """torch_tpu.ops.core -> "ops"; torch_tpu -> "__init__"."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _module_name(path: pathlib.Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: pathlib.Path):
    """(imported module, imported names) for every import in the file, at any depth."""
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            names = [a.name for a in node.names]
            if target.startswith("torch_tpu"):
                if node.module is None:  # from . import a, b: each is a module
                    for name in names:
                        yield f"{target}.{name}", []
                else:
                    yield target, names
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("torch_tpu"):
                    yield a.name, []


def _sources():
    return sorted(ROOT.rglob("*.py"))


def test_every_package_imports_only_packages_below_it():
    wrong = []
    for path in _sources():
        src = _module_name(path)
        src_unit = _unit(src) if src != "torch_tpu" else "__init__"
        for target, _ in _imports(path):
            dst_unit = _unit(target) if target != "torch_tpu" else "__init__"
            if dst_unit == src_unit or src_unit in ENTRY:
                continue
            assert dst_unit in RANK and src_unit in RANK, f"{src} -> {target}: a unit with no layer"
            if RANK[dst_unit] >= RANK[src_unit]:
                wrong.append(f"{src} imports {target}")
    assert not wrong, "imports against the layering:\n" + "\n".join(wrong)


def test_eager_modules_are_layered_with_sync_on_top():
    assert sorted(p.stem for p in (ROOT / "eager").glob("*.py") if p.stem != "__init__") == sorted(EAGER_ORDER)
    wrong = []
    for path in (ROOT / "eager").glob("*.py"):
        if path.stem == "__init__":
            continue
        for target, _ in _imports(path):
            if target.startswith("torch_tpu.eager."):
                other = target.split(".")[2]
                if EAGER_ORDER.index(other) >= EAGER_ORDER.index(path.stem):
                    wrong.append(f"eager.{path.stem} imports eager.{other}")
    assert not wrong, "\n".join(wrong)


def test_no_private_name_crosses_a_package():
    wrong = []
    for path in _sources():
        src = _module_name(path)
        for target, names in _imports(path):
            if _unit(target) == _unit(src):
                continue
            wrong += [f"{src} imports {target}.{n}" for n in names if n.startswith("_") and n != "__version__"]
            if target.rpartition(".")[2].startswith("_") and target != "torch_tpu._autoload":
                wrong.append(f"{src} imports private module {target}")
    assert not wrong, "\n".join(wrong)


# Importing one package alone, in a fresh interpreter: torch_tpu's own
# __init__ (which imports everything) is replaced by an empty package, so
# sys.modules then shows exactly what the package pulled in.
_ALONE = textwrap.dedent("""
    import importlib, pathlib, sys, types
    root = pathlib.Path({root!r})
    pkg = types.ModuleType("torch_tpu")
    pkg.__path__ = [str(root)]
    sys.modules["torch_tpu"] = pkg
    for path in sorted((root / {package!r}).rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        importlib.import_module(".".join(p for p in parts if p != "__init__"))
    print(" ".join(sorted(m for m in sys.modules if m.startswith("torch_tpu."))))
""")


@pytest.mark.parametrize("package", ["storage", "eager", "device", "ops"])
def test_a_package_imported_alone_loads_nothing_above_it(package):
    code = _ALONE.format(root=str(ROOT), package=package)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={"JAX_PLATFORMS": "cpu", "PATH": "/usr/bin:/bin",
                               "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"})
    assert done.returncode == 0, done.stderr[-3000:]
    loaded = {_unit(m) for m in done.stdout.split()}
    above = sorted(u for u in loaded if RANK[u] > RANK[package])
    assert not above, f"importing torch_tpu.{package} alone loaded {above}"
    assert package in loaded
