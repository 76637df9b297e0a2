"""Python numbers an op converts to its result's dtype, refused where
PyTorch's CPU refuses them.

ATen reads such a number with ``Scalar::to<scalar_t>()``, which raises
"value cannot be converted to type int8_t without overflow" for a value out of
the dtype's range (c10's ``checked_convert``): ``int8.fill_(300)``,
``half.masked_fill(m, 1e6)``, ``add(half, half, alpha=1e5)``.  XLA would wrap
the integer or give inf.  The rules (which values wrap, which overflow, NaN,
complex parts, and fill_'s one-element shortcut, which skips the check for
float16) are the CPU's own: a value is tried once on a small CPU tensor of the
dtype, and remembered when it passes.
"""
import math

import torch

from .. import dtypes

_NUMBERS = (int, float, complex)  # bool always converts
_passed = {}  # (type, value, torch dtype, one element) -> True
_MAX_PASSED = 4096


def check(kernel, entry, args, kwargs):
    """Raise the CPU's RuntimeError if a number in ``kernel``'s checked
    arguments does not fit the dtype of ``entry``'s first result."""
    spec = entry.out_specs[0]
    values = [args[position] if position < len(args) else kwargs.get(name)
              for position, name in kernel.checked_scalars]
    one = kernel.op._schema.name.startswith("aten::fill") and math.prod(spec.size) == 1
    check_values(values, dtypes.NP_TO_TORCH[spec.dtype], one)


def check_values(values, dtype, one=False):
    """Raise the CPU's RuntimeError for the first Python number of ``values``
    that ``dtype`` cannot hold (``one``: as fill_ of one element checks)."""
    for value in values:
        if type(value) not in _NUMBERS:
            continue
        key = (type(value), value, dtype, one)
        if key in _passed:
            continue
        torch.empty(1 if one else 2, dtype=dtype).fill_(value)  # raises the CPU's error
        if len(_passed) < _MAX_PASSED:
            _passed[key] = True

