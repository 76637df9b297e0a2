"""Eager execution modes.  strict (default): asynchronous like CUDA;
debug: every op waits for its result, so a failure points at its line."""
import enum
import os

import jax

from . import fusion, pending


class EagerMode(enum.Enum):
    DEFER_NEVER = "strict"
    DEFER_NEVER_AND_LAUNCH_BLOCKING = "debug"
    DEFER_AND_FUSE = "fused"
    STRICT = "strict"  # noqa: PIE796  (aliases: the short names of the three modes)
    DEBUG = "debug"  # noqa: PIE796
    FUSED = "fused"  # noqa: PIE796


def _initial_mode() -> EagerMode:
    if os.environ.get("TORCH_TPU_LAUNCH_BLOCKING") == "1":
        return EagerMode.DEBUG
    if os.environ.get("TORCH_TPU_DEFER_AND_FUSE") == "1":
        return EagerMode.FUSED
    name = os.environ.get("TORCH_TPU_EAGER_MODE", "strict").strip().lower()
    try:
        return EagerMode(name)
    except ValueError:
        raise RuntimeError(f"TORCH_TPU_EAGER_MODE={name!r}: expected debug, strict or fused") from None


_mode = _initial_mode()


def current() -> EagerMode:
    return _mode


# (asked for every op: module globals, not an enum attribute lookup each time)
_FUSED, _DEBUG = EagerMode.FUSED, EagerMode.DEBUG


def is_fused() -> bool:
    return _mode is _FUSED


def set_mode(mode) -> EagerMode:
    global _mode
    previous = _mode
    new = mode if isinstance(mode, EagerMode) else EagerMode(str(mode).lower())
    if previous is EagerMode.FUSED and new is not EagerMode.FUSED:
        fusion.flush("mode change")
    _mode = new
    return previous


def after_op(op_name: str, results) -> None:
    pending.note(results)
    if _mode is _DEBUG:
        try:
            jax.block_until_ready(results)
        except Exception as e:
            raise RuntimeError(f"tpu: {op_name} failed on the device: {e}") from None
