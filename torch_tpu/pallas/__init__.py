"""``torch.tpu.pallas``: JAX and Pallas kernels as torch ops on the tpu device,
plus the built-in kernels behind ``torch.tpu.ops``."""
import sys

from .api import get_pallas_mesh, jax_op  # noqa: F401
from .interop import from_jax, to_jax  # noqa: F401
from .interpret import enabled as interpret_enabled  # noqa: F401
from . import sdpa  # noqa: F401  (adds the flash kernel to SDPA's routing)

custom_jax_kernel = jax_op  # the older name Google's torch_tpu keeps


def install() -> None:
    """Expose ``torch.tpu.pallas`` (called by torch_tpu/__init__)."""
    from ..device import module as tpu_module
    tpu_module.pallas = sys.modules[__name__]
    sys.modules["torch.tpu.pallas"] = sys.modules[__name__]
