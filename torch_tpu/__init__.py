"""torch_tpu: ``torch.device("tpu")`` as a native PyTorch device, executed by JAX/XLA."""
from . import runtime  # noqa: F401  (enables jax x64 before anything traces)
from .device.registration import register_device

register_device()

from .ops import registry as _registry  # noqa: E402

_registry.set_device_type("tpu")
from . import ops  # noqa: E402,F401  (installs the kernels)

__version__ = "0.1.0"


def _autoload() -> None:
    """Entry point for PyTorch's device-backend autoload (``import torch``)."""
    # Importing this package registers the device; nothing more to do.


from .ops.fallback import fallback_ops  # noqa: E402,F401
