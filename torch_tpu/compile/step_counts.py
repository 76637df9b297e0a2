"""The host part every non-capturable torch optimizer compiles to: its step
counts (0-d CPU tensors) bumped in place by one foreach add, and their new
values packed for the executable.

Run as PyTorch's generic program, that is a per-tensor add inside the CPU's
foreach fallback, a stack and a NumPy copy (~50 us of dispatches per AdamW
step of 28 parameters, ~100 us inside a compiled step, where every dispatch
costs more).  Here each count is read and written through a NumPy view of its
memory, made once while the counts stay where they are: the add is NumPy's in
the count's own dtype (IEEE, so the CPU kernel's values), and the new values
are packed from the same list.  As in Inductor's compiled step, the write is
not a dispatched op: AOTAutograd bumps the counts' versions where autograd
sees the mutation.
"""
import ctypes
import operator

import numpy as np
import torch

from .. import dtypes, tpu_dtypes

aten = torch.ops.aten

_data_ptr = torch.Tensor.data_ptr

# the dtypes whose values NumPy's scalars and a Python list hold exactly (the views, np.array)
_EXACT = (torch.float32, torch.float64, torch.int32, torch.int64)


class StepCounts:
    """``counts[k] += scalar`` in place for the graph inputs at ``bump_at``;
    the pack of the new values of ``pack_order`` (indices into them)."""
    __slots__ = ("bump_at", "pack_order", "scalar", "np_dtype", "dtype", "at", "views")

    def __init__(self, bump_at, pack_order, scalar, dtype):
        self.bump_at = bump_at
        self.pack_order = None if pack_order == list(range(len(bump_at))) else pack_order
        self.scalar = scalar
        self.dtype = dtype
        self.np_dtype = dtypes.TORCH_TO_NP[dtype]
        self.at = None  # the counts' addresses that ``views`` show
        self.views = None

    def __call__(self, args):
        """The packed new counts, after the update; None (nothing done) when
        two counts share memory: the foreach add then bumps it twice."""
        counts = [args[i] for i in self.bump_at]
        at = tuple(map(_data_ptr, counts))
        if at != self.at:  # (the arguments hold the counts alive: their memory is theirs while we write)
            if len(set(at)) != len(at):
                return None
            self.views = [_view(p, self.np_dtype) for p in at]
            self.at = at
        scalar = self.scalar
        values = [v[0] + scalar for v in self.views]
        for v, value in zip(self.views, values):
            v[0] = value
        if tpu_dtypes.active:  # as numpy_from_cpu_tensor: on a TPU, float64 warns
            tpu_dtypes.entering(self.dtype)
        if self.pack_order is not None:
            values = [values[k] for k in self.pack_order]
        return np.array(values, self.np_dtype)


def _view(address, np_dtype):
    """A one-element NumPy array over the count at ``address`` (not keeping
    its tensor alive: used only while the arguments hold it)."""
    size = np.dtype(np_dtype).itemsize
    return np.frombuffer((ctypes.c_char * size).from_address(address), np_dtype)


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
    if type(scalar) is float and not dtype.is_floating_point:
        return None  # (the generic program raises PyTorch's error)
    return StepCounts([positions[c] for c in counts], [n.args[1] for n in exports], scalar, dtype)
