"""The TPU lowering check: lower torch programs for TPU generations on a
machine without a TPU (``torch.tpu.lowering_check``, ``python -m torch_tpu.lower``)."""
from .chips import CHIPS, DEFAULT_CHIPS  # noqa: F401
from .check import GraphResult, Report, lower_jax, lowering_check  # noqa: F401


def install() -> None:
    """Expose ``torch.tpu.lowering_check`` (called by torch_tpu/__init__)."""
    from ..device import module as tpu_module
    tpu_module.lowering_check = lowering_check
