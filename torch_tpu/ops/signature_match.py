"""Checking a call against a cached signature in one pass, instead of
building the call's signature and looking it up.

``Kernel._fast_key`` encodes each tpu tensor argument as a ViewSpec (its
buffer's shape and dtype, its size, stride, storage offset and dtype): about
1 us of Python per tensor, 66 tensors for one of AdamW's foreach ops.  A
``Matcher``, made once from a call whose arguments had the signature, checks
a later call against it: the tensors' dtypes, sizes, strides and dispatch keys
(a lazy negation or conjugation is a key) by PyTorch's own C++ tensor check,
the one Dynamo's guards use, in one call for all of them; then, leaf by leaf,
what that check does not see (each tensor's buffer, with its shape and dtype,
and its storage offset), the numbers' kinds and the static values: in one C++
call with the native helper (native/leaves.cpp), else in Python.  The C++ check
also compares what a signature leaves out (requires_grad, a Parameter's
Python type, the dispatch keys the thread excludes, as inside inference_mode):
a call that differs only there fails the match, and its caller checks the
slow way.  Without that check (another PyTorch), there are no matchers.
"""
import operator

from jax._src.array import ArrayImpl as _ArrayImpl  # the concrete jax.Array type
from torch import Tensor

from .. import native
from ..eager import fusion
from ..eager.fusion import LazyBuffer
from ..storage import numbers, views

try:
    from torch._C._dynamo.guards import TensorGuards
except ImportError:  # pragma: no cover - every supported PyTorch has it
    TensorGuards = None
# the native helper's check of the tensors (geometry.cpp), else TensorGuards
_geometry_guard = native.geometry_guard()
_CAN_GUARD = _geometry_guard is not None or TensorGuards is not None

# what each leaf of a call (an argument, or an element of a list argument) is
_TENSOR, _NUMBER, _LIST_NUMBER, _STATIC = range(4)


class Matcher:
    """The arguments of one signature, as ``match`` checks them."""
    __slots__ = ("guard", "nargs", "list_lens", "tensors", "leaves", "repeats", "check", "checks", "moving")

    def __init__(self, guard, nargs, list_lens, tensor_at, leaves, repeats=()):
        self.guard = guard          # the C++ check of the distinct tensor leaves (_guard)
        self.nargs = nargs
        self.list_lens = list_lens  # per argument: a list argument's length, else -1 (None: no lists)
        # the distinct tensor leaves, picked from the leaves (a tuple of them, or one)
        self.tensors = operator.itemgetter(*tensor_at) if tensor_at else (lambda leaves: ())
        self.leaves = leaves        # per leaf: (kind, a, b, c): see make
        # the leaves that are views read at a run-time offset (any offset
        # passes; ``offsets`` gives the call's, for its entry: Kernel._matched)
        self.moving = tuple(i for i, leaf in enumerate(leaves) if leaf[0] is _TENSOR and leaf[3] is None)
        # (leaf, earlier leaf) pairs that are the same tensor (x * x; AdamW's
        # addcmul of the gradients with themselves): PyTorch's check refuses a
        # tensor passed twice, so each repeat is checked as that one object
        self.repeats = repeats
        # what callers call: ``match``, or for a call without lists (most
        # ops) the same checks as straight-line code made for its leaves
        # (~1 us less per op: no loop, no per-leaf tuples)
        self.check = _unrolled(self) if list_lens is None and 0 < nargs <= _MAX_UNROLLED else self.match
        # what ``check`` checks, as data (native.MATCHER_CHECKS names the
        # fields): the native kernel entry makes the same checks from it in
        # one C++ call (leaves.cpp's matcher_inputs; None: it calls ``check``)
        self.checks = (guard.check, tuple(tensor_at), repeats, leaves, list_lens, self.moving)

    def offsets(self, args):
        """The storage offsets of the call's views read at run-time offsets
        (``moving``), in leaf order: what the signature's entry is chosen by."""
        leaves = args if self.list_lens is None else _laid_out(args, self.list_lens)
        return tuple(leaves[i].storage_offset() for i in self.moving)

    def match(self, args, fused):
        """The call's array inputs, as ``Kernel._fast_key`` would append them
        (in fused mode: numbers and pending results as they are), if ``args``
        have the signature; else None."""
        if len(args) != self.nargs:
            return None
        leaves = args if self.list_lens is None else _laid_out(args, self.list_lens)
        if leaves is None:
            return None
        tensors = self.tensors(leaves)
        if not (self.guard.check(*tensors) if type(tensors) is tuple else self.guard.check(tensors)):
            return None
        for i, j in self.repeats:
            if leaves[i] is not leaves[j]:
                return None
        if _match_leaves is not None:  # (the same loop in C++: ~0.5 us less a leaf)
            return _match_leaves(leaves, self.leaves, fused, LazyBuffer, fusion.resolve, numbers.on_device)
        return match_leaves(leaves, self.leaves, fused)


def _laid_out(args, list_lens):
    """The call's leaves: each list argument of its signature's length laid
    out element by element; None if one has another length or type."""
    leaves = []
    for a, n in zip(args, list_lens):
        if n < 0:
            leaves.append(a)
        elif (type(a) is list or type(a) is tuple) and len(a) == n:
            leaves.extend(a)
        else:
            return None
    return leaves


def match_leaves(leaves, specs, fused):
    """``Matcher.match``'s check of each leaf against its spec, in Python: the
    inputs, or None (native/leaves.cpp is the same loop)."""
    inputs = []
    for x, (kind, a, b, c) in zip(leaves, specs):
        if kind is _TENSOR:  # a: its buffer's shape, b: the buffer's dtype, c: its storage offset (None: any)
            try:
                buf = x.untyped_storage()._tpu_buf
            except AttributeError:  # a C++-made alias storage: the slow way (storage_of)
                return None
            aval = getattr(buf, "aval", buf)
            if aval.shape != a or aval.dtype != b or c is not None and x.storage_offset() != c:
                return None
            inputs.append(buf if fused or type(buf) is not LazyBuffer else fusion.resolve(buf))
        elif kind is _STATIC:
            if type(x) is not type(a) or x != a:
                return None
        elif type(x) is not a:  # a traced number of kind a
            return None
        elif kind is _NUMBER and not fused:
            inputs.append(numbers.on_device(x))
        else:  # fused mode records numbers as they are; a list's numbers are passed so
            inputs.append(x)
    return inputs


_match_leaves = native.leaf_matcher()


def make(pos, args, tensor_tag, number_tag):
    """The matcher of ``args``, whose positional signature is ``pos`` (as
    ``Kernel._fast_key`` encodes it: ``(tensor_tag, ViewSpec)`` per tensor,
    ``(number_tag, type)`` per traced number, a tuple of those per list, the
    value itself otherwise); None without a C++ tensor check."""
    if not _CAN_GUARD:
        return None
    list_lens, leaves, flat = [], [], []
    for a, e in zip(args, pos):
        if type(a) is list or type(a) is tuple:
            list_lens.append(len(a))
            for x, ex in zip(a, e):
                leaves.append(_leaf(x, ex, tensor_tag, number_tag, _LIST_NUMBER))
                flat.append(x)
        else:
            list_lens.append(-1)
            leaves.append(_leaf(a, e, tensor_tag, number_tag, _NUMBER))
            flat.append(a)
    tensor_at, repeats, first = [], [], {}
    for i, (x, leaf) in enumerate(zip(flat, leaves)):
        if leaf[0] is _TENSOR:
            j = first.setdefault(id(x), i)
            if j == i:
                tensor_at.append(i)
            else:
                repeats.append((i, j))
    guard = _guard([flat[i] for i in tensor_at])
    if guard is None:
        return None
    return Matcher(guard, len(args), None if all(n < 0 for n in list_lens) else tuple(list_lens),
                   tuple(tensor_at), tuple(leaves), tuple(repeats))


_MAX_UNROLLED = 16  # arguments


def _unrolled(m):
    """``m.match`` for a call without list arguments, as straight-line code
    made for its leaves (no loop, no per-leaf tuple): the same checks in the
    same order, the same inputs."""
    n = m.nargs
    xs = [f"x{i}" for i in range(n)]
    ns = {"guard_check": m.guard.check, "LazyBuffer": LazyBuffer, "resolve": fusion.resolve,
          "on_device": numbers.on_device, "kept": {float: numbers._floats.get, int: numbers._ints.get}}
    tensor_at = [i for i, leaf in enumerate(m.leaves) if leaf[0] is _TENSOR and i not in dict(m.repeats)]
    code = ["def match(args, fused):",
            f"    if len(args) != {n}: return None",
            f"    {', '.join(xs)}{',' if n == 1 else ''} = args",
            f"    if not guard_check({', '.join(xs[i] for i in tensor_at)}): return None"]
    code += [f"    if x{i} is not x{j}: return None" for i, j in m.repeats]
    out = []
    for i, (kind, a, b, c) in enumerate(m.leaves):
        ns[f"a{i}"], ns[f"b{i}"], ns[f"c{i}"] = a, b, c
        if kind is _TENSOR:  # a: its buffer's shape, b: the buffer's dtype, c: its storage offset (None: any)
            offset = "" if c is None else f" or x{i}.storage_offset() != c{i}"
            code += [f"    try: buf{i} = x{i}.untyped_storage()._tpu_buf",
                     "    except AttributeError: return None",
                     f"    aval = getattr(buf{i}, 'aval', buf{i})",
                     f"    if (aval.shape != a{i} or aval.dtype is not b{i} and aval.dtype != b{i}{offset}): return None"]
            out.append(f"buf{i} if fused or type(buf{i}) is not LazyBuffer else resolve(buf{i})")
        elif kind is _STATIC:
            code.append(f"    if type(x{i}) is not type(a{i}) or x{i} != a{i}: return None")
        else:  # a traced number of kind a
            code.append(f"    if type(x{i}) is not a{i}: return None")
            if a in (float, int):  # its device copy looked up here first (on_device's first step, no frame)
                ns[f"kept{i}"] = ns["kept"][a]
                out.append(f"x{i} if fused else d{i} if (d{i} := kept{i}(x{i})) is not None else on_device(x{i})")
            else:
                out.append(f"x{i} if fused else on_device(x{i})")
    code.append(f"    return [{', '.join(out)}]")
    # (named after this file, so its calls count as torch_tpu's in tests/test_overhead.py)
    exec(compile("\n".join(code), f"{__file__}:_unrolled", "exec"), ns)
    return ns["match"]


def _guard(tensors):
    """A C++ check of ``tensors``' geometry: the native helper's, else
    PyTorch's TensorGuards, or None where this PyTorch's private class does
    not take these arguments."""
    if _geometry_guard is not None:
        return _geometry_guard(*tensors)
    try:
        return TensorGuards(*tensors, dynamic_dims_sizes=[list(t.shape) for t in tensors],
                            dynamic_dims_strides=[list(t.stride()) for t in tensors])
    except (TypeError, ValueError, RuntimeError, SystemError):
        return None


def _leaf(x, entry, tensor_tag, number_tag, number_kind):
    if isinstance(x, Tensor):
        spec = entry[1]
        # a view that could sit elsewhere in its buffer is read at a run-time
        # offset (Kernel._build): any offset passes, the entry is chosen by it
        moving = views.split_offset(spec)[1] is not None
        return (_TENSOR, spec.buf_shape, spec.buf_dtype, None if moving else spec.offset)
    if type(entry) is tuple and entry and entry[0] is number_tag:
        return (number_kind, entry[1], None, None)
    return (_STATIC, entry, None, None)


class GraphMatcher:
    """A compiled graph's inputs of one signature (compile/backend.py), when
    each tpu tensor input is its storage's whole buffer: a later call's arrays
    if its arguments have the signature, else None."""
    __slots__ = ("guard", "nargs", "tensor_at", "statics", "specs")

    def __init__(self, guard, args, tensor_at, expect, statics):
        self.guard = guard
        self.nargs = len(args)
        self.tensor_at = tensor_at  # the tpu tensor arguments' positions
        self.statics = statics      # ((position, value), ...) of the arguments that are not tensors
        # per tpu tensor, its buffer's shape and dtype at offset 0 (as match_leaves takes them)
        self.specs = tuple((_TENSOR, shape, dtype, 0) for shape, dtype in expect)

    def match(self, args, lazy):
        """The arrays to pass (``lazy``: pending fused results as they are,
        for recording), or None."""
        if len(args) != self.nargs:
            return None
        tensors = [args[i] for i in self.tensor_at]
        if not self.guard.check(*tensors):
            return None
        for i, v in self.statics:
            x = args[i]
            if type(x) is not type(v) or x != v:
                return None
        if _match_leaves is not None:  # each buffer's shape, dtype and offset checked in C++
            arrays = _match_leaves(tensors, self.specs, True, LazyBuffer, None, None)
            if arrays is not None and LazyBuffer in map(type, arrays):
                for k, buf in enumerate(arrays):
                    if type(buf) is LazyBuffer and (not lazy or buf.value is not None):  # as the loop below
                        value = buf.value
                        arrays[k] = value if value is not None and not buf.early else fusion.resolve(buf)
            return arrays
        arrays = []
        for x, (_, shape, dtype, _) in zip(tensors, self.specs):
            try:
                buf = x.untyped_storage()._tpu_buf
            except AttributeError:
                return None
            if type(buf) is LazyBuffer:  # (has shape and dtype itself)
                if not lazy or buf.value is not None:  # a computed one as resolve would give it, without its frame
                    value = buf.value
                    buf = value if value is not None and not buf.early else fusion.resolve(buf)
                aval = getattr(buf, "aval", buf)
            else:
                aval = buf.aval if type(buf) is _ArrayImpl else getattr(buf, "aval", buf)
            # (NumPy's dtypes of one kind are one object: `is` first, `!=` only when not)
            if aval.shape != shape or aval.dtype is not dtype and aval.dtype != dtype or x.storage_offset():
                return None
            arrays.append(buf)
        return arrays


def graph_matcher(args, tensor_at, expect, statics):
    """A GraphMatcher of ``args`` (see there), or None without a C++ tensor check."""
    guard = _guard([args[i] for i in tensor_at]) if _CAN_GUARD else None
    return None if guard is None else GraphMatcher(guard, args, tensor_at, expect, statics)
