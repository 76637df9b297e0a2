"""The TPU lowering check: lower torch programs for TPU generations on a
machine without a TPU (``torch.tpu.lowering_check``, ``python -m torch_tpu.lower``)."""
from .chips import CHIPS, DEFAULT_CHIPS  # noqa: F401

# check.py imports Dynamo and the compile backend: only when first asked for
# (torch_tpu is imported by every ``import torch``; see compile/__init__.py)
_FROM_CHECK = ("GraphResult", "Report", "lower_jax", "lowering_check")


def __getattr__(name):
    if name in _FROM_CHECK:
        from . import check
        return getattr(check, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def install() -> None:
    """Expose ``torch.tpu.lowering_check`` (called by torch_tpu/__init__)."""
    from ..device import module as tpu_module
    tpu_module.lazy_attribute("lowering_check", __name__ + ".check", "lowering_check")
