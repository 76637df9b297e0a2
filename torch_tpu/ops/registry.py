"""The op table: ``@register("aten.op.overload", ...)`` attaches a JAX
implementation to ATen overloads on the tpu (PrivateUse1) key.

One implementation, written for the functional overload, also serves the
in-place (``op_``) and ``out=`` siblings: the wrapper finds them by schema.

On the first call with a given signature (op, argument geometry and dtypes,
static arguments) the wrapper:
  1. runs PyTorch's own meta kernel on meta tensors, so output shapes, dtypes,
     strides and every error (shape mismatch, bad dtype cast, bad dim) are
     exactly PyTorch's;
  2. traces one ``jax.jit`` function that reads the inputs through their views,
     runs the implementation, casts to PyTorch's result dtypes and, for in-place
     ops, writes the result back through the destination view.
Later calls with the same signature go straight to the cached executable.
Python numbers in ``Scalar`` positions are traced, not baked in, so a
changing learning rate does not recompile.
"""
import contextlib
import dataclasses
import functools
import gc
import itertools
import logging
import math
import threading
import warnings
import weakref
from typing import NamedTuple, Protocol
from collections.abc import Callable

import jax
import jax.numpy as jnp
from jax.extend.core import jaxprs_in_params
import numpy as np
import torch
from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes

from .. import dtypes, native, precision, runtime
from ..casting import convert
from ..eager import access, fusion, modes, pending
from ..eager.fusion import LazyBuffer
from ..eager.launch import failure, launch
from ..storage import buffers, numbers, transfer, views
from ..storage.views import OutSpec, ViewSpec
from . import (dtype_support, errors, list_numbers, map_limit, out_checks, random_bits, scalar_checks, signature_match,
               written_lists)
from .. import logs as _logs

log = logging.getLogger("torch_tpu.ops")

_LIBRARIES: dict = {}  # namespace -> the torch.library.Library holding our kernels
KERNELS: dict = {}  # OpOverload -> what the tpu dispatcher entry calls (a Kernel or a raw kernel)
GRAPH_FORMS: dict = {}  # OpOverload -> its GraphForm: how a torch.compile graph runs it
PROMOTE = ELEMENTWISE_TYPE_PROMOTION_KIND

_SCALAR_TYPES = (float, int, bool, complex)


class _Tag:
    """Markers in a call signature: a tpu tensor, a CPU scalar tensor, a traced number."""
    __slots__ = ("name",)

    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return self.name


TENSOR, CPU_SCALAR, NUMBER = _Tag("T"), _Tag("C"), _Tag("S")
_NUMBER_KEYS = {t: (NUMBER, t) for t in _SCALAR_TYPES}  # a traced number's signature entry, made once
# static arguments the fast path keeps as they are (what _encode returns them as)
_STATIC_TYPES = (int, float, bool, complex, str, torch.dtype, torch.device, torch.layout, torch.memory_format)
_TORCH_TO_NP = dtypes.TORCH_TO_NP
Tensor = torch.Tensor
_FUSED = modes.EagerMode.FUSED
_STRICT = modes.EagerMode.STRICT
_wrap_as = buffers.wrap_as  # (every op's output: no module attribute lookup)
_new = tuple.__new__  # builds a ViewSpec without NamedTuple's keyword-handling __new__ (every op input)


@dataclasses.dataclass(frozen=True)
class Options:
    promote: object = None       # an ELEMENTWISE_TYPE_PROMOTION_KIND: cast operands like torch._refs
    static_scalars: bool = False  # bake Scalar arguments into the executable
    rng: bool = False            # the implementation draws random numbers (ctx().key)
    allow_cpu: tuple = ()        # argument names that may be CPU tensors (index tensors)
    meta: bool = True            # run PyTorch's meta kernel first
    # (args, out_specs) -> out_specs: the strides the CPU gives the outputs
    # where the meta kernel (or, without one, the traced result: row-major)
    # says otherwise: channels_last like the input for ATen's CPU convolution
    # and batch norm (views.channels_last_from), the query's layout for SDPA
    layout: object = None
    # (args, kwargs) -> the outputs' torch dtypes (None: the meta kernel's), for
    # ops whose CPU kernel picks other dtypes than their meta kernel does
    out_dtypes: object = None
    # compute in the result dtype's opmath (``dtypes.opmath``): tensor and
    # Scalar operands arrive cast to it, as PyTorch's CPU kernels compute
    # float16/bfloat16 in float32 (torch._decomp's ``pw_cast_for_opmath``)
    opmath: bool = False
    # (args, kwargs) -> None, raising PyTorch's error: argument rules the meta
    # kernel misses, run after it on a signature's first call (so they may read only
    # what the cache key holds: shapes, dtypes, Python types of numbers)
    first_call_check: object = None
    # the same, run before the meta kernel (whose error would otherwise come first)
    precheck: object = None
    # Scalar arguments the CPU converts to the result's dtype with an overflow
    # check, checked at every call (ops/scalar_checks.py)
    checked_scalars: tuple = ()


# ---- what an implementation can ask while it is traced --------------------

class _Trace(threading.local):
    out_dtypes = ()
    compute_dtype = None
    key = None
    in_place = False


_trace = _Trace()


def out_dtype(i: int = 0):
    """PyTorch's dtype for output ``i`` of the op being traced (NumPy dtype)."""
    return _trace.out_dtypes[i]


def compute_dtype():
    return _trace.compute_dtype


def in_place():
    """Whether the op being traced is an in-place overload (``mul_``, ``_foreach_mul_``)."""
    return _trace.in_place


def rng_key():
    return _trace.key


class GraphForm(Protocol):
    """How a torch.compile graph runs an op (``compile/lowering.py``): a
    functional ``Kernel`` is its own graph form; a raw kernel declares one with
    ``register_raw(..., graph=...)`` (``MaskedOutputs`` for ``register(mask=)``)."""
    opts: Options

    def promote_dtype(self, args, kwargs):
        """The operands' computation dtype (NumPy), or None."""

    def apply(self, args, kwargs, promote_dtype, out_dtypes, key=None) -> list:
        """The op on traced values: one result array (or None) per output."""


def graph_form(op):
    """The op's ``GraphForm``, or None when graphs cannot run it."""
    return GRAPH_FORMS.get(op)


# ---- registration: register (a JAX implementation), register_raw (a Python
# kernel), guard (a host-side step in front of registered ops) ---------------

def resolve(name) -> torch._ops.OpOverload:
    """The aten overload ``"packet.overload"`` (an OpOverload is returned as is)."""
    if not isinstance(name, str):
        return name
    packet, _, overload = name.partition(".")
    return getattr(getattr(torch.ops.aten, packet), overload or "default")


def _arg_signature(schema, drop_out: bool):
    return tuple((a.name, str(a.type)) for a in schema.arguments
                 if not (drop_out and a.kwarg_only and a.alias_info is not None and a.alias_info.is_write))


def variants_of(op: torch._ops.OpOverload):
    """The in-place and out= overloads that compute what ``op`` computes."""
    base = op._schema.name.split("::")[1]
    sig = _arg_signature(op._schema, drop_out=False)
    found = []
    for packet_name, mode in ((base + "_", "inplace"), (base, "out")):
        packet = getattr(torch.ops.aten, packet_name, None)
        if packet is None:
            continue
        for ovl in packet.overloads():
            other = getattr(packet, ovl)
            if other is op:
                continue
            s = other._schema
            if mode == "out" and not any(a.kwarg_only and a.alias_info is not None and a.alias_info.is_write
                                         for a in s.arguments):
                continue
            if mode == "inplace":
                other_sig = tuple((a.name, str(a.type)) for a in s.arguments)
            else:
                other_sig = _arg_signature(s, drop_out=True)
            if other_sig == sig:
                found.append((other, mode))
    return found


def register(*names, mode: str = "functional", variants: bool = True, mask=None, mask_of=None, **options):
    """Register a JAX implementation (traced on jax arrays) for the named
    overloads (names or OpOverloads), with ``Options`` (``promote=``, ``rng=``,
    ``opmath=``, ...).  ``mode="functional"`` (default) also serves the
    in-place and ``out=`` siblings unless ``variants=False``; ``mode="inplace"``
    or ``"out"`` registers only the named overloads, written in that mode.

    ``mask``: the name of an argument (a bool list, or a value ``mask_of``
    maps to one; a tuple of names for separate bool flags, ``mask_of`` then
    gets the tuple of their values) that selects the outputs computed (a
    backward op's gradients).  The implementation returns only the selected
    outputs (already in their final dtypes); the others come back as undefined
    tensors (None), as on the CPU.  Such ops have no meta kernel run."""
    if mask is not None:
        options.setdefault("meta", False)
    opts = Options(**options)

    def decorate(impl: Callable):
        for name in names:
            op = resolve(name)
            if mask is not None:
                _register_masked(op, impl, opts, mask, mask_of)
                continue
            _install(op, Kernel(op, impl, mode, opts))
            if variants and mode == "functional":
                for sibling, sibling_mode in variants_of(op):
                    if sibling not in KERNELS:
                        _install(sibling, Kernel(sibling, impl, sibling_mode, opts))
        return impl
    return decorate


def register_raw(*names, graph: GraphForm = None, dispatch_key: str = "PrivateUse1", native: bool = False):
    """Register a hand-written Python kernel (called with the torch arguments;
    it launches device work through registered kernels or ``eager.launch``).
    ``graph``: how torch.compile graphs run the op (none: graphs cannot).
    ``dispatch_key="AutogradPrivateUse1"`` puts it above autograd instead.
    ``native``: the dispatcher already has a C++ kernel for the op (the native
    helper, torch_tpu/native) that does the same: ``fn`` is only recorded."""
    def decorate(fn):
        for name in names:
            _install(resolve(name), fn, graph, dispatch_key, native)
        return fn
    return decorate


def guard(*names, prepare, per_signature=False):
    """Put ``prepare(args_by_name)`` (a host-side check or argument
    conversion) in front of the named registered ops and their in-place/out=
    siblings.  Only the eager dispatcher entry is wrapped: KERNELS and the graph
    form keep the plain Kernel (a traced graph cannot check on the host).
    ``per_signature``: a check of what a call's signature holds (dtypes,
    shapes), run only on a signature's first call, before anything else is
    asked of it: a call with a cached signature passed it already (a matmul's
    operand dtypes, at no cost per call)."""
    for name in names:
        op = resolve(name)
        for target in [op] + [s for s, _ in variants_of(op)]:
            kernel = KERNELS.get(target)
            if isinstance(kernel, Kernel) and per_signature:
                kernel.signature_guards += (prepare,)
            elif isinstance(kernel, Kernel):
                _register(target, _Guarded(kernel, prepare))


def wrap_entry(*names, around):
    """Route the eager dispatcher entry of the named registered ops (and their
    in-place/out= siblings) through ``around(kernel, *args, **kwargs)``, e.g.
    host-side bookkeeping after the call; KERNELS and graph forms keep the
    plain Kernel, as with ``guard``.  ``around`` gets the kernel's entry (its
    native one when built), as the dispatcher would call it."""
    for name in names:
        op = resolve(name)
        for target in [op] + [s for s, _ in variants_of(op)]:
            kernel = KERNELS.get(target)
            if isinstance(kernel, Kernel):
                _register(target, functools.partial(around, entry_of(kernel)))


def kernel(name, impl, mode: str = "functional", **options) -> "Kernel":
    """A JAX-backed kernel for overload ``name`` that is not the op's own entry:
    a raw kernel calls it (e.g. after host-side checks)."""
    return Kernel(resolve(name), impl, mode, Options(**options))


class _Guarded:
    """A kernel with a host-side step first (bounds check, mask conversion)."""

    def __init__(self, kernel, prepare):
        self.kernel = kernel
        self.enter = entry_of(kernel)  # (its native entry, as the dispatcher would call it)
        self.prepare = prepare
        self.names = kernel.arg_names

    def __call__(self, *args, **kwargs):
        bound = dict(zip(self.names, args))
        bound.update(kwargs)
        self.prepare(bound)
        new_args = [bound[n] for n in self.names[:len(args)]]
        return self.enter(*new_args, **{k: bound[k] for k in kwargs})


def _register_masked(op, impl, opts, mask_arg, mask_of):
    names = [a.name for a in op._schema.arguments]
    pos = tuple(map(names.index, mask_arg)) if isinstance(mask_arg, tuple) else names.index(mask_arg)
    inner = Kernel(op, impl, "functional", opts)
    graph = MaskedOutputs(inner, pos, mask_arg, mask_of)
    enter = entry_of(inner)  # (its native entry, as the dispatcher would call it)

    def masked(*args, **kwargs):
        mask = graph.mask(args, kwargs)
        if not any(mask):
            return (None,) * len(mask)
        outs = enter(*args, **kwargs)  # (the outputs asked for, in order)
        outs = outs if isinstance(outs, tuple) else (outs,)
        if len(outs) == len(mask):  # all of them (a backward's usual call: no generator to step)
            return outs
        outs = iter(outs)
        return tuple([next(outs) if m else None for m in mask])
    _install(op, masked, graph)


def _library(op):
    ns = op._schema.name.split("::")[0]
    lib = _LIBRARIES.get(ns)
    if lib is None:
        lib = _LIBRARIES[ns] = torch.library.Library(ns, "IMPL")
    return lib


def _install(op, kernel, graph=None, dispatch_key="PrivateUse1", native=False) -> None:
    if dispatch_key == "PrivateUse1":
        KERNELS[op] = kernel
        if graph is None and isinstance(kernel, Kernel) and kernel.mode == "functional":
            graph = kernel
        if graph is not None:
            GRAPH_FORMS[op] = graph
        else:
            GRAPH_FORMS.pop(op, None)
    if not native:
        _register(op, entry_of(kernel), dispatch_key)


# With the native helper a tpu kernel is called from C++ with its arguments
# made Python objects directly, not through torch.library's holder (~2 us an
# op, ~3 us more a Python number in a tensor position: native/boxed.cpp).
_native_register = native.python_kernel_registrar()


def _register(op, fn, dispatch_key="PrivateUse1") -> None:
    """``fn`` as ``op``'s kernel for ``dispatch_key``."""
    if dispatch_key == "PrivateUse1" and _native_register is not None:
        _native_register(op, fn)
    else:
        _library(op).impl(op, fn, dispatch_key)


# With the native helper a kernel's cached path runs in C++ (native/entry.cpp:
# Kernel.__call__'s matched-signature launch without its three Python frames);
# everything else reaches the Kernel from there.
_native_entry = native.kernel_entries(modes, fusion, precision, pending.note, buffers._own_new, numbers,
                                      written_lists._IDENTITY, access.can_donate)


def entry_of(kernel):
    """What the dispatcher calls for ``kernel``: its C++ entry when its cached
    path is the plain one (a random kernel's: in strict mode, its words drawn
    by ``_draw_words``), else itself."""
    if (_native_entry is None or not isinstance(kernel, Kernel) or not (kernel.fast or kernel.writes_out)
            or not (kernel.records_plainly or kernel.opts.rng or kernel.writes_out)
            or kernel.indexed_overlap is not None):
        return kernel
    return _native_entry(kernel, kernel.cache, kernel.plain_arity, kernel.returns_one, kernel.mode == "inplace",
                         kernel.writes_list, kernel.check_overlap, kernel.keywords or kernel.writes_out,
                         _draw_words if kernel.opts.rng else None, kernel.writes_out)


def _draw_words(entry, args):
    """A random kernel's words input for a call its native entry matched
    (Kernel.__call__'s own draw: the same material, in the same order; the
    default generator's, as a call passing a generator is never matched:
    _fast_key refuses it)."""
    from ..device import rng
    return entry.rng.words(rng.next_key_material(None), launch)


# ---- the kernel wrapper -----------------------------------------------------

class _Entry:
    __slots__ = ("fn", "out_specs", "single", "out_buffers", "out_layouts", "out_tensors", "wrap_outputs", "donor",
                 "offsets", "rng", "free", "by_offsets", "writes_out")

    def __init__(self, fn, out_specs, single, out_buffers, donor=None):
        self.fn = fn
        # the storage offsets of the views fn reads at run time (device
        # scalars, passed after the other inputs): see at
        self.offsets = ()
        self.donor = donor  # (fn donating its destination buffers, their input positions), or None
        self.out_specs = out_specs
        self.single = single
        self.out_buffers = out_buffers  # (shape, dtype) of each buffer fn returns
        # (size, stride) for outputs laid out permuted in their buffer, else None
        self.out_layouts = [None if views.permuted_order(s) is None else (s.size, s.stride) for s in out_specs]
        # per output, buffers.wrap_as's (dtype, nbytes, shape, strides): taken
        # from the first call's results, as wrap would (one executable's
        # results always have the same shapes and dtypes)
        self.out_tensors = None
        self.wrap_outputs = None  # several outputs: buffers.OutputTensors of out_tensors
        self.rng = None  # a random kernel's random_bits.Plan
        self.free = None  # an entry for views at given offsets: the offset-free entry it was made from
        self.by_offsets = None  # an offset-free entry's entries at given offsets (made by at)
        self.writes_out = False  # an out= signature's with out a leaf: fn returns out's new buffer (_written_out)

    def executable(self, inputs, written):
        """``fn``, or the donating one when ``access.can_donate`` lets this
        call give up the buffers of ``written`` (the tensors written, in the
        donor's positions' order: strict calls only, it refuses fused mode's)."""
        if self.donor is not None and access.can_donate(inputs, self.donor[1], written):
            return self.donor[0]
        return self.fn

    def at(self, offsets):
        """This entry (of a signature whose views' offsets are None) for
        views at ``offsets`` (a tuple): made once per offsets, so a loop over
        a buffer's rows finds each row's entry (its offsets as device
        scalars, its outputs' metadata) again."""
        by = self.by_offsets
        if by is None:
            by = self.by_offsets = {}
        entry = by.get(offsets)
        if entry is None:
            if len(by) >= _MAX_OFFSET_ENTRIES:
                by.clear()
            entry = by[offsets] = _Entry.__new__(_Entry)
            for name in _Entry.__slots__:
                setattr(entry, name, getattr(self, name))
            entry.out_tensors = entry.wrap_outputs = None
            entry.offsets = tuple(map(_offset_arg, offsets))
            entry.free, entry.by_offsets = self, None
        return entry


# Per kernel, cache entries for views at given offsets (each holds its offsets
# as device scalars) kept before they are dropped; the executable they share stays.
_MAX_OFFSET_ENTRIES = 4096


def _offset_arg(offset):
    """A view's storage offset as the executable's argument: a device int64
    scalar, put there once (jit would copy a Python int on every call)."""
    return transfer.put(np.int64(offset))


def _out_tensors(results, layouts):
    """``_Entry.out_tensors`` from one call's results (strides None: row-major)."""
    out = []
    for arr, lay in zip(results, layouts):
        aval = getattr(arr, "aval", arr)
        shape, strides = (aval.shape, None) if lay is None else lay
        out.append((dtypes.NP_TO_TORCH[aval.dtype], math.prod(aval.shape) * aval.dtype.itemsize,
                    tuple(shape), strides if strides is None else tuple(strides)))
    return out


_MADE = weakref.WeakSet()  # every Kernel (registered or a raw kernel's own): release_executables


class Kernel:
    """A boxed Python kernel for one overload, backed by a jitted JAX function."""

    def __init__(self, op, impl, mode, opts: Options):
        _MADE.add(self)
        self.op = op
        self.impl = impl
        self.mode = mode
        self.opts = opts
        self.name = str(op)
        schema = op._schema
        self.arg_names = [a.name for a in schema.arguments]
        # Schema type "number" is ATen's Scalar (str() spells it that way).
        self.scalar_args = {a.name for a in schema.arguments
                            if str(a.type) in ("number", "number?", "List[number]")}
        # _foreach_*_ ops write a list of tensors in place.
        self.writes_list = mode == "inplace" and str(schema.arguments[0].type) == "List[Tensor]"
        self.returns_list = len(schema.returns) == 1 and str(schema.returns[0].type) == "List[Tensor]"
        # A Python number in a Tensor position is an unwrapped "wrapped number"
        # (``t / 3.5``): traced too, so a value that changes every step (an
        # optimizer's bias correction) does not build a new executable each time.
        tensor_args = {a.name for a in schema.arguments if str(a.type) in ("Tensor", "Tensor?")}
        self.dynamic = set() if opts.static_scalars else self.scalar_args | tensor_args
        self.out_names = [a.name for a in schema.arguments
                          if a.kwarg_only and a.alias_info is not None and a.alias_info.is_write]
        # The common call (positional tpu tensors, traced numbers and lists of
        # them, no out=) is encoded inline by __call__ (see _fast_key).
        self.fast = mode in ("functional", "inplace") and not self.out_names
        # an out= call whose only keyword is its one out tensor: the same
        # signature as the general encoding's, built inline
        self.plain_out = mode == "out" and len(self.out_names) == 1
        self.traced_positions = tuple(n in self.dynamic for n in self.arg_names)
        self.cache = _Cache()
        self.offset_entries = 0  # cache entries of views at one offset (bounded: see _build)
        self.lock = threading.Lock()
        self.check_overlap = out_checks.checks_overlap(self)
        self.indexed_overlap = out_checks.indexed_overlap_rule(self)
        self.checked_scalars = tuple(sorted((self.arg_names.index(n), n) for n in opts.checked_scalars
                                            if n in self.arg_names))
        # a call with keywords (SDPA's scale=, _to_copy's dtype=) takes the
        # fast path too, its keyword values matched as leaves after the
        # positional ones, under their names (never a checked scalar: those
        # are checked per call)
        self.keywords = self.fast and not self.checked_scalars
        # out= into one tensor (DDP's reducer copies every gradient into its
        # bucket with mul.out, a backward op per parameter per step): a strict
        # call whose result has out's shape and dtype is cached with out as a
        # leaf of its signature, its program writing the result into out's
        # buffer, as an in-place op writes its destination (_written_out)
        # (a checked scalar -- add's alpha -- is then never passed: at most
        # plain_arity positional arguments, out= the one keyword)
        self.writes_out = (self.plain_out and not opts.rng and opts.meta
                           and len(schema.returns) == 1
                           and next(str(a.type) for a in schema.arguments if a.name == self.out_names[0]) == "Tensor")
        self.not_written_out = set()  # signatures (out a leaf) whose result is not out's shape and dtype
        self._traced_named = {}  # (positional count, keyword names) -> traced flags of the leaves
        # outputs _finish returns as the one wrapped tensor
        self.returns_one = mode == "functional" and not self.returns_list
        # a predicted fused op goes straight to recording: no rng material, no
        # out= write (fused mode never donates), and no scalar to check.  A call
        # with at most plain_arity positional arguments (and no keywords) passes
        # no checked scalar (the first one's position)
        self.records_plainly = not opts.rng and mode != "out"
        self.plain_arity = self.checked_scalars[0][0] if self.checked_scalars else len(self.arg_names)
        # set by buckets.mark: runs a call with a new small shape on its bucket's
        # program (or answers None)
        self.bucketed = None
        self.signature_guards = ()  # guard(..., per_signature=True): run on a signature's first call

    def _writes(self, name):
        return (self.mode == "inplace" and name == "self") or name in self.out_names

    # -- encoding the arguments into a hashable signature plus array inputs --
    def _encode(self, x, name, inputs):
        if isinstance(x, torch.Tensor):
            if x.device.type == "tpu":
                spec, buf = views.spec_of(x, dtypes.TORCH_TO_NP[x.dtype])
                if type(buf) is LazyBuffer and not modes.is_fused():
                    buf = fusion.resolve(buf)
                inputs.append(buf)
                bits = views.lazy_bits(x)
                return (TENSOR, spec, bits) if bits else (TENSOR, spec)
            if (x.dim() == 0 or name in self.opts.allow_cpu) and not self._writes(name):
                inputs.append(dtypes.numpy_from_cpu_tensor(x))
                return (CPU_SCALAR, x.dtype, tuple(x.shape))
            errors.device_mismatch(self.name, x)
        if name in self.dynamic and type(x) in _SCALAR_TYPES:
            inputs.append(x)
            return (NUMBER, type(x))
        if isinstance(x, (list, tuple)):
            return tuple(self._encode(e, name, inputs) for e in x)
        if isinstance(x, torch.Generator):
            return None
        return x

    def _fast_key(self, args, inputs, names=()):
        """The signature ``__call__``'s general encoding gives arguments that
        are tpu tensors seen plainly through their own storage, traced numbers
        or static values, built with no call per argument; or None for
        anything else (then the general path starts over).  ``args``: the
        positional arguments, then the values of the keywords ``names``."""
        pos = []
        fused = modes._mode is _FUSED  # (modes.is_fused, without the call: every op)
        traced_at = self.traced_positions if not names else self._traced_leaves(len(args) - len(names), names)
        for x, traced in zip(args, traced_at):
            if isinstance(x, Tensor):
                buf = getattr(x.untyped_storage(), "_tpu_buf", None)  # None: a C++-made alias (storage_of)
                if buf is None:
                    return None
                np_dtype = _TORCH_TO_NP[x.dtype]
                if x.is_neg() or (np_dtype.kind == "c" and x.is_conj()):  # (only a complex tensor can be conj)
                    return None
                aval = getattr(buf, "aval", buf)  # shape and dtype as attributes
                pos.append((TENSOR, _new(ViewSpec, (aval.shape, aval.dtype, tuple(x.shape), x.stride(),
                                                    x.storage_offset(), np_dtype))))
                inputs.append(buf if fused or type(buf) is not LazyBuffer else fusion.resolve(buf))
            elif traced and type(x) in _SCALAR_TYPES:
                inputs.append(x if fused else numbers.on_device(x))  # fused mode records numbers as they are
                pos.append(_NUMBER_KEYS[type(x)])
            elif x is None or isinstance(x, _STATIC_TYPES):
                pos.append(x)
            elif type(x) is list or type(x) is tuple:  # a _foreach_* op's tensors or numbers
                entry = _fast_list(x, traced, inputs, fused)
                if entry is None:
                    return None
                pos.append(entry)
            else:  # CPU tensors, generators, ...
                return None
        groups = written_lists.groups(args) if self.writes_list else None
        if names:
            n = len(args) - len(names)
            return (tuple(pos[:n]), tuple(zip(names, pos[n:])), groups, torch.get_default_dtype(), precision.current)
        return (tuple(pos), (), groups, torch.get_default_dtype(), precision.current)

    def _traced_leaves(self, nargs, names):
        """Whether each leaf of a call with ``nargs`` positional arguments and
        keywords ``names`` is traced (``traced_positions``, then by name)."""
        flags = self._traced_named.get((nargs, names))
        if flags is None:
            flags = self._traced_named[nargs, names] = (self.traced_positions[:nargs]
                                                        + tuple(n in self.dynamic for n in names))
        return flags

    def _matched(self, hit, args, inputs, fused, names=()):
        """``hit``'s entry if ``args`` have its signature (``hit``: a
        ``_Cache.by_fn`` value: in fused mode the op recording predicts,
        in strict mode the kernel's last signature), with the inputs appended
        as ``_fast_key`` would; else None, ``inputs`` empty.  Its matchers check first
        (signature_match.py); a call they refuse is checked the slow way, and
        then gets a matcher of its own."""
        entry, key, matchers = hit
        pos, kw, groups, default_dtype, matmul_precision = key
        if default_dtype is not torch.get_default_dtype() or matmul_precision is not precision.current:
            return None
        if (kw or names) and tuple(n for n, _ in kw) != names:  # (the leaves of another call's keywords)
            return None
        for m in matchers:
            found = m.check(args, fused)
            if found is not None and (groups is None or written_lists.matches(groups, args, found)):
                if m.moving:  # views read at run-time offsets: the entry at this call's
                    if entry.free is None:  # (not an entry at offsets: never so, but then no match)
                        continue
                    entry = entry.free.at(m.offsets(args))
                inputs += found
                return entry
        # strict mode builds the key next (its matchers come from there); a
        # prediction is worth checking the slow way
        if not fused or not _slow_match(_leaf_key(key), groups, args, inputs, fused):
            return None
        if len(matchers) < _MAX_MATCHERS:  # (another context: inside inference_mode, say)
            m = signature_match.make(_leaf_key(key), args, TENSOR, NUMBER)
            if m is not None:
                matchers.append(m)
        return entry

    def _cached(self, leaves, inputs, names):
        """(entry, signature) of a fast-path call from the kernel's cache:
        fused, the op the recording predicts (fusion._guess: its executable
        first; signature None); strict, the signatures of its last calls, then
        its last ones of these shapes; each checked by its matchers.  (None,
        None) when none matches."""
        if modes._mode is _FUSED:
            guess = fusion._guess
            hit = self.cache.by_fn.get(guess[0]) if guess is not None and self.cache.by_fn else None
            return (None if hit is None else self._matched(hit, leaves, inputs, True, names)), None
        for hit in self.cache.recent:
            entry = self._matched(hit, leaves, inputs, False, names)
            if entry is not None:
                return entry, hit[1]
        if self.cache.by_shape and leaves:
            return self._shape_matched(leaves, inputs, names)
        return None, None

    def _shape_matched(self, args, inputs, names=()):
        """(entry, signature) of a strict call that none of the kernel's last
        signatures took, by the last signatures it had with these first two
        arguments' shapes (a training step's many matmul shapes), else (None, None)."""
        recent = self.cache.recent
        for hit in self.cache.by_shape.get(_shapes_of(args), ()):
            if not any(h is hit for h in recent):  # (recent ones were refused already)
                entry = self._matched(hit, args, inputs, False, names)
                if entry is not None:
                    return entry, hit[1]
        return None, None

    def __call__(self, *args, **kwargs):
        if self.check_overlap:
            out_checks.check_overlap(self, args, kwargs)
        elif self.indexed_overlap is not None:
            out_checks.check_indexed_overlap(self, self.indexed_overlap, args, kwargs)
        if (self.writes_out and len(kwargs) == 1 and (modes._mode is _STRICT or modes._mode is _FUSED)
                and len(args) <= self.plain_arity):
            out = kwargs.get(self.out_names[0])
            if isinstance(out, Tensor):
                written = self._written_out(args, out)
                if written is not _NOT_WRITTEN:
                    return written
        inputs, entry, key, fast = [], None, None, False
        quick = self.fast and not kwargs
        leaves, names = args, ()  # what the fast path matches: the arguments, then any keywords' values
        if kwargs and self.keywords:
            quick, leaves, names = True, args + tuple(kwargs.values()), tuple(kwargs)
        if quick:
            entry, key = self._cached(leaves, inputs, names)
        if (entry is not None and not entry.offsets and self.records_plainly
                and len(args) <= self.plain_arity):  # fused: the predicted op, recorded
            results = launch(self.name, entry.executable(inputs, self._written(args)), inputs, entry.out_buffers)
            metas = entry.out_tensors
            if metas is not None and entry.single and self.returns_one:
                return _wrap_as(results[0], *metas[0])
            return self._finish(entry, results, args, kwargs)
        if entry is None and quick:
            key = self._fast_key(leaves, inputs, names)
            fast = key is not None
        elif entry is None and self.plain_out and len(kwargs) == 1:  # op(..., out=t): its signature inline too
            key = self._fast_key(args, inputs)
            if key is not None:
                key += (getattr(kwargs.get(self.out_names[0]), "dtype", None),)
        if key is None and entry is None:
            inputs = []
            names = self.arg_names
            pos = tuple(self._encode(a, names[i], inputs) for i, a in enumerate(args))
            kw = tuple((k, self._encode(v, k, inputs)) for k, v in kwargs.items()
                       if k not in self.out_names)
            # The default dtype decides the result dtype of int tensor + Python float.
            key = (pos, kw, written_lists.groups(args) if self.writes_list else None, torch.get_default_dtype(),
                   precision.current)
            if self.out_names:  # the out dtypes: _build asks whether the CPU accepts them
                key += tuple(getattr(kwargs.get(n), "dtype", None) for n in self.out_names)
        if entry is None and self.writes_list and key[2][-1:] == (written_lists.SEQUENTIAL,):
            return written_lists.one_by_one(self.op, args, kwargs)  # (rare: never cached)
        if entry is None:
            entry = self.cache.get(key)
        if entry is None and self.bucketed is not None and (out := self.bucketed(self, key, args, kwargs)) is not None:
            return out
        if entry is None:
            with self.lock:
                entry = self.cache.get(key) or self._build(key, args, kwargs, inputs)
                self.cache[key] = entry
                if fast:
                    self.cache.by_fn[entry.fn] = (entry, key, [])
        if fast and modes._mode is not _FUSED:  # the next calls check against this one first
            hit = self.cache.by_fn.get(entry.fn)
            if hit is not None and hit[0] is entry:
                _remember(self.cache, hit, leaves)
        if self.checked_scalars and (kwargs or len(args) > self.plain_arity):  # (add's alpha: keyword only)
            scalar_checks.check(self, entry, args, kwargs)
        if entry.offsets:  # views read at run-time offsets
            inputs += entry.offsets
        if self.opts.rng:  # its random words (random_bits.py)
            inputs.append(entry.rng.words(_rng_material(args, kwargs), launch))
        fn = entry.executable(inputs, self._written(args))  # (a write into part of a large buffer, a foreach update)
        if (self.mode == "out" and entry.single and len(self.out_names) == 1  # out= in the op's own program
                and access.write_result(self.name, fn, inputs, entry.out_specs[0], kwargs[self.out_names[0]])):
            return kwargs[self.out_names[0]] if self.op._schema.returns else None
        try:
            results = launch(self.name, fn, inputs, entry.out_buffers)
        except RuntimeError as e:  # XLA refused it: the CPU's error names the problem as users know it
            self.cache.forget(key, entry)
            raise (dtype_support.cpu_error(self.op, args, kwargs) or e) from None
        metas = entry.out_tensors
        if metas is not None and entry.single and self.returns_one:  # most ops: _finish's first case, inline
            return _wrap_as(results[0], *metas[0])
        return self._finish(entry, results, args, kwargs)

    def _written_out(self, args, out):
        """A strict or fused ``op(*args, out=out)`` as an in-place write into
        ``out``: its signature has out as its last leaf, and its program writes
        the op's result into out's buffer (the write ``access.write_result``
        makes, in the same one program; fused mode records it), so the native
        entry runs a cached call as it runs an in-place op's.  ``_NOT_WRITTEN``
        (nothing run) for a call whose result is not out's shape and dtype (a
        resize, a cast), or whose arguments the fast signature does not take:
        the general path runs it."""
        names, inputs = (self.out_names[0],), []
        leaves = args + (out,)
        entry, key = self._cached(leaves, inputs, names)
        if entry is None:
            key = self._fast_key(leaves, inputs, names)
            if key is None or key in self.not_written_out:
                return _NOT_WRITTEN
            entry = self.cache.get(key)
            if entry is None:
                try:
                    with self.lock:
                        entry = self.cache.get(key) or self._build(key, args, {names[0]: out}, inputs)
                except _NotWrittenOut:
                    if len(self.not_written_out) >= _MAX_OFFSET_ENTRIES:
                        self.not_written_out.clear()
                    self.not_written_out.add(key)
                    return _NOT_WRITTEN
                self.cache[key] = entry
                self.cache.by_fn[entry.fn] = (entry, key, [])
            hit = self.cache.by_fn.get(entry.fn)
            if hit is not None and hit[0] is entry and modes._mode is not _FUSED:
                _remember(self.cache, hit, leaves)
        if entry.offsets:
            inputs += entry.offsets
        try:
            results = launch(self.name, entry.executable(inputs, (out,)), inputs, entry.out_buffers)
        except RuntimeError:  # XLA refused it: the general path runs it again and names the failure
            self.cache.forget(key, entry)
            if key is not None:
                self.not_written_out.add(key)
            return _NOT_WRITTEN
        return self._finish(entry, results, args, {names[0]: out})

    def _written(self, args):
        """The tensors an in-place call writes, in its donor's positions' order:
        the written list, or the one written tensor."""
        return args[0] if self.writes_list else args[:1]

    # -- output handling ------------------------------------------------------
    def _finish(self, entry, results, args, kwargs):
        if entry.writes_out:  # (out= written in the op's own program: _written_out)
            out = kwargs[self.out_names[0]]
            buffers.set_buffer(out.untyped_storage(), results[0] if type(results) is list else results)
            return out
        if self.mode == "inplace":
            self_t = args[0]
            if self.writes_list:  # (an optimizer's foreach: set_buffer inline, per tensor)
                for t, buf in zip(self_t, results):
                    st = t.untyped_storage()
                    if hasattr(st, "_tpu_buf"):
                        st._tpu_buf = buf
                    else:
                        buffers.set_buffer(st, buf)
                return None
            if type(results) is list:
                results = results[0]  # recorded: one LazyBuffer for the one buffer written
            buffers.set_buffer(self_t.untyped_storage(), results)
            return self_t
        metas = entry.out_tensors
        if metas is None:
            metas = entry.out_tensors = _out_tensors(results, entry.out_layouts)
        if entry.single and self.returns_one:  # most ops: no list of outputs
            return buffers.wrap_as(results[0], *metas[0])
        wrap = entry.wrap_outputs
        if wrap is None:
            wrap = entry.wrap_outputs = buffers.OutputTensors(metas)
        tensors = wrap(results)
        if self.mode == "out":
            from .core import copy_into
            outs = []
            for n in self.out_names:  # an out= argument may be a list (_foreach_*.out)
                v = kwargs[n]
                outs.extend(v) if isinstance(v, (list, tuple)) else outs.append(v)
            for dst, src in zip(outs, tensors):
                if tuple(dst.shape) != tuple(src.shape):
                    out_checks.resize_output(dst, src.shape)
                    if self.opts.promote is not None:
                        out_checks.restride_resized_out(dst, args)
                if not access.take_result(dst, src):  # (taking the result compiles no copy per shape)
                    copy_into(dst, src)
            if not self.op._schema.returns:
                return None
            return outs[0] if len(outs) == 1 else tuple(outs)
        if self.returns_list:
            return tensors
        return tensors[0] if entry.single else tuple(tensors)

    # -- the first call with a signature ------------------------------------------
    def _build(self, key, args, kwargs, inputs):
        """The entry for ``key``.  Views that could sit elsewhere in their
        buffer read their storage offset at run time: one executable serves
        every offset (``op(x[i])`` in a loop compiles once)."""
        map_limit.note_build(release_executables)
        offsets = []
        pos_t, kw_t = key[:2]
        free = (_offset_free(pos_t, offsets), tuple((n, _offset_free(t, offsets)) for n, t in kw_t)) + key[2:]
        if free == key:
            return self._build_entry(key, args, kwargs, inputs, 0)
        entry = self.cache.get(free)
        if entry is None:
            entry = self.cache[free] = self._build_entry(free, args, kwargs, inputs, len(offsets))
        self.offset_entries += 1
        if self.offset_entries > _MAX_OFFSET_ENTRIES:  # a loop over many positions: forget the old ones
            for k in [k for k, e in self.cache.items() if e.offsets]:
                del self.cache[k]
            self.offset_entries = 1
        return entry.at(tuple(offsets))

    def _build_entry(self, key, args, kwargs, inputs, n_offsets):
        if self.signature_guards:
            bound = dict(zip(self.arg_names, args))
            bound.update(kwargs)
            for check in self.signature_guards:
                check(bound)
        if self.mode == "out":
            out_checks.check_out_dtype_like_cpu(self, args, kwargs)
        if self.opts.precheck is not None:
            self.opts.precheck(args, kwargs)
        dtype_support.check(self.op, args, kwargs)  # (before the meta kernel: its refs may refuse otherwise)
        meta_out = self._meta(args, kwargs) if self.opts.meta else None
        if self.opts.first_call_check is not None:
            self.opts.first_call_check(args, kwargs)
        if self.mode == "inplace" and self.opts.promote is not None and not self.writes_list:
            _check_in_place_cast(self, args, kwargs)
        if self.writes_list and not self.name.startswith("aten::_foreach_copy"):  # (copy_ casts)
            _check_list_in_place_cast(self, args, kwargs)
        single = not isinstance(meta_out, (tuple, list))
        promote_dtype = self.promote_dtype(args, kwargs)

        pos_t, kw_t, groups, _, matmul_precision = key[:5]  # then out dtypes (out mode)
        groups = groups or (0,)
        mode = self.mode
        apply = self.apply
        rng = self.opts.rng
        in_place_specs = None
        if mode == "inplace":
            destinations = pos_t[0] if self.writes_list else [pos_t[0]]
            in_place_specs = [views.ViewSpec._make(t[1]) for t in destinations]
            in_place_bits = [t[2] if len(t) > 2 else () for t in destinations]
            # which run-time offset each destination has (they are decoded first), or None
            dynamic = list(itertools.accumulate((s.offset is None for s in in_place_specs), initial=0))
            in_place_offsets = [dynamic[i] if s.offset is None else None for i, s in enumerate(in_place_specs)]
        n_inputs = len(inputs)  # the arrays and numbers; then n_offsets offsets, then the random words
        rng_plan = None
        out_specs = None
        if mode == "inplace":
            out_specs = [OutSpec(spec.size, None, spec.dtype) for spec in in_place_specs]
        elif meta_out is not None:
            metas = list(meta_out) if not single else [meta_out]
            if mode == "out":
                metas = metas[:len(self.out_names)] if len(metas) >= len(self.out_names) else metas
            out_specs = [OutSpec(tuple(m.shape), m.stride(), dtypes.to_np(m.dtype)) for m in metas]
            if mode == "out" and out_checks.computes_before_out(self):
                out_specs = out_checks.result_before_out_cast(self, args, kwargs, out_specs)
            if self.opts.out_dtypes is not None and mode == "functional":
                out_specs = [spec if d is None else spec._replace(dtype=dtypes.to_np(d))
                             for spec, d in zip(out_specs, self.opts.out_dtypes(args, kwargs))]
        # out= with out a leaf of the signature (_written_out): (out's view
        # spec, its buffer's input position, its run-time offset's or None)
        written_out = None
        if mode == "out" and kw_t and kw_t[-1][0] == self.out_names[0]:
            written_out = _written_out_plan(self, out_specs, single, kw_t[-1][1], n_inputs, n_offsets)

        def traced(*inputs):
            it = iter(inputs)
            offs = inputs[n_inputs:n_inputs + n_offsets]
            at = iter(offs)
            a = [_decode(t, it, at) for t in pos_t]
            k = {name: _decode(t, it, at) for name, t in kw_t}
            if written_out is not None:
                del k[self.out_names[0]]  # (read as a leaf, unused: written below)
            with (random_bits.drawing(inputs[n_inputs + n_offsets], rng_plan) if rng else contextlib.nullcontext()), \
                    precision.tracing(matmul_precision):  # the setting this entry is cached under
                outs = apply(a, k, promote_dtype, [s.dtype for s in out_specs] if out_specs else None)
            if mode == "inplace":  # write each result back through its destination view
                # Destinations that share a storage (views of one flat buffer)
                # are written one after another into the same buffer.
                current = {}
                for i, spec in enumerate(in_place_specs):
                    g = groups[i]
                    value = views.apply_bits(jnp.broadcast_to(outs[i], spec.size), in_place_bits[i])
                    o = in_place_offsets[i]
                    current[g] = (views.writer(spec)(current.get(g, inputs[g]), value) if o is None
                                  else views.writer(spec)(current.get(g, inputs[g]), value, offs[o]))
                new = [current[groups[i]] for i in range(len(in_place_specs))]
                return tuple(new) if len(new) > 1 or self.writes_list else new[0]
            if written_out is not None:
                spec, at_input, at_offset = written_out
                value = outs[0].reshape(spec.size)
                return (views.writer(spec)(inputs[at_input], value) if at_offset is None
                        else views.writer(spec)(inputs[at_input], value, offs[at_offset]))
            return tuple(views.to_storage_layout(o, s) for o, s in zip(outs, out_specs or [None] * len(outs)))

        traced.__name__ = self.name  # names the op in fused-chain logs and XLA traces
        fn = runtime.device_jit(traced)
        rng_words = []  # a random kernel: a stand-in of its words input
        if rng:  # count the words it takes: they are drawn before it runs
            rng_plan = random_bits.planned(lambda: jax.eval_shape(
                traced, *inputs, *[_offset_arg(0)] * n_offsets, np.zeros(0, np.uint32)))
            rng_words = [rng_plan.dummy()]
        if out_specs is None:  # no meta kernel: shapes from tracing our implementation,
            # as jit's own trace, which the first call then reuses.  When layout
            # may change the specs after, the probe traces a stand-in function:
            # jit's trace cache is keyed on the function (and its name), and the
            # first call must trace again with the final specs.
            probe = list(inputs) + [_offset_arg(0)] * n_offsets + rng_words
            shapes = (jax.eval_shape(lambda *xs: traced(*xs), *probe) if self.opts.layout is not None
                      else fn.trace(*probe).out_info)
            shapes = shapes if isinstance(shapes, (tuple, list)) else [shapes]
            out_specs = [OutSpec(tuple(o.shape), buffers.contiguous_strides(o.shape), np.dtype(o.dtype))
                         for o in shapes]
            single = len(out_specs) == 1
        if self.opts.layout is not None and mode != "inplace":
            out_specs = self.opts.layout(args, out_specs)
        log.debug("compile %s for %s", self.name, key)
        _logs.kernel_compile(self, args, kwargs)  # TORCH_TPU_LOGS=recompiles
        if mode == "inplace" or written_out is not None:  # a write covering its whole buffer: the value's shape
            out_buffers = [(spec.size if views.covers_buffer(spec) else spec.buf_shape, spec.buf_dtype)
                           for spec in (in_place_specs or [written_out[0]])]
        else:
            out_buffers = [(views.buffer_shape(s), s.dtype) for s in out_specs]
        if written_out is not None:
            donate = access.worth_donating([written_out[0]], (written_out[1],))
        elif mode != "inplace":
            donate = ()
        elif self.writes_list:  # a foreach update of distinct storages (an optimizer's): in place
            donate = groups if groups == tuple(range(len(in_place_specs))) else ()
        else:
            donate = access.worth_donating(in_place_specs, groups)
        if modes._mode is _FUSED:  # a kernel that cannot take these inputs fails here, at the op, as in strict
            self._check_traces(fn, list(inputs) + [_offset_arg(0)] * n_offsets + rng_words, args, kwargs)
        # (the offsets too: without them the trace fails and views never get the cheaper compile)
        sample = list(inputs) + [_offset_arg(0)] * n_offsets + rng_words
        numbers = _list_numbers(pos_t, kw_t)
        fn = list_numbers.launcher(runtime.small_program_jit(fn, traced, sample), traced, numbers, len(sample), sample)
        donor = None
        if donate:  # the same program, its destinations' buffers donated (strict calls that may: can_donate)
            donating = runtime.small_program_jit(runtime.device_jit(traced, donate_argnums=donate), traced, sample, donate)
            donor = (list_numbers.launcher(donating, traced, numbers, len(sample), sample, donate), donate)
        entry = _Entry(fn, out_specs, single, out_buffers, donor)
        entry.rng = rng_plan
        entry.writes_out = written_out is not None
        return entry

    def _check_traces(self, fn, inputs, args, kwargs):
        """Trace ``fn`` for ``inputs`` (a recorded op's: pending results too).
        Strict mode's first launch raises a kernel's refusal at the op (the
        CPU's error when it has one); fused mode would meet it only when the
        chain is traced, at a later host read.  jit's trace cache serves the
        chain's own trace of the op."""
        specs = [jax.ShapeDtypeStruct(x.shape, x.dtype) if type(x) is LazyBuffer else x for x in inputs]
        try:
            traced = fn.trace(*specs)
            if _half_lapack(traced.jaxpr.jaxpr):  # refused when lowered, not traced: lower it too
                traced.lower()
        except Exception as e:
            raise (dtype_support.cpu_error(self.op, args, kwargs) or failure(self.name, e)) from None

    def promote_dtype(self, args, kwargs):
        """PyTorch's computation dtype for the operands (``torch._refs`` rules), or None."""
        if self.opts.promote is None:
            return None
        kwargs = {k: v for k, v in kwargs.items() if k not in self.out_names}  # out= does not promote
        operands = _promotion_operands(args, kwargs)
        compute, _ = elementwise_dtypes(*operands, type_promotion_kind=self.opts.promote)
        compute = dtypes.to_np(compute)
        if compute != np.float32:
            return compute
        return _narrowing(self, args, kwargs, operands, compute) or compute

    def apply(self, args, kwargs, promote_dtype, out_dtypes, key=None):
        """The op on traced values (jax arrays for tensors): a list of result arrays
        in PyTorch's result dtypes.  Eager kernels and torch.compile graphs share it."""
        if type(promote_dtype) is _Narrowing:  # numbers first rounded to float16/bfloat16
            promote_dtype, args, kwargs = promote_dtype.apply(args, kwargs)
        if promote_dtype is not None:  # tensors, and numbers in Scalar positions
            names = self.arg_names
            args = [_cast_operand(x, promote_dtype, names[i] in self.scalar_args)
                    for i, x in enumerate(args)]
            kwargs = {n: _cast_operand(x, promote_dtype, n in self.scalar_args)
                      for n, x in kwargs.items()}
        if self.opts.opmath:
            ct = dtypes.opmath(out_dtypes[0])
            names = self.arg_names
            args = [_to_opmath(x, ct, names[i] in self.scalar_args) for i, x in enumerate(args)]
            kwargs = {n: _to_opmath(x, ct, n in self.scalar_args) for n, x in kwargs.items()}
        _trace.compute_dtype = promote_dtype
        _trace.out_dtypes = tuple(out_dtypes) if out_dtypes else ()
        _trace.key = key
        _trace.in_place = self.mode == "inplace"
        result = self.impl(*args, **kwargs)
        outs = list(result) if isinstance(result, (tuple, list)) else [result]
        if out_dtypes:
            outs = [o if d is None else convert(jnp.asarray(o), d) for o, d in zip(outs, out_dtypes)]
        return outs

    def _meta(self, args, kwargs):
        # (a _foreach_* op's packed ``scalars`` tensor stays on the CPU: its meta kernel reads it there)
        names = self.arg_names
        margs = [a if names[i] == "scalars" and _is_cpu_tensor(a) else to_meta(a) for i, a in enumerate(args)]
        mkw = {k: v if k == "scalars" and _is_cpu_tensor(v) else to_meta(v) for k, v in kwargs.items()}
        try:
            with warnings.catch_warnings():  # (an out= resize warns once, in out_checks.resize_output, on every call)
                warnings.filterwarnings("ignore", message=out_checks.RESIZED)
                return self.op(*margs, **mkw)
        except NotImplementedError:
            return None
        except (RuntimeError, ValueError, IndexError, TypeError, AssertionError) as e:
            if "meta" in str(e).lower() and "tensor" in str(e).lower() and "implement" in str(e).lower():
                return None
            if (accepted := out_checks.instead_of_meta_error(self, args, kwargs, e)) is not None:
                return self.op(*margs, **accepted)
            answer = dtype_support.cpu_answer(self.op, args, kwargs)
            if answer is None:
                raise errors.rewrite_meta_error(e, self.name, args) from None
            if answer[0] == "error":
                raise answer[1] from None
            result = answer[1]  # the CPU computes what the meta kernel refused: its shapes and strides
            return type(result)(to_meta(r) for r in result) if isinstance(result, (tuple, list)) else to_meta(result)


class MaskedOutputs:
    """How a graph runs an op whose ``mask_arg`` picks the outputs computed
    (eager serves it with a raw kernel that returns None for the rest)."""

    def __init__(self, inner: Kernel, mask_position, mask_arg="output_mask", mask_of=None):
        # mask_position/mask_arg: one argument's position and name, or tuples of them
        self.inner = inner
        self.opts = inner.opts
        self.mask_position = mask_position
        self.mask_arg = mask_arg
        self.mask_of = mask_of

    def mask(self, args, kwargs):
        if isinstance(self.mask_arg, tuple):
            value = tuple(kwargs[n] if n in kwargs else args[p]
                          for n, p in zip(self.mask_arg, self.mask_position))
        else:
            value = kwargs[self.mask_arg] if self.mask_arg in kwargs else args[self.mask_position]
        return self.mask_of(value) if self.mask_of else value

    def promote_dtype(self, args, kwargs):
        return None

    def apply(self, args, kwargs, promote_dtype, out_dtypes, key=None):
        mask = self.mask(args, kwargs)
        wanted = [d for d, m in zip(out_dtypes or [None] * len(mask), mask) if m]
        outs = iter(self.inner.apply(args, kwargs, None, wanted, key))
        return [next(outs) if m else None for m in mask]


def _check_in_place_cast(kernel, args, kwargs):
    """The CPU's refusal of an in-place result its tensor cannot hold
    (``int_tensor.mul_(1.5)``): PyTorch's meta kernels of most in-place
    pointwise ops do not check it, and the cast would truncate silently."""
    operands = _promotion_operands(args, {k: v for k, v in kwargs.items() if k != "alpha"})  # (alpha does not promote)
    _, result = elementwise_dtypes(*operands, type_promotion_kind=kernel.opts.promote)
    if not torch.can_cast(result, args[0].dtype):
        raise RuntimeError(errors.cast_refusal(result, args[0].dtype))


def _is_cpu_tensor(x):
    return isinstance(x, Tensor) and x.device.type == "cpu"


def _check_list_in_place_cast(kernel, args, kwargs):
    """``_check_in_place_cast`` per position of a ``_foreach_*_`` op, as the
    CPU's loop of in-place ops refuses (``_foreach_mul_(bools, 8)``): its
    meta kernels do not check, and ``dtype_support`` knows only the tensors'
    dtypes (a call with True passes it for the next with 8).  alpha, and
    addcmul/addcdiv's values, do not promote."""
    names = kernel.arg_names
    skip = {"alpha"} | ({"value", "scalars"} if "tensor1" in names else set())
    self = args[0]
    rest = [a for n, a in zip(names[1:], args[1:]) if n not in skip]
    rest += [v for n, v in kwargs.items() if n not in skip]
    for i, x in enumerate(self):
        at = [a[i] if isinstance(a, (list, tuple)) and len(a) == len(self) else a for a in rest]
        operands = [to_meta(a) for a in [x, *at] if isinstance(a, torch.Tensor) or type(a) in _SCALAR_TYPES]
        _, result = elementwise_dtypes(*operands, type_promotion_kind=ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT)
        if not torch.can_cast(result, x.dtype):
            raise RuntimeError(errors.cast_refusal(result, x.dtype))


def _promotion_operands(args, kwargs):
    """Meta stand-ins of the tensors and Python numbers among an op's
    arguments (lists flattened): what its type promotion reads."""
    return [to_meta(a) for a in _flat(args) + _flat(list(kwargs.values()))
            if isinstance(a, torch.Tensor) or type(a) in _SCALAR_TYPES]


def _fast_list(xs, traced, inputs, fused):
    """``Kernel._fast_key`` for a list argument: the tuple ``_encode`` gives a
    list of plain tpu tensors, traced numbers or static values (a _foreach_*
    op's tensors, a dim list), or None for anything else."""
    out = []
    for x in xs:
        if isinstance(x, Tensor):
            buf = getattr(x.untyped_storage(), "_tpu_buf", None)
            if buf is None:
                return None
            np_dtype = _TORCH_TO_NP[x.dtype]
            if x.is_neg() or (np_dtype.kind == "c" and x.is_conj()):  # (only a complex tensor can be conj)
                return None
            aval = getattr(buf, "aval", buf)
            out.append((TENSOR, _new(ViewSpec, (aval.shape, aval.dtype, tuple(x.shape), x.stride(),
                                                x.storage_offset(), np_dtype))))
            inputs.append(buf if fused or type(buf) is not LazyBuffer else fusion.resolve(buf))
        elif traced and type(x) in _SCALAR_TYPES:
            inputs.append(x)  # a list's numbers (bias corrections) change every step
            out.append(_NUMBER_KEYS[type(x)])
        elif x is None or isinstance(x, _STATIC_TYPES):  # dims, a normalized shape, an output mask
            out.append(x)
        else:
            return None
    return tuple(out)


def _slow_match(pos, groups, args, inputs, fused):
    """``Kernel._matched`` without a matcher: each argument checked against
    its signature entry in Python, the inputs appended as ``_fast_key``
    would; False (``inputs`` emptied) for a call of another signature."""
    if len(args) == len(pos):
        for x, e in zip(args, pos):
            if type(e) is tuple and e:
                tag = e[0]
                if tag is TENSOR:  # (TENSOR, spec): a tpu tensor seen plainly
                    buf = _plain_buffer(x, e[1], fused)
                    if buf is None:
                        break
                    inputs.append(buf)
                elif tag is NUMBER and type(x) is e[1]:  # a traced number
                    inputs.append(x if fused else numbers.on_device(x))
                elif tag is NUMBER or not _list_matches(x, e, inputs, fused):  # a list (_fast_list's)
                    break
            elif type(x) is not type(e) or x != e:  # a static value (None included)
                break
        else:  # a written list: its tensors share storages as they did
            if groups is None or written_lists.groups(args) == groups:
                return True
    del inputs[:]
    return False


_MAX_MATCHERS = 2  # per signature
_MAX_SHAPES = 256  # argument shapes a kernel keeps recent signatures for (_shapes_of)
_RECENT = 4  # signatures a kernel checks a strict call against before it builds the call's
# ... and those it keeps per argument shapes (_Cache.by_shape): a model's
# layers call mm with one pair of shapes in many layouts (a transposed
# weight, a flattened batch, a gradient's view: 8 in a 2-layer Llama step)
_SAME_SHAPES = 16


class _NotWrittenOut(Exception):
    """An out= signature whose result is not written straight into out."""


_NOT_WRITTEN = object()  # Kernel._written_out's: the general path runs the call


def _written_out_plan(kernel, out_specs, single, out_leaf, n_inputs, n_offsets):
    """(out's view spec, its buffer's input position, its run-time offset's
    position or None) for an out= signature with out as its last leaf, whose
    one result has out's shape and dtype in row-major order (what
    ``access.write_result`` writes straight into out); else _NotWrittenOut."""
    if (not single or out_specs is None or len(out_specs) != 1 or kernel.opts.layout is not None
            or out_leaf[0] is not TENSOR or len(out_leaf) > 2):  # (a lazy conj/neg bit: the copy's)
        raise _NotWrittenOut
    spec, result = out_leaf[1], out_specs[0]
    if result.size != spec.size or result.dtype != spec.dtype or views.permuted_order(result) is not None:
        raise _NotWrittenOut
    # its buffer is the last input (the last leaf's); its offset, when read at run time, the last offset
    return spec, n_inputs - 1, (n_offsets - 1 if spec.offset is None else None)


def _remember(cache, hit, args):
    """Put ``hit`` (whose signature ``args`` have) first among a kernel's
    recent signatures, and among those of its first arguments' shapes, with
    a matcher made from ``args`` if it has room."""
    matchers = hit[2]
    if len(matchers) < _MAX_MATCHERS:
        m = signature_match.make(_leaf_key(hit[1]), args, TENSOR, NUMBER)
        if m is not None:
            matchers.append(m)
    recent = cache.recent
    if not recent or recent[0] is not hit:
        recent[:] = [hit, *(h for h in recent if h is not hit)][:_RECENT]
        if len(cache.by_shape) >= _MAX_SHAPES:
            cache.by_shape.clear()
        same = cache.by_shape.setdefault(_shapes_of(args), [])
        if not same or same[0] is not hit:
            same[:] = [hit, *(h for h in same if h is not hit)][:_SAME_SHAPES]


def _leaf_key(key):
    """A fast signature's encoding of each leaf the matchers check: the
    positional arguments', then its keywords' (``_fast_key``)."""
    return key[0] + tuple(e for _, e in key[1]) if key[1] else key[0]


def _shapes_of(args):
    """The shapes of a call's first two arguments (None where not a tensor):
    what ``_Cache.by_shape`` files a kernel's recent signatures under."""
    return (getattr(args[0], "shape", None) if args else None,
            getattr(args[1], "shape", None) if len(args) > 1 else None)


def _plain_buffer(x, spec, fused):
    """The input ``_fast_key`` passes for ``x`` if it is a tpu tensor seen
    plainly through its own storage with the ViewSpec ``spec``, else None."""
    if not isinstance(x, Tensor):
        return None
    buf = getattr(x.untyped_storage(), "_tpu_buf", None)
    if (buf is None or _TORCH_TO_NP[x.dtype] is not spec[5] or x.is_neg()
            or (spec[5].kind == "c" and x.is_conj())):  # a real tensor is never conj
        return None
    aval = getattr(buf, "aval", buf)
    if (aval.shape != spec[0] or aval.dtype != spec[1] or x.shape != spec[2] or x.stride() != spec[3]
            or x.storage_offset() != spec[4]):
        return None
    return buf if fused or type(buf) is not LazyBuffer else fusion.resolve(buf)


def _list_matches(xs, entry, inputs, fused=True):
    """Whether ``_fast_list`` gives the list ``xs`` the signature ``entry``,
    appending the inputs it would (``_slow_match``'s lists)."""
    if (type(xs) is not list and type(xs) is not tuple) or len(xs) != len(entry):
        return False
    for x, e in zip(xs, entry):
        if type(e) is tuple and e:
            if e[0] is TENSOR:
                buf = _plain_buffer(x, e[1], fused)
                if buf is None:
                    return False
                inputs.append(buf)
            elif e[0] is NUMBER and type(x) is e[1]:
                inputs.append(x)
            else:
                return False
        elif type(x) is not type(e) or x != e:  # a dim, a normalized shape's size, an output mask's flag
            return False
    return True


# Decompositions XLA:CPU runs through LAPACK, which has no float16/bfloat16:
# JAX refuses those when it lowers them.
_LAPACK_PRIMITIVES = frozenset("lu cholesky eigh eig qr svd schur hessenberg tridiagonal householder_product geqrf "
                               "geqp3".split())
_HALVES = (np.dtype(np.float16), np.dtype(jnp.bfloat16))


def _half_lapack(jaxpr) -> bool:
    for eqn in jaxpr.eqns:
        if eqn.primitive.name in _LAPACK_PRIMITIVES and any(
                getattr(getattr(v, "aval", None), "dtype", None) in _HALVES for v in eqn.invars):
            return True
        if any(_half_lapack(sub) for sub in jaxprs_in_params(eqn.params)):
            return True
    return False


def release_executables() -> None:
    """Drop every kernel's cached signatures and JAX's caches: their
    executables (and memory maps) go once no launch holds them."""
    for kernel in list(_MADE):
        kernel.cache.clear()
    jax.clear_caches()
    gc.collect()


class _Cache(dict):
    """A kernel's entries by signature, and (``by_fn``) each fast-path
    entry, its signature and its matchers by executable, for ``Kernel._matched``; both
    cleared together."""
    __slots__ = ("by_fn", "recent", "by_shape")

    def __init__(self):
        super().__init__()
        self.by_fn = {}
        self.recent = []  # strict mode: by_fn values of the kernel's last fast-path calls, latest first
        self.by_shape = {}  # ... and of its last ones per first arguments' shapes (_shapes_of)

    def clear(self):
        super().clear()
        self.by_fn.clear()
        self.recent = []
        self.by_shape = {}

    def forget(self, key, entry):
        """Drop ``entry``, whose launch failed: the next call with its
        signature builds and checks again (fused mode records a cached entry
        without asking)."""
        if key is not None and self.get(key) is entry:
            del self[key]
        self.by_fn.pop(entry.fn, None)
        self.recent = []
        self.by_shape = {}


def _flat(xs):
    out = []
    for x in xs:
        if isinstance(x, (list, tuple)):
            out.extend(_flat(x))
        else:
            out.append(x)
    return out


def to_meta(x):
    if isinstance(x, torch.Tensor):
        return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="meta")
    if isinstance(x, (list, tuple)):
        return type(x)(to_meta(e) for e in x)
    if isinstance(x, torch.device) and x.type == "tpu":
        return torch.device("meta")
    return x


def _decode(t, it, offsets):
    if type(t) is tuple and t:
        tag = t[0]
        if tag is TENSOR:
            spec = t[1]
            value = (views.reader(spec)(next(it)) if spec[4] is not None
                     else views.reader(spec)(next(it), next(offsets)))
            return views.apply_bits(value, t[2]) if len(t) > 2 else value
        if tag is CPU_SCALAR:
            return jnp.asarray(next(it))
        if tag is NUMBER:
            return next(it)
        return tuple(_decode(e, it, offsets) for e in t)
    return t


def _list_numbers(pos_t, kw_t):
    """(position among the inputs ``_decode`` reads, Python type) of each
    traced number inside a list argument of the signature (pos_t, kw_t)."""
    found, count = [], 0

    def walk(t, in_list):
        nonlocal count
        if type(t) is tuple and t:
            tag = t[0]
            if tag is TENSOR or tag is CPU_SCALAR or tag is NUMBER:
                if tag is NUMBER and in_list:
                    found.append((count, t[1]))
                count += 1
            else:
                for e in t:
                    walk(e, True)
    for t in pos_t:
        walk(t, False)
    for _, t in kw_t:
        walk(t, False)
    return found


def _offset_free(t, offsets):
    """Encoded argument ``t`` with the offsets of its views that can move
    (``views.split_offset``) made None and appended to ``offsets``, in the
    order ``_decode`` reads them."""
    if type(t) is tuple and t:
        tag = t[0]
        if tag is TENSOR:
            spec, offset = views.split_offset(t[1])
            if offset is not None:
                offsets.append(offset)
            return t if spec is t[1] else (TENSOR, _new(ViewSpec, spec)) + t[2:]
        if tag is CPU_SCALAR or tag is NUMBER:
            return t
        return tuple(_offset_free(e, offsets) for e in t)
    return t


class _Narrowing(NamedTuple):
    """A float16/bfloat16 op computed in float32 with Python-number operands
    (or tensor operands of another dtype): PyTorch's CPU kernels round such a
    number to the tensors' dtype before computing (TensorIterator casts a
    wrapped number, and any operand, to the common dtype), so
    ``half + 0.1`` adds 0.0999755859375.  ``mul`` and ``div`` (every rounding
    mode) read the number unrounded (their reduced-float scalar paths), as do Scalar
    arguments that are not operands (``alpha``, ``pow``'s exponent); but
    ``mul_.Scalar`` rounds it (``_ROUNDED_SCALAR_OVERLOADS``)."""
    compute: np.dtype
    common: np.dtype
    positions: tuple  # of the numbers in args
    names: tuple  # of the numbers in kwargs

    def apply(self, args, kwargs):
        args = list(args)
        for i in self.positions:
            args[i] = jnp.asarray(args[i]).astype(self.common)  # (a traced tensor too)
        kwargs = {n: jnp.asarray(v).astype(self.common) if n in self.names else v for n, v in kwargs.items()}
        return self.compute, args, kwargs


_UNROUNDED_SCALAR_OPS = frozenset(("mul", "mul_", "div", "div_", "true_divide", "true_divide_",
                                   "floor_divide", "floor_divide_"))
# ...but for mul_.Scalar, which the CPU computes as mul_out(self, wrapped number,
# self): the number is the first operand, where mul's scalar path does not look,
# so TensorIterator casts it to the tensor's dtype.  (Python's ``x.mul_(0.1)`` is
# mul_.Tensor, unrounded; mul_.Scalar is what C++ code calls, the CPU's in-place
# _foreach_mul_ among them: every foreach optimizer's ``_foreach_mul_(exp_avg_sqs, beta2)``.)
_ROUNDED_SCALAR_OVERLOADS = frozenset(("mul_.Scalar",))


def _narrowing(kernel, args, kwargs, operands, compute):
    """The ``_Narrowing`` of a float32 computation whose common dtype is
    float16/bfloat16 and that has Python-number operands or tensors of
    another dtype (a 0-d float32 tensor, an integer tensor), or None."""
    _, common = elementwise_dtypes(*operands, type_promotion_kind=ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT)
    if common not in (torch.float16, torch.bfloat16):
        return None
    if all(isinstance(a, torch.Tensor) and a.dtype == common for a in operands):
        return None
    base, overload = str(kernel.op).split(".")[1:3]  # aten.mul.Tensor
    # (every overload: the rounding modes' kernels too)
    unrounded = base in _UNROUNDED_SCALAR_OPS and f"{base}.{overload}" not in _ROUNDED_SCALAR_OVERLOADS

    def rounds(name, value):
        if isinstance(value, torch.Tensor):  # TensorIterator casts it to the common dtype too
            if value.dtype == common:
                return False
            return not (unrounded and name == "other" and value.dim() == 0)
        if type(value) not in _SCALAR_TYPES:
            return False
        if name in ("other", "self"):  # an operand (remainder.Scalar_Tensor's Scalar self: wrapped, then cast)
            return not unrounded
        return name not in kernel.scalar_args  # a wrapped number in a Tensor position

    names = kernel.arg_names
    positions = tuple(i for i, a in enumerate(args) if i < len(names) and rounds(names[i], a))
    kw = tuple(n for n, v in kwargs.items() if n not in kernel.out_names and rounds(n, v))
    if not positions and not kw:
        return None
    return _Narrowing(compute, dtypes.to_np(common), positions, kw)


def _cast_operand(x, dtype, is_scalar_arg):
    if isinstance(x, (jax.Array, np.ndarray)):
        if x.dtype == np.bool_ and dtype != np.bool_:
            # XLA rewrites convert(bool) * y as select(bool, y, 0), losing
            # PyTorch's False * inf == nan: the barrier keeps it a product
            return jax.lax.optimization_barrier(x.astype(dtype))
        return x.astype(dtype)
    if is_scalar_arg and type(x) in _SCALAR_TYPES:  # via int64/float64: out-of-range ints wrap (uint8 - 3), as in PyTorch
        return jnp.asarray(x).astype(dtype)
    if isinstance(x, jax.core.Tracer):
        return jnp.asarray(x, dtype)
    if isinstance(x, tuple) and x and isinstance(x[0], jax.Array):
        return tuple(e.astype(dtype) for e in x)
    return x


def _to_opmath(x, dtype, scalar):
    """An operand (a traced tensor or Scalar) in the op's opmath dtype; others as
    they are.  A Scalar is a Python number where a compiled graph holds it as a
    constant: cast too, as the traced number eager mode passes for it is."""
    if isinstance(x, (jax.Array, np.ndarray)):
        return x.astype(dtype)
    if scalar and type(x) in _SCALAR_TYPES:
        return jnp.asarray(x, dtype)
    return x


def _rng_material(args, kwargs):
    from ..device import rng
    gen = kwargs.get("generator")
    if gen is None:
        gen = next((a for a in args if isinstance(a, torch.Generator)), None)
    return rng.next_key_material(gen)


def make_key(material):
    """The jax key of one random op (or graph call) from its (seed, seed, counter) material."""
    return random_bits.key(material)


