"""Which storages an in-place ``_foreach_*_`` op writes, and when it must run
tensor by tensor.

One executable computes the whole list from the values it had before the
call.  PyTorch's CPU kernels instead loop over the list (``t.add_(s)`` per
tensor), so a write is seen by the tensors after it when a written storage
is also read or written at another position: ``_foreach_add_([x, x], 1)``
adds 2, ``_foreach_add_([a, b], [b, a])`` adds the new ``a`` to ``b``.
Those calls (rare, and found per call from the storages' addresses) run one
position at a time, each a one-element call of the same op; every other call
keeps its one executable.
"""
from torch import Tensor

from . import out_checks

# appended to a call's groups: its writes and reads cross positions
SEQUENTIAL = -1


def groups(args):
    """For each tensor of the written list (``args[0]``), the position of the
    first one sharing its storage (views of one flat buffer are written into
    it one after another); with ``SEQUENTIAL`` appended when the call must
    run position by position to give the CPU's result."""
    written = args[0]
    first, spans = {}, {}
    out = []
    for i, t in enumerate(written):
        ptr = t.untyped_storage().data_ptr()
        g = first.setdefault(ptr, i)
        out.append(g)
        if g != i:  # a storage written at two positions: only overlapping views interact
            span = _span(t)
            if any(_overlap(span, s) for s in spans.setdefault(g, [_span(written[g])])):
                return tuple(out) + (SEQUENTIAL,)
            spans[g].append(span)
    shared = len(first) < len(written)
    n = len(written)
    for a in args[1:]:
        if type(a) is list or type(a) is tuple:
            if len(a) != n or not a or not isinstance(a[0], Tensor):
                continue  # numbers
            for j, t in enumerate(a):
                g = first.get(t.untyped_storage().data_ptr())
                if g is None or t is written[j]:
                    continue
                if g != j or shared:  # read at j, written at g (or maybe elsewhere too)
                    return tuple(out) + (SEQUENTIAL,)
                _refuse_partial_overlap(written[j], t)  # another view of what j writes
        elif isinstance(a, Tensor) and a.untyped_storage().data_ptr() in first:
            if n > 1:  # one tensor read at every position, written at one
                return tuple(out) + (SEQUENTIAL,)
            _refuse_partial_overlap(written[0], a)
    out = tuple(out)
    return _IDENTITY.setdefault(n, out) if len(first) == n else out


def matches(key_groups, args, found):
    """Whether a call whose tensors a matcher took (``found``: their buffers,
    written list first, in argument order) has the groups of the signature
    it matched.  Distinct buffers are distinct storages, so the common call
    (every written storage its own, none read elsewhere) is settled by the
    buffers' identities; any shared buffer is checked by the storages."""
    n = len(args[0])
    ids = set(map(id, found[:n]))
    if len(ids) == n and key_groups == _IDENTITY.get(n) and ids.isdisjoint(map(id, found[n:])):
        return True
    return groups(args) == key_groups


_IDENTITY = {}  # a list length's groups when no storage is shared (filled by groups)


def _span(t):
    """The storage bytes ``t`` may touch, as a half-open interval."""
    if t.numel() == 0:
        return (0, 0)
    start = t.storage_offset()
    end = start + 1 + sum((n - 1) * abs(s) for n, s in zip(t.shape, t.stride()))
    return start * t.element_size(), end * t.element_size()


def _overlap(a, b):
    return a[0] < b[1] and b[0] < a[1]


def one_by_one(op, args, kwargs):
    """``op`` applied at each position of the written list in turn, as the
    CPU's loop: list arguments of the list's length give their element, and
    so does a packed ``scalars`` tensor (addcmul_'s one number per position)."""
    n = len(args[0])

    def at(a, i):
        if (type(a) is list or type(a) is tuple) and len(a) == n:
            return a[i:i + 1]
        if isinstance(a, Tensor) and a.device.type == "cpu" and a.dim() == 1 and len(a) == n:
            return a[i:i + 1]
        return a
    for i in range(n):
        op(*[at(a, i) for a in args], **{k: at(v, i) for k, v in kwargs.items()})


def _refuse_partial_overlap(dst, x):
    """As the CPU's per-tensor kernel: a read sharing only part of the memory it writes."""
    if out_checks.partly_overlap(dst, x):
        raise RuntimeError(out_checks.PARTIAL_OVERLAP)
