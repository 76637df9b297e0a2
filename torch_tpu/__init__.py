"""torch_tpu: ``torch.device("tpu")`` as a native PyTorch device, executed by JAX/XLA.

Importing it (``import torch`` does, through PyTorch's backend autoload) only
registers the device and the entry points that load the rest on first use
(loading.py): nothing at import imports JAX; ``_install_all`` is the load."""
import sys

import torch  # noqa: F401  (first: torch's autoload may import us back (see _autoload.py)

from . import loading  # noqa: E402

_LAZY_SUBMODULES = {"ops": "tpu_ops", "optimizers": "optimizers"}  # torch.tpu.<key>: torch_tpu.<value>


def _install_all() -> None:
    """The load: JAX, the kernels, and what builds on them (loading.load runs it once)."""
    from . import versions
    versions.check()  # an older JAX fails here, naming the supported range

    from . import runtime  # noqa: F401  (enables jax x64 before anything traces)
    from . import ops  # noqa: F401  (importing installs the aten kernels)
    from . import distributed, lowering_check, pallas, precision, profiler
    from .amp import autocast
    from .compile import options as compiler_options
    from .device import generator
    from .device import module as tpu_module
    from .ops.attention import flex as flex_attention

    precision.install()         # torch.set_float32_matmul_precision sets torch.tpu.precision
    autocast.install()          # torch.autocast("tpu")
    flex_attention.install()    # flex_attention accepts tpu tensors
    tpu_module.compiler = compiler_options  # torch.tpu.compiler.custom_compiler_options
    sys.modules["torch.tpu.compiler"] = compiler_options
    distributed.install()       # torch.tpu.distributed
    tpu_module.default_generators = generator.default_generators
    tpu_module.topology_aware_mesh = distributed.topology_aware_mesh
    pallas.install()            # torch.tpu.pallas
    # torch.tpu.ops and torch.tpu.optimizers mark functions for Dynamo, which
    # imports it (~1.4 s): they are imported when first used (compile/__init__.py)
    for name, module in _LAZY_SUBMODULES.items():
        tpu_module.lazy_attribute(name, f"{__name__}.{module}")
    profiler.install()          # torch.tpu.profiler, TORCH_TPU_LOGS
    lowering_check.install()    # torch.tpu.lowering_check
    # from here on torch.tpu is the device module itself (the stand-in that
    # PyTorch was given forwards to it, for whoever holds it)
    tpu_module.__path__ = []  # (a package for ``import torch.tpu.ops``: import_hook.alias)
    torch.tpu = tpu_module
    sys.modules["torch.tpu"] = tpu_module


loading.set_installer(_install_all)
from .device.registration import register_device  # noqa: E402

register_device()  # PrivateUse1 becomes "tpu"; torch.tpu exists from here on

# What PyTorch can reach before any tpu tensor exists, each loading torch_tpu when used for tpu.
from . import compile as _compile  # noqa: E402
from . import hf as _hf  # noqa: E402
from . import import_hook as _import_hook  # noqa: E402
from .device import accelerator as _accelerator  # noqa: E402
from .device import generator as _generator  # noqa: E402
from .device import pinned as _pinned  # noqa: E402
from .distributed import backend as _dist_backend  # noqa: E402
from .device import first_op as _first_op  # noqa: E402
from .device import storages as _storage_patches  # noqa: E402

_first_op.install()          # an op dispatched to tpu before the load: loads, then runs
_storage_patches.install()   # UntypedStorage(n, device="tpu"), storage.resize_
_accelerator.install()       # torch.accelerator.synchronize / memory_* for tpu
_generator.install()         # torch.Generator(device="tpu")
_pinned.install()            # Tensor.pin_memory() when the accelerator is tpu
_compile.install()           # the "tpu" dynamo backend
_dist_backend.register()     # the tpu_dist backend
_hf.install()                # generate() defaults for tpu, once Transformers loads
for _name, _module in _LAZY_SUBMODULES.items():
    _import_hook.alias(f"torch.tpu.{_name}", f"{__name__}.{_module}")

__version__ = "0.1.0"

_PUBLIC = {"fallback_ops": "torch_tpu.ops.fallback", "from_jax": "torch_tpu.pallas",
           "to_jax": "torch_tpu.pallas"}


def __getattr__(name):
    """The public functions (they load torch_tpu) and the subpackages as
    attributes (``torch_tpu.pallas.jax_op``), imported on first use."""
    import importlib
    import importlib.util
    if name in _PUBLIC:
        loading.load()
        return getattr(importlib.import_module(_PUBLIC[name]), name)
    if not name.startswith("_") and importlib.util.find_spec(f"{__name__}.{name}") is not None:
        return importlib.import_module(f"{__name__}.{name}")  # (as ``from torch_tpu import runtime`` does)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
