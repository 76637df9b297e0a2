"""torch_tpu: ``torch.device("tpu")`` as a native PyTorch device, executed by JAX/XLA."""
import sys

import torch  # noqa: F401  (first: torch's autoload may import us back (see _autoload.py)

from . import versions  # noqa: E402

versions.check()  # an older JAX fails here, naming the supported range

from . import runtime  # noqa: E402,F401  (enables jax x64 before anything traces)
from .device.registration import register_device  # noqa: E402

register_device()  # PrivateUse1 becomes "tpu"; torch.tpu exists from here on

# The rest only installs: kernels first, then the pieces that build on them.
from . import ops  # noqa: E402,F401  (importing installs the aten kernels)
from . import compile as _compile  # noqa: E402
from . import distributed as _distributed  # noqa: E402
from . import lowering_check as _lowering_check  # noqa: E402
from . import hf as _hf  # noqa: E402
from . import pallas as _pallas  # noqa: E402
from . import profiler as _profiler  # noqa: E402
from .amp import autocast as _autocast  # noqa: E402
from .compile import options as _compiler_options  # noqa: E402
from .device import accelerator as _accelerator  # noqa: E402
from .device import generator as _generator  # noqa: E402
from .device import module as _tpu_module  # noqa: E402
from .device import pinned as _pinned  # noqa: E402
from .ops.attention import flex as _flex_attention  # noqa: E402
from .storage import patches as _storage_patches  # noqa: E402
from . import precision as _precision  # noqa: E402
from . import import_hook as _import_hook  # noqa: E402

_storage_patches.install()   # UntypedStorage(n, device="tpu"), storage.resize_
_precision.install()         # torch.set_float32_matmul_precision sets torch.tpu.precision
_accelerator.install()       # torch.accelerator.synchronize / memory_* for tpu
_generator.install()         # torch.Generator(device="tpu")
_pinned.install()            # Tensor.pin_memory() when the accelerator is tpu
_autocast.install()          # torch.autocast("tpu")
_flex_attention.install()    # flex_attention accepts tpu tensors
_compile.install()           # the "tpu" dynamo backend
_tpu_module.compiler = _compiler_options  # torch.tpu.compiler.custom_compiler_options
sys.modules["torch.tpu.compiler"] = _compiler_options
_distributed.install()       # the tpu_dist backend, torch.tpu.distributed
_tpu_module.default_generators = _generator.default_generators
_tpu_module.topology_aware_mesh = _distributed.topology_aware_mesh
_pallas.install()            # torch.tpu.pallas
# torch.tpu.ops and torch.tpu.optimizers mark functions for Dynamo, which
# imports it (~1.4 s): they are imported when first used, not by every
# ``import torch`` (see compile/__init__.py)
_LAZY_SUBMODULES = {"ops": "tpu_ops", "optimizers": "optimizers"}  # torch.tpu.<key>: torch_tpu.<value>
for _name, _module in _LAZY_SUBMODULES.items():
    _tpu_module.lazy_attribute(_name, f"{__name__}.{_module}")
    _import_hook.alias(f"torch.tpu.{_name}", f"{__name__}.{_module}")
_profiler.install()          # torch.tpu.profiler, TORCH_TPU_LOGS
_lowering_check.install()    # torch.tpu.lowering_check
_hf.install()                # generate() defaults for tpu, once Transformers loads

from .ops.fallback import fallback_ops  # noqa: E402,F401
from .pallas import from_jax, to_jax  # noqa: E402,F401

__version__ = "0.1.0"


def __getattr__(name):  # torch_tpu.tpu_ops / .optimizers, imported on first use as above
    if name in _LAZY_SUBMODULES.values():
        import importlib
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
