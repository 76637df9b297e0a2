"""The host part every non-capturable torch optimizer compiles to: its step
counts (0-d CPU tensors) bumped in place by one foreach add, and their new
values packed for the executable.

Run as PyTorch's generic program, that is a per-tensor add inside the CPU's
foreach fallback, a stack and a NumPy copy (~50 us of dispatches per AdamW
step of 28 parameters).  Here the add runs once over the stacked counts (the
same CPU kernel, so the same values), the new values are read in one
``tolist`` and written back with a ``fill_`` each, and they are packed from
that list.
"""
import operator

import numpy as np
import torch

from .. import dtypes, tpu_dtypes

aten = torch.ops.aten

_data_ptr, _fill = torch.Tensor.data_ptr, torch.Tensor.fill_

# the dtypes whose values a Python list holds exactly (tolist, fill_, np.array)
_EXACT = (torch.float32, torch.float64, torch.int32, torch.int64)


class StepCounts:
    """``counts[k] += scalar`` in place for the graph inputs at ``bump_at``;
    the pack of the new values of ``pack_order`` (indices into them)."""
    __slots__ = ("bump_at", "pack_order", "scalar", "np_dtype", "dtype")

    def __init__(self, bump_at, pack_order, scalar, dtype):
        self.bump_at = bump_at
        self.pack_order = None if pack_order == list(range(len(bump_at))) else pack_order
        self.scalar = scalar
        self.dtype = dtype
        self.np_dtype = dtypes.TORCH_TO_NP[dtype]

    def __call__(self, args):
        """The packed new counts, after the update; None (nothing done) when
        two counts share memory: the foreach add then bumps it twice."""
        counts = [args[i] for i in self.bump_at]
        if len(set(map(_data_ptr, counts))) != len(counts):
            return None
        values = torch.stack(counts).add_(self.scalar).tolist()
        list(map(_fill, counts, values))  # each count written in place (its version bumped, as by the add)
        if tpu_dtypes.active:  # as numpy_from_cpu_tensor: on a TPU, float64 warns
            tpu_dtypes.entering(self.dtype)
        if self.pack_order is not None:
            values = [values[k] for k in self.pack_order]
        return np.array(values, self.np_dtype)


def match(update, computed, exports, outputs, positions):
    """The ``StepCounts`` doing what host nodes ``computed`` do, when they are
    just the in-place foreach add ``update`` (``_foreach_add_.Scalar`` of a
    number) and the reads of its items, every export is one of those 0-d items
    of one exact dtype and no host node is a graph output; else None.
    ``positions``: placeholder node -> its position among the graph's inputs."""
    if update is None or outputs or update.target is not aten._foreach_add.Scalar or update.kwargs:
        return None
    counts, scalar = update.args
    if type(scalar) not in (int, float):
        return None
    if any(n is not update and not (n.target is operator.getitem and n.args[0] is update) for n in computed):
        return None
    if not exports or any(n.target is not operator.getitem or n.args[0] is not update for n in exports):
        return None
    vals = [c.meta.get("val") for c in counts]
    if any(not isinstance(v, torch.Tensor) or v.dim() != 0 for v in vals):
        return None
    dtype = vals[0].dtype
    if dtype not in _EXACT or any(v.dtype != dtype for v in vals):
        return None
    return StepCounts([positions[c] for c in counts], [n.args[1] for n in exports], scalar, dtype)
