"""Float32 matmul precision: ``torch.tpu.Precision`` and ``torch.tpu.precision``.

A TPU multiplies float32 matrices as passes of bfloat16 products: DEFAULT is
one pass (bf16 operands), HIGH three (about TF32's accuracy), HIGHEST six
(float32).  ``torch.set_float32_matmul_precision("medium"/"high"/"highest")``
selects DEFAULT/HIGH/HIGHEST, as Google's torch_tpu maps it; PyTorch's default
"highest" keeps tpu float32 results equal to the CPU's.

Products, convolutions and attention on float32 operands read the setting
while they are traced (``for_operands``); other dtypes keep HIGHEST, since
PyTorch's switch is about float32 only.  Every cached executable keys on the
setting (``current``): the per-op signature cache, fused chains (through the
per-op functions they inline), compiled graphs, and JAX's persistent cache
(the precision is part of the lowered program).
"""
import contextlib
import enum
import threading

import jax
import numpy as np
import torch


class Precision(enum.Enum):
    DEFAULT = "default"
    HIGH = "high"
    HIGHEST = "highest"

    # members are singletons compared by identity: a C-level hash, not
    # Enum's Python one (every op's cache key holds the setting)
    __hash__ = object.__hash__


_FROM_TORCH = {"medium": Precision.DEFAULT, "high": Precision.HIGH, "highest": Precision.HIGHEST}
_TO_TORCH = {v: k for k, v in _FROM_TORCH.items()}
_TO_LAX = {Precision.DEFAULT: jax.lax.Precision.DEFAULT, Precision.HIGH: jax.lax.Precision.HIGH,
           Precision.HIGHEST: jax.lax.Precision.HIGHEST}
_FLOAT32 = (np.dtype(np.float32), np.dtype(np.complex64))

# The setting, read as ``precision.current`` by every executable cache as part
# of its key (an attribute read, not a call: it is on every op's path).
current = _FROM_TORCH.get(torch.get_float32_matmul_precision(), Precision.HIGHEST)


class _Tracing(threading.local):
    precision = None  # the setting an executable being traced was keyed on


_tracing = _Tracing()


def get() -> Precision:
    return current


def set(value) -> Precision:
    """Set the precision (a Precision, or PyTorch's name for one); returns the old one."""
    global current
    previous = current
    current = coerce(value)
    return previous


def coerce(value) -> Precision:
    if isinstance(value, Precision):
        return value
    if isinstance(value, str):
        name = value.lower()
        if name in _FROM_TORCH:
            return _FROM_TORCH[name]
        if name in ("default", "high", "highest"):
            return Precision(name)
    raise ValueError(f"torch.tpu.precision must be a torch.tpu.Precision (DEFAULT, HIGH, HIGHEST) "
                     f"or one of 'medium', 'high', 'highest', not {value!r}")


@contextlib.contextmanager
def tracing(value: Precision):
    """Trace with ``value`` (the setting the executable is cached under)."""
    previous = _tracing.precision
    _tracing.precision = value
    try:
        yield
    finally:
        _tracing.precision = previous


def for_operands(*arrays):
    """The lax precision for a product of ``arrays``: the setting for float32
    operands, HIGHEST for the rest (half types accumulate in float32 anyway;
    float64 and integers must stay exact)."""
    if not any(np.dtype(getattr(a, "dtype", np.float64)) in _FLOAT32 for a in arrays):
        return jax.lax.Precision.HIGHEST
    chosen = _tracing.precision or current
    return _TO_LAX[chosen]


class set_precision:
    """``torch.tpu.set_precision(p)``: a call, or a ``with`` block restoring the old one."""

    def __init__(self, value):
        self.previous = set(value)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        set(self.previous)
        return False


# ---- torch.set/get_float32_matmul_precision -------------------------------------

_torch_set = torch.set_float32_matmul_precision
_torch_get = torch.get_float32_matmul_precision


def _set_float32_matmul_precision(precision: str) -> None:
    _torch_set(precision)  # keeps the CPU/CUDA setting in step; warns on an unknown name
    if precision in _FROM_TORCH:  # else, as PyTorch: no effect
        set(_FROM_TORCH[precision])


def _get_float32_matmul_precision() -> str:
    return _TO_TORCH[current]


_set_float32_matmul_precision.__doc__ = _torch_set.__doc__
_get_float32_matmul_precision.__doc__ = _torch_get.__doc__


def install() -> None:
    torch.set_float32_matmul_precision = _set_float32_matmul_precision
    torch.get_float32_matmul_precision = _get_float32_matmul_precision


# ---- allow_excess_precision -------------------------------------------------------

_EXCESS_FLAG = "--xla_allow_excess_precision"


def allow_excess_precision() -> bool:
    """XLA's ``xla_allow_excess_precision`` as XLA_FLAGS sets it (False when unset,
    as Google's torch_tpu reports it)."""
    import os
    value = False
    for flag in os.environ.get("XLA_FLAGS", "").split():
        name, _, v = flag.partition("=")
        if name == _EXCESS_FLAG:
            value = v.lower() in ("", "true", "1")
    return value


def set_allow_excess_precision(value: bool) -> None:
    """Write the flag into XLA_FLAGS.  XLA reads XLA_FLAGS once, when the
    backend starts, so after that a change would not apply: it warns."""
    import os
    import warnings
    from . import runtime
    flags = [f for f in os.environ.get("XLA_FLAGS", "").split()
             if f.partition("=")[0] != _EXCESS_FLAG]
    flags.append(f"{_EXCESS_FLAG}={'true' if value else 'false'}")
    os.environ["XLA_FLAGS"] = " ".join(flags)
    if runtime.is_initialized():
        warnings.warn("torch.tpu.allow_excess_precision: the device has started, and XLA reads "
                      "its flags once at start; the change applies to new processes only",
                      stacklevel=3)
