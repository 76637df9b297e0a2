"""What the tpu device does with 64-bit types on a real TPU.

torch_tpu runs JAX with 64-bit types on, so ``tpu`` tensors keep PyTorch's
dtypes exactly.  A TPU has no 64-bit units; XLA's TPU compiler rewrites 64-bit
types into 32-bit pairs.  The decision, correct first, then fast:

* int64 (PyTorch's index and default integer type) stays int64: XLA's
  emulation is exact, so indices, counts and sums past 2**31 are right.  It
  costs several 32-bit operations per int64 one; the TPU lowering check lists
  the int64 arithmetic and indexing a program does, to move to int32 where it
  is hot.
* float64 stays float64, computed by XLA's emulation: slower than float32 by
  an order of magnitude and not IEEE double (a float32 exponent range, some
  ops unimplemented).  The first float64 data that reaches a TPU warns once.
* complex128 has no TPU implementation at all (XLA: "Element type C128 is not
  supported on TPU"), so it is refused with a TypeError where it reaches the
  device, as PyTorch's MPS refuses float64, instead of an XLA error later.

Elsewhere (CPU, GPU) nothing changes.  ``runtime.jax_device`` turns the
checks on when the platform it starts is a TPU; ``simulate_tpu()`` turns them
on here, for tests.
"""
import contextlib
import warnings

import torch

active = False  # the platform behind the tpu device is a TPU
_warned = False

FLOAT64_WARNING = ("torch_tpu: float64 on a TPU is emulated by XLA (pairs of float32): an order of "
                   "magnitude slower than float32, with float32's exponent range and not IEEE double. "
                   "Use float32 (or bfloat16) unless the program needs float64.")


def entering(dtype: torch.dtype) -> None:
    """Called where data reaches the device (a copy from the CPU, a factory)
    while ``active``."""
    global _warned
    if dtype == torch.complex128:
        raise TypeError("tpu: complex128 is not supported on a TPU (XLA has no 128-bit complex "
                        "there); use complex64, e.g. tensor.to(torch.complex64)")
    if dtype == torch.float64 and not _warned:
        _warned = True
        warnings.warn(FLOAT64_WARNING, stacklevel=4)


def started(platform: str) -> None:
    global active
    active = platform == "tpu"


@contextlib.contextmanager
def simulate_tpu():
    """The checks a TPU platform turns on, on this platform (tests)."""
    global active, _warned
    before = active, _warned
    active, _warned = True, False
    try:
        yield
    finally:
        active, _warned = before
