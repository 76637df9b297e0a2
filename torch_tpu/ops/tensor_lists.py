"""The buffers of a fused optimizer's tensor lists, read and replaced in one pass.

A fused optimizer op (``AdamW(fused=True)``, the Hugging Face Trainer's
default) reads six lists of tensors and writes four or five back, every step,
with the same tensors.  Through ``access.read`` and ``access.write`` that is
~94 Python calls per parameter: 8-10 ms of host time per step for 148
parameters, against 4-5 ms read this way.  When every tensor is its storage's
whole buffer, row-major (parameters, gradients and optimizer state are), a
``GraphMatcher`` made from the first call checks a later call's tensors in one
C++ pass and gives their buffers, and each written tensor takes its new value
as its buffer, as ``access.write`` would find (``becomes_buffer``) for each.
The old buffers can then be donated to the program (``donatable``): an
update in place, with no second copy of parameters and state at its peak.
"""
import math
import sys

import jax.numpy as jnp
from jax._src.array import ArrayImpl as _ArrayImpl  # the concrete jax.Array type

from .. import dtypes
from ..eager import access, pending
from ..storage import views
from . import signature_match

_PER_KEY = 8  # layouts kept per key: each parameter group of an optimizer is one
_layouts: dict = {}  # key -> [Layout], the most recent first


class Layout:
    """A call's tensors, each its storage's whole buffer, row-major: what a
    later call's tensors must look like to be read and written in one pass."""
    __slots__ = ("matcher", "reshapes", "_written")

    def __init__(self, matcher, reshapes):
        self.matcher = matcher
        # ((position, the tensor's shape), ...) of the buffers shaped otherwise
        # (a bias gradient's (1, n) sum seen as (n,)): the program reshapes them
        self.reshapes = reshapes
        self._written = {}

    def written_positions(self, sizes, sources):
        """The positions of the written lists' tensors (the lists ``sources``
        names, of ``sizes``) whose buffers a result can take: not the ones
        reshaped (a result of another shape cannot reuse their buffer)."""
        key = (sizes, sources)
        positions = self._written.get(key)
        if positions is None:
            starts = [sum(sizes[:k]) for k in range(len(sizes))]
            reshaped = {i for i, _ in self.reshapes}
            positions = self._written[key] = tuple(
                starts[s] + i for s in sources if s is not None for i in range(sizes[s])
                if starts[s] + i not in reshaped)
        return positions


def donatable(arrays, positions) -> bool:
    """Whether the buffers at ``positions`` of ``arrays`` (read through a
    Layout: each its tensor's storage's buffer) may be donated: device arrays
    that nothing holds but their storage, ``arrays`` and the launch queue
    (which only waits for them; ``access.can_donate``'s rule, with the
    references counted in one pass)."""
    held = [arrays[p] for p in positions]
    if set(map(type, held)) != {_ArrayImpl}:  # (fused mode's recorded buffers)
        return False
    # the references counted: its storage's, ``arrays``', ``held``'s, getrefcount's argument
    for a, refs in zip(held, list(map(sys.getrefcount, held))):
        if refs != 4 and not pending.holds(a, refs - 4):
            return False
    access.donations += 1
    return True


def read(key, tensors):
    """(the buffers of tpu ``tensors``, their Layout or None).  With a Layout
    the buffers are as they are, the ones it names still to be reshaped (in
    the program that takes them); without, each is ``access.read(t,
    keep_pending=True)``.  ``key``: the call's kind and list lengths."""
    recent = _layouts.get(key)
    if recent:
        for layout in recent:
            arrays = layout.matcher.match(tensors, True)
            if arrays is not None:
                return arrays, layout
    layout = _layout(tensors)
    arrays = layout.matcher.match(tensors, True) if layout is not None else None
    if arrays is None:
        return [access.read(t, keep_pending=True) for t in tensors], None
    recent = _layouts.setdefault(key, [])
    recent.insert(0, layout)
    del recent[_PER_KEY:]
    return arrays, layout


def write(tensors, values, layout) -> None:
    """Store ``values`` into ``tensors`` (among those of a ``read`` that gave
    ``layout``; each value of its tensor's shape and dtype)."""
    if layout is not None:  # each is its storage's whole buffer, row-major: the value becomes it
        for t, v in zip(tensors, values):
            t.untyped_storage()._tpu_buf = v
        return
    for t, v in zip(tensors, values):
        access.write(t, v)


def _layout(tensors):
    """The Layout of ``tensors`` when each is its storage's whole buffer,
    row-major, without a lazy conj/neg bit, and none is passed twice
    (PyTorch's check refuses that); else None."""
    if len({id(t) for t in tensors}) != len(tensors):
        return None
    expect, reshapes = [], []
    for i, t in enumerate(tensors):
        buf = getattr(t.untyped_storage(), "_tpu_buf", None)  # (an alias storage lacks it)
        if buf is None or views.lazy_bits(t) or t.storage_offset() or not t.is_contiguous():
            return None
        aval = getattr(buf, "aval", buf)
        shape = tuple(aval.shape)
        if aval.dtype != dtypes.TORCH_TO_NP[t.dtype] or math.prod(shape) != t.numel():
            return None
        if shape != tuple(t.shape):
            reshapes.append((i, tuple(t.shape)))
        expect.append((shape, aval.dtype))
    matcher = signature_match.graph_matcher(tensors, tuple(range(len(tensors))), tuple(expect), ())
    return None if matcher is None else Layout(matcher, tuple(reshapes))


_SCALARS_KEPT = 64
_scalars: dict = {}  # float.hex(value) -> its device array


def scalar(value):
    """A Python number as a weakly typed device scalar, as ``jnp.asarray`` makes
    it, kept for the values seen last (an optimizer's hyperparameters repeat
    every step; a scheduled learning rate does not)."""
    key = float(value).hex()
    arr = _scalars.get(key)
    if arr is None:
        if len(_scalars) >= _SCALARS_KEPT:
            _scalars.clear()
        arr = _scalars[key] = jnp.asarray(float(value))
    return arr

