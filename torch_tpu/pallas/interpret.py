"""When Pallas TPU kernels run interpreted: off a real TPU (so tests and the
CPU platform run them), or as ``TORCH_TPU_PALLAS_INTERPRET=0/1`` says.  The TPU
lowering check lowers them for a TPU (``target.lowering_for_tpu``)."""
import contextlib
import os

from .. import target


def enabled() -> bool:
    forced = os.environ.get("TORCH_TPU_PALLAS_INTERPRET", "").strip()
    if forced in ("0", "1"):
        return forced == "1"
    if forced:
        raise RuntimeError(f"TORCH_TPU_PALLAS_INTERPRET={forced!r}: expected 0 or 1")
    return target.pallas_platform() != "tpu"


def context():
    """Enter while tracing a user's JAX function: every ``pallas_call`` traced
    inside runs in TPU interpret mode when interpretation is on."""
    if not enabled():
        return contextlib.nullcontext()
    from jax.experimental.pallas import tpu as pltpu
    return pltpu.force_tpu_interpret_mode()
