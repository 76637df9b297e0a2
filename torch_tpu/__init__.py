"""torch_tpu: ``torch.device("tpu")`` as a native PyTorch device, executed by JAX/XLA."""
import sys

import torch  # first: torch's autoload may import us back (see _autoload.py)

from . import runtime  # noqa: F401,E402  (enables jax x64 before anything traces)
from .device.registration import register_device  # noqa: E402

register_device()

from .ops import registry as _registry  # noqa: E402

_registry.set_device_type("tpu")
from . import ops  # noqa: E402,F401  (installs the kernels)
from .storage import patches as _storage_patches  # noqa: E402

_storage_patches.install()
from .device import accelerator as _accelerator  # noqa: E402
from .amp import autocast as _autocast  # noqa: E402

_accelerator.install()
from .device import pinned as _pinned  # noqa: E402

_pinned.install()
_autocast.install()
from . import compile as _compile  # noqa: E402
from .compile import options as _compiler_options  # noqa: E402
from .device import module as _tpu_module  # noqa: E402

_compile.install()
_tpu_module.compiler = _compiler_options  # torch.tpu.compiler.custom_compiler_options
sys.modules["torch.tpu.compiler"] = _compiler_options
from . import distributed as _distributed  # noqa: E402

_distributed.install()  # tpu_dist backend, torch.tpu.distributed

from . import pallas as _pallas  # noqa: E402
from .pallas import from_jax, to_jax  # noqa: E402,F401

_pallas.install()  # torch.tpu.pallas, torch.tpu.ops
from . import profiler as _profiler; _profiler.install()  # noqa: E402,E702  torch.tpu.profiler, TORCH_TPU_LOGS

__version__ = "0.1.0"


from .ops.fallback import fallback_ops  # noqa: E402,F401
