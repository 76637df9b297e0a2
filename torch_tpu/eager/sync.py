"""Waiting for the device: the top of the eager layer (it flushes fused
work, waits for every launch, then raises the failed deferred checks)."""
import jax

from . import checks, fusion, pending


def wait_all() -> None:
    fusion.flush("synchronize")
    jax.block_until_ready(pending.take_all())
    checks.raise_failed()
