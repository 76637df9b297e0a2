"""Small elementwise ops on new shapes: one program per size bucket.

On the CPU platform a device buffer is host memory: padding a small input to
a power-of-two bucket and cutting the result back are host copies (no XLA
program), so the first calls of an exact elementwise op with a shape never
seen run the op's program for the bucket's flat shape, compiled once per
(bucket, dtypes, static arguments) instead of once per shape (an eager loop
whose shapes change every step: ``x.abs()``, ``t.long()``, ``a == b`` on
each new length).  Every element is the same IEEE operation on the same
operands at any length, so the values are the op's own, bit for bit; the
padding (zeros) is computed and dropped.  Only kernels marked here (``mark``:
elementwise, exact, no deferred value check), with every tensor operand a
whole row-major buffer of one shape, take it; and, marked with their kind, a
1-d running sum, the max/min of an integer tensor, the random fills of a
whole tensor and a 1-d index_put.  (A NaN's sign and payload are not a value:
two NaNs meeting in a sum may come out of the two programs with different
signs, as from the CPU's vector and scalar loops.)  A signature called more
than BUCKET_CALLS times gets its own program as before (a steady loop runs
with no host copies).  On other platforms padding would itself be a program
per shape, so nothing is bucketed there.
"""
import functools
import itertools
import math

import numpy as np
import torch
from torch import Tensor

from .. import runtime
from ..eager import fusion, modes
from ..storage import buffers, transfer
from .registry import KERNELS, NUMBER, TENSOR, Kernel, resolve

_FUSED = modes.EagerMode.FUSED
_calls: dict = {}  # kernel -> {signature: calls run on a bucket's program}

BUCKET_MAX_ELEMENTS = 1 << 12
BUCKET_MIN_ELEMENTS = 1 << 4
BUCKET_CALLS = 2
_MAX_BUCKET_SIGNATURES = 4096
bucketed_calls = 0  # calls run on a bucket's program (tests count them)
_ROW_MAJOR_FORMATS = (None, torch.preserve_format, torch.contiguous_format)  # (of a row-major operand)
_HOST_MAX_DIMS = 32  # NumPy's arrays (the host copies) have at most 64 dims


def bucket_of(n: int) -> int:
    return max(BUCKET_MIN_ELEMENTS, 1 << (n - 1).bit_length())


def mark(*targets, kind=True):
    """Let the named registered kernels (or Kernel objects) run new small
    shapes on a bucket's program (see the module's docstring).  ``kind``:
    True, exact elementwise ops; "flat", ops whose element k depends only on
    elements 0..k of a 1-d operand (a running sum), for 1-d operands only;
    "max"/"min", the extreme of all elements of an integer or bool tensor
    (the padding is the reduction's identity, and an integer extreme is the
    same in any order); "fill", in-place ops that give every element a value
    of its own (the random fills: the first n values of a bucket's draw are
    the n values' draw, random_bits.py); "put", index_put of a 1-d tensor by
    one 1-d index (``_bucketed_put``)."""
    for target in targets:
        k = target if isinstance(target, Kernel) else KERNELS.get(resolve(target))
        if isinstance(k, Kernel) and (k.mode == ("inplace" if kind == "fill" else "functional")
                                      or (kind == "put" and k.mode == "inplace")):
            k.bucketed = _bucketed_put if kind == "put" else functools.partial(_bucketed, kind)


def _whole_rows(t):
    """The size of an encoded argument that is a tpu tensor covering its whole
    buffer row-major (no offset, no dtype view, no lazy neg/conj), else None."""
    if len(t) != 2:
        return None
    s = t[1]  # (buf_shape, buf_dtype, size, stride, offset, dtype)
    if s[0] != s[2] or s[4] != 0 or s[1] != s[5] or s[3] != buffers.contiguous_strides(s[2]):
        return None
    return s[2]


def _take_bucket_call(kernel, key):
    """Count a call of signature ``key`` on a bucket's program; False once
    the signature had its BUCKET_CALLS (it then gets its own program)."""
    calls = _calls.setdefault(kernel, {})
    seen = calls.get(key, 0)
    if seen >= BUCKET_CALLS:
        return False
    if len(calls) >= _MAX_BUCKET_SIGNATURES:
        calls.clear()
    calls[key] = seen + 1
    return True


def _host_flat(t):
    """A tpu tensor's whole buffer as a flat NumPy array (host memory on the CPU platform)."""
    return np.asarray(fusion.resolve(buffers.get_buffer(t.untyped_storage()))).reshape(-1)


def _padded(values, length, fill):
    """A new tpu tensor of ``length`` elements: ``values``, then ``fill``."""
    flat = np.full((length,), fill, values.dtype)
    flat[:values.shape[0]] = values
    return buffers.wrap(transfer.put(flat))


def _bucketed_put(kernel, key, args, kwargs):
    """``index_put(self, [index], values, accumulate)`` of a 1-d ``self`` by
    one 1-d index on its buckets' program: ``self`` padded by one slot at
    least, the index (its negative entries made positive on the host, as
    the op's own program makes them) padded with that slot's position and
    the values with zeros, so the padding's updates land in the slot, which
    is cut off.  The real updates are the same, in the same order.  Ranges
    are checked by the op's guard on the real index, before."""
    pos = key[0]
    if modes._mode is _FUSED or len(pos) < 3 or key[1] or len(args) > 4 or type(pos[1]) is not tuple or len(pos[1]) != 1:
        return None
    specs = [pos[0], pos[1][0], pos[2]]
    if not all(type(t) is tuple and t and t[0] is TENSOR for t in specs):
        return None
    sizes = [_whole_rows(t) for t in specs]
    if any(s is None or len(s) != 1 for s in sizes) or sizes[1] != sizes[2] or specs[1][1][5].kind not in "iu":
        return None
    m, i = sizes[0][0], sizes[1][0]
    if not 0 < m < BUCKET_MAX_ELEMENTS or not 0 < i <= BUCKET_MAX_ELEMENTS or not runtime.on_cpu_platform():
        return None
    if m == bucket_of(m) and i == bucket_of(i):  # the buckets' shapes (the padded call): its own program
        return None
    if not _take_bucket_call(kernel, key):
        return None
    bm, bi = bucket_of(m + 1), bucket_of(i)

    index = _host_flat(args[1][0])
    index = np.where(index < 0, index + m, index)
    out = kernel(_padded(_host_flat(args[0]), bm, 0), [_padded(index, bi, m)],
                 _padded(_host_flat(args[2]), bi, 0), *args[3:])
    global bucketed_calls
    bucketed_calls += 1
    value = transfer.put(_host_flat(out)[:m])
    if kernel.mode == "inplace":
        buffers.set_buffer(args[0].untyped_storage(), value)
        return args[0]
    return buffers.wrap(value)


def _bucketed(kind, kernel, key, args, kwargs):
    """The op's result computed by its program for the bucket of the operands'
    element count (see the module's docstring), or None when this call does not qualify."""
    if modes._mode is _FUSED or kwargs.get("memory_format") not in _ROW_MAJOR_FORMATS:
        return None
    size = None
    for t in itertools.chain(key[0], (v for _, v in key[1])):
        if type(t) is tuple and t:
            if t[0] is not TENSOR:  # a traced number is fine; CPU tensors and lists are not
                if t[0] is NUMBER:
                    continue
                return None
            s = _whole_rows(t)
            if s is None or (size is not None and s != size):
                return None
            size = s
    if size is None or (kind == "flat" and len(size) != 1):
        return None
    fill = 0
    if kind in ("max", "min"):
        dtype = key[0][0][1][5]  # the tensor's NumPy dtype
        if dtype.kind not in "biu":
            return None
        if dtype.kind == "b":  # (an any / an all)
            fill = kind == "min"
        else:
            fill = np.iinfo(dtype).min if kind == "max" else np.iinfo(dtype).max
    n = math.prod(size)
    if not 0 < n <= BUCKET_MAX_ELEMENTS or len(size) > _HOST_MAX_DIMS:
        return None
    b = bucket_of(n)
    if (b == n and len(size) == 1) or not runtime.on_cpu_platform():  # (the bucket's shape: its own program)
        return None
    if not _take_bucket_call(kernel, key):
        return None

    def padded(x):
        return _padded(_host_flat(x), b, fill) if isinstance(x, Tensor) else x

    out = kernel(*[padded(a) for a in args], **{k: padded(v) for k, v in kwargs.items()})
    global bucketed_calls
    bucketed_calls += 1
    if kind in ("max", "min"):  # the 0-d result itself
        return out
    host = _host_flat(out)[:n].reshape(size)
    value = transfer.put(host)
    if kind == "fill":  # in place: the tensor's storage takes the bucket's first n values
        buffers.set_buffer(args[0].untyped_storage(), value)
        return args[0]
    return buffers.wrap(value)
