"""Waiting for the device: the top of the eager layer (it flushes fused
work, waits for every launch, then raises the failed deferred checks)."""
import jax

from . import checks, fusion, pending


def wait_all() -> None:
    fusion.flush("synchronize")
    # the checks first: a collective's waits there for a missing peer with the
    # group timeout, where waiting for the work after it would hang
    checks.raise_failed()
    jax.block_until_ready(pending.take_all())
    checks.raise_failed()
