"""Fused eager: ops are recorded instead of run, and the pending chain runs as
one XLA executable when a value is needed.

Each recorded op is the same jitted per-op function strict mode calls; its
outputs are ``LazyBuffer`` placeholders that storages hold like real buffers.
A flush traces the chain (nested jits inline) into one ``jax.jit`` function,
cached by the chain's structure: which per-op executables, wired how, and
which results are still referenced.  A training loop with one host read per
step therefore compiles on its first steps and then reuses executables.

A host read also teaches where the program will be read next time: the
structure of the pending program up to the read op (a rolling hash of each
op's executable and wiring).  When recording reaches that same point again,
the ops the read needs are launched there, before the host asks, so a training
step's forward runs while Python records its backward and optimizer.
"""
import logging
import math
import os
import threading
import time
import weakref
from typing import NamedTuple

import jax
import numpy as np
from jax._src.array import ArrayImpl
from jax._src.lax.lax import _convert_element_type

from .. import logs, native, runtime
from . import pending, ranges as _prof

log = logging.getLogger("torch_tpu.fusion")

MAX_PENDING_OPS = int(os.environ.get("TORCH_TPU_FUSED_MAX_OPS", "4096"))


class LazyBuffer:
    """A buffer that a pending op will produce; ``value`` once flushed."""
    __slots__ = ("shape", "dtype", "value", "node", "slot", "early", "__weakref__")

    def __init__(self, shape, dtype, node, slot):
        self.shape = tuple(shape)
        self.dtype = dtype
        self.value = None
        self.node = node
        self.slot = slot
        self.early = False  # computed ahead of a predicted host read

    @property
    def size(self):  # as a jax.Array's (asked rarely: not worked out for every op)
        return math.prod(self.shape)


class External(NamedTuple):
    """A recorded op's input that is an array given to the chain."""
    index: int  # its position among the chain's external inputs


class Produced(NamedTuple):
    """A recorded op's input that an earlier op of the chain produces."""
    node: int  # the producing op's position in the chain
    slot: int  # which of its outputs


class Number(NamedTuple):
    """A recorded op's input that is a Python number: one element of the
    chain's packed numbers (one array per kind), so a chain with a hundred
    scalars passes two arrays, not a hundred host-to-device transfers."""
    pack: int    # FLOATS or INTS
    index: int   # its position in that pack
    number: bool = True  # (three fields: never equal to a Produced ref in a cache key)


FLOATS, INTS = 0, 1
_ArrayImpl = ArrayImpl  # the concrete jax.Array type: an isinstance(x, jax.Array) check costs more
_PACK_DTYPES = (np.float64, np.int64)
_INT_RANGE = range(-2 ** 63, 2 ** 63)  # ints outside it stay separate inputs (JAX's own overflow error)

_new = tuple.__new__  # builds refs without NamedTuple's keyword-handling __new__ (every recorded input)


class _Node:
    __slots__ = ("fn", "refs", "outputs", "prefix", "urgent")

    def __init__(self, fn, refs, outputs, prefix, urgent=False):
        self.fn = fn
        self.refs = refs          # per input: an External or a Produced ref
        self.outputs = outputs    # weakrefs to the LazyBuffers it produces
        self.prefix = prefix      # structural hash of the pending program up to this node
        self.urgent = urgent      # read with every host read (a deferred check): in its first chain


class Stats:
    def __init__(self):
        self.hits = 0
        self.misses = 0
        self.compile_seconds = 0.0
        self.flushes = 0
        self.ops_fused = 0
        self.early_launches = 0

    def as_dict(self):
        return {"hits": self.hits, "misses": self.misses,
                "compile_seconds": round(self.compile_seconds, 4),
                "flushes": self.flushes, "ops_fused": self.ops_fused,
                "early_launches": self.early_launches}


stats = Stats()
_lock = threading.RLock()
_nodes: list = []
_external: list = []
_external_index: dict = {}   # id(array) -> index, for arrays only
_numbers = ([], [])          # the pending program's Python floats and ints (Number refs)
_cache: dict = {}
_read_points: set = set()    # prefix hashes of nodes whose result the host read


def pending_ops() -> int:
    return len(_nodes)


def _record(fn, inputs, out_buffers, urgent=False):
    """Record one op: ``fn(*inputs)`` producing buffers of ``out_buffers`` [(shape, dtype)].
    ``urgent``: its results are read with every host read (``checks``)."""
    global _guess
    with _lock:
        guess = _guess
        # A program that comes again (a loop's chain, a training step): the op
        # that followed this point last time is checked against this one
        # input by input, and its refs and prefix hash are reused.
        if guess is None or guess[0] is not fn or (refs := _replay(inputs, guess[1])) is None:
            last = _nodes[-1].prefix if _nodes else _origin
            refs = _refs(inputs)
            prefix = hash((last, id(fn), refs))  # as _prefix_after
            if len(_next) >= _MAX_NEXT:
                _next.clear()
            _next[last] = (fn, refs, prefix)
        else:
            prefix = guess[2]
        index = len(_nodes)
        if len(out_buffers) == 1:  # most ops
            shape, dtype = out_buffers[0]
            out = _lazy(LazyBuffer)
            out.shape = shape if type(shape) is tuple else tuple(shape)
            out.dtype, out.value, out.node, out.slot, out.early = dtype, None, index, 0, False
            outs, out_refs = [out], [_weakref(out)]
        else:
            outs = [LazyBuffer(shape, dtype, index, slot) for slot, (shape, dtype) in enumerate(out_buffers)]
            out_refs = [_weakref(o) for o in outs]
        node = _lazy(_Node)
        node.fn, node.refs, node.outputs, node.prefix, node.urgent = fn, refs, out_refs, prefix, urgent
        _nodes.append(node)
        _guess = _next.get(prefix)
        full = index + 1 >= MAX_PENDING_OPS
        if prefix in _read_points and not full:
            _launch_early(index)
    if full:
        flush("size limit")
    return outs


_lazy = object.__new__  # LazyBuffer and _Node without their __init__'s frame (every recorded op)
_weakref = weakref.ref


_next: dict = {}   # prefix hash -> (fn, refs, prefix after it): the op that followed there last time
_MAX_NEXT = 1 << 16


_guess = None      # _next's entry for the pending program's last op: what record expects next
                   # ((fn, refs, prefix): kernels read its fn, the executable to check a call against)
# The structural hash of an empty pending program: 0 after a flush; after a
# launch ahead of a predicted read, one of its own, so the op that follows
# the read (a step's backward) and the program's first op (the step's
# forward) are remembered apart.
_origin = 0


def _retarget():
    """Point ``_guess`` at the pending program's end again (after the pending
    ops changed other than by ``record``'s append, or ``_next`` was cleared)."""
    global _guess
    _guess = _next.get(_nodes[-1].prefix if _nodes else _origin)


def _refs(inputs):
    """The refs of a recorded op's inputs, interning its arrays and numbers."""
    refs = []
    for x in inputs:
        t = type(x)
        if t is LazyBuffer:
            if x.value is None:
                refs.append(_new(Produced, (x.node, x.slot)))
                continue
            x = x.value
        elif t is float or (t is int and x in _INT_RANGE):
            kind = INTS if t is int else FLOATS
            pack = _numbers[kind]
            refs.append(_new(Number, (kind, len(pack), True)))
            pack.append(x)
            continue
        # _intern, inline (every input of every op)
        i = _external_index.get(id(x))
        if i is None or _external[i] is not x:
            i = len(_external)
            if t is _ArrayImpl or isinstance(x, jax.Array):
                _external_index[id(x)] = i
            _external.append(x)
        refs.append(_new(External, (i,)))
    return tuple(refs)


def _replay(inputs, refs):
    """``refs`` if ``inputs`` are wired exactly as ``refs`` say (the same
    pending results, the same arrays, numbers of the same kinds in the same
    places), interning them as ``_refs`` would; else None, nothing changed."""
    if len(inputs) != len(refs):
        return None
    start = n = len(_external)
    done = 0
    for x, r in zip(inputs, refs):  # by the kind of input expected (checked against the input's)
        tr = type(r)
        if tr is Produced:
            if type(x) is LazyBuffer and x.value is None and r[0] == x.node and r[1] == x.slot:
                done += 1
                continue
            break
        t = type(x)
        if tr is Number:
            pack = _numbers[r[0]]
            if (t is float if r[0] == FLOATS else t is int and x in _INT_RANGE) and r[1] == len(pack):
                pack.append(x)
                done += 1
                continue
            break
        if t is LazyBuffer:  # an External: an array, or a computed result
            if x.value is None:
                break
            x = x.value
            t = type(x)
        elif t is float or (t is int and x in _INT_RANGE):
            break
        i = r[0]
        if i < n:
            if _external[i] is not x:
                break
        else:
            j = _external_index.get(id(x))
            if i > n or (j is not None and _external[j] is x):  # not where _refs would put it
                break
            if t is _ArrayImpl or isinstance(x, jax.Array):
                _external_index[id(x)] = i
            _external.append(x)
            n += 1
        done += 1
    else:
        return refs
    # a mismatch: undo what this call interned (the general path starts over)
    for k in range(start, n):
        if _external_index.get(id(_external[k])) == k:
            del _external_index[id(_external[k])]
    del _external[start:]
    for r in refs[:done]:
        if type(r) is Number:
            _numbers[r[0]].pop()
    return None


def _prefix_after(fn, refs):
    """The structural hash of the pending program once an op ``fn`` wired by
    ``refs`` is appended: what a host read's position is remembered by."""
    return hash((_nodes[-1].prefix if _nodes else _origin, id(fn), refs))


def _intern(x, items, index):
    """``External(position of x in items)``, appending x unless it is a jax.Array
    already there (``index``: id -> position, for arrays only)."""
    if isinstance(x, jax.Array):
        i = index.get(id(x))
        if i is not None and items[i] is x:
            return _new(External, (i,))
        index[id(x)] = len(items)
    items.append(x)
    return _new(External, (len(items) - 1,))


def resolve(buf):
    """The concrete array for ``buf`` (flushing the pending chain if needed)."""
    if type(buf) is not LazyBuffer:
        return buf
    if buf.early:  # read as predicted: start the ops recorded since, as a read would have
        buf.early = False
        flush("host read")
    if buf.value is None:
        flush("host read", first=buf)
    if buf.value is None:
        raise RuntimeError(_failed.get(buf, "tpu: a fused result was lost before it was computed"))
    return buf.value


def flush(reason="sync", first=None) -> None:
    """Run every pending op.  With ``first`` (a pending buffer the host is
    about to wait for), the ops it depends on run as one chain and the rest as
    a second chain launched right after it: the host gets the value when the
    first chain ends while the second (after a training step's loss read, the
    backward and the optimizer) runs on as the host records what comes next.
    Both cuts depend only on the recorded program, so each is cached."""
    global _origin
    with _lock:
        if not _nodes:  # (a host read after an early launch: the program starts over)
            if _origin:
                _origin = 0
                _retarget()
            return
        nodes, external, numbers = _take_pending()
        logs.fused_flush(len(nodes), reason)  # TORCH_TPU_LOGS=sync
        read = None
        if SPLIT_AT_HOST_READS and type(first) is LazyBuffer and first.value is None:
            _read_points.add(nodes[first.node].prefix)
            read = first.node
        computed = {}  # (node, slot) -> array: results an earlier chain hands a later one
        try:
            for chain in _plan(nodes, read, False).chains:
                _run(chain, nodes, external, numbers, computed, reason)
        except RuntimeError as e:
            _run_one_by_one(nodes, external, numbers, computed, str(e))
            raise


_failed = weakref.WeakKeyDictionary()  # LazyBuffer -> why its op could not run (after a chain failed)


def _run_one_by_one(nodes, external, numbers, computed, why):
    """After a chain failed: each pending op on its own, in order, so that
    every result that can be computed still is (no data lost with the failing
    op); the results of ops that fail, or that need a failed result, remember
    ``why`` for their host reads."""
    values = dict(computed)
    for i, node in enumerate(nodes):
        lazies = [ref() for ref in node.outputs]
        if all(lazy is not None and lazy.value is not None for lazy in lazies):  # its chain ran
            values.update(((i, slot), lazy.value) for slot, lazy in enumerate(lazies))
            continue
        try:
            args = [external[r.index] if type(r) is External else numbers[r.pack][r.index] if type(r) is Number
                    else values[(r.node, r.slot)] for r in node.refs]
            outs = node.fn(*args)
        except Exception:  # (KeyError: an input whose op failed)
            for ref in node.outputs:
                if (lazy := ref()) is not None and lazy.value is None:
                    _failed[lazy] = why
            continue
        for slot, (ref, value) in enumerate(zip(node.outputs, outs if isinstance(outs, (tuple, list)) else (outs,))):
            values[(i, slot)] = value
            if (lazy := ref()) is not None and lazy.value is None:
                lazy.value = value


# Split a host read's chain from the rest, and launch it ahead of a repeated
# read (TORCH_TPU_FUSED_SPLIT=0 turns both off: one chain, run at the read).
SPLIT_AT_HOST_READS = os.environ.get("TORCH_TPU_FUSED_SPLIT", "1") != "0"


def _take_pending():
    """The pending program ``(nodes, external inputs, (floats, ints))``, leaving none pending."""
    nodes, external, numbers = _nodes[:], _external[:], (_numbers[0][:], _numbers[1][:])
    _nodes.clear()
    _external.clear()
    _external_index.clear()
    _numbers[0].clear()
    _numbers[1].clear()
    global _origin
    _origin = 0
    _retarget()
    return nodes, external, numbers


def _launch_early(index):
    """Launch the ops node ``index`` needs (a predicted host read) and keep the
    other pending ops pending, rewired to the values just launched."""
    global _origin
    nodes, external, numbers = _take_pending()
    _origin = hash((nodes[index].prefix, "launched"))
    plan = _plan(nodes, index, True)
    computed = {}
    logs.fused_flush(len(plan.chains[0].group), "predicted host read")  # TORCH_TPU_LOGS=sync
    stats.early_launches += 1
    _run(plan.chains[0], nodes, external, numbers, computed, "predicted host read")
    for ref in nodes[index].outputs:
        lazy = ref()
        if lazy is not None:
            lazy.early = True
    renumbered = plan.renumbered
    for i in plan.rest:  # re-record the rest against the new values
        node = nodes[i]
        refs = tuple(_intern(external[r.index], _external, _external_index) if type(r) is External
                     else _renumber(r, numbers, _numbers) if type(r) is Number
                     else _new(Produced, (renumbered[r.node], r.slot)) if r.node in renumbered
                     else _intern(computed[(r.node, r.slot)], _external, _external_index) for r in node.refs)
        node.refs = refs
        node.prefix = _prefix_after(node.fn, refs)
        for ref in node.outputs:
            lazy = ref()
            if lazy is not None:
                lazy.node = len(_nodes)
        _nodes.append(node)
    _retarget()


def _renumber(ref, numbers, into):
    """``ref`` (a Number of ``numbers``) as a Number of ``into``, its value appended there."""
    pack = into[ref.pack]
    pack.append(numbers[ref.pack][ref.index])
    return _new(Number, (ref.pack, len(pack) - 1, True))


def _read_set(nodes, index):
    """The nodes a host read of node ``index`` waits for: those it depends on,
    itself included, and the pending checks with theirs."""
    return _ancestors(nodes, [index] + [i for i, n in enumerate(nodes) if n.urgent])


def _ancestors(nodes, roots):
    """Indices of the nodes that ``roots`` depend on, themselves included."""
    seen, stack = set(roots), list(roots)
    while stack:
        for r in nodes[stack.pop()].refs:
            if type(r) is Produced and r.node not in seen:
                seen.add(r.node)
                stack.append(r.node)
    return seen


class _Plan:
    """How a pending program runs: its chains (one, or a host read's chain and
    then the rest), and for a launch ahead of a predicted read, the nodes that
    stay pending.  Worked out once per program and reused when the same
    program comes again (the same ops wired the same way, checked op by op)."""
    __slots__ = ("sigs", "chains", "rest", "renumbered")


class _ChainPlan:
    """One chain of a plan: its nodes, their wiring in the chain's own
    numbering, where each chain input comes from, and its executables."""
    __slots__ = ("group", "chain", "sources", "number_sources", "all_numbers", "handed", "local",
                 "structure", "packs", "executables")


_plans: dict = {}   # (last prefix, ops, read node, early) -> _Plan
_MAX_PLANS = 4096


def _plan(nodes, read, early):
    """The plan for running ``nodes`` (``read``: the node a host read waits
    for, or None; ``early``: launch only its chain, the rest stays pending)."""
    key = (nodes[-1].prefix, len(nodes), read, early)
    sigs = [(n.fn, n.refs, n.urgent) for n in nodes]
    plan = _plans.get(key)
    if plan is not None and plan.sigs == sigs:
        return plan
    plan = _Plan()
    plan.sigs = sigs
    plan.rest, plan.renumbered = [], {}
    groups = [list(range(len(nodes)))]
    if read is not None:
        needed = _read_set(nodes, read)
        if early or len(needed) < len(nodes):
            plan.rest = [i for i in range(len(nodes)) if i not in needed]
            groups = [sorted(needed)] + ([plan.rest] if not early and plan.rest else [])
        if early:
            plan.renumbered = {i: k for k, i in enumerate(plan.rest)}
    plan.chains = []
    for g, group in enumerate(groups):
        later = groups[g + 1:] or ([plan.rest] if early else [])
        handed = {(r.node, r.slot) for nodes_after in later for i in nodes_after
                  for r in nodes[i].refs if type(r) is Produced}
        plan.chains.append(_chain_plan(nodes, group, handed))
    if len(_plans) >= _MAX_PLANS:
        _plans.clear()
    _plans[key] = plan
    return plan


def _chain_plan(nodes, group, handed):
    c = _ChainPlan()
    c.group, c.handed = group, handed
    c.local = local = {i: k for k, i in enumerate(group)}
    sources, source_index, number_sources = [], {}, ([], [])

    def local_ref(r):
        t = type(r)
        if t is Number:
            pack = number_sources[r.pack]
            pack.append(r.index)
            return _new(Number, (r.pack, len(pack) - 1, True))
        if t is Produced and r.node in local:
            return _new(Produced, (local[r.node], r.slot))
        source = r.index if t is External else (r.node, r.slot)  # an external input, or an earlier chain's result
        position = source_index.get(source)
        if position is None:
            position = source_index[source] = len(sources)
            sources.append(source)
        return _new(External, (position,))

    c.chain = [(nodes[i].fn, tuple(local_ref(r) for r in nodes[i].refs)) for i in group]
    c.sources, c.number_sources = sources, number_sources
    # the common case: the chain takes every pending number, in order
    c.all_numbers = all(ns == list(range(len(ns))) for ns in number_sources)
    c.packs = (None if not number_sources[FLOATS] else len(sources),
               None if not number_sources[INTS] else len(sources) + bool(number_sources[FLOATS]))
    c.structure = tuple((id(fn), refs) for fn, refs in c.chain)
    c.executables = {}
    return c


def _run(c, nodes, external, numbers, computed, reason):
    """Run chain plan ``c`` (compiling it for these outputs and inputs on first use)."""
    inputs = [external[s] if type(s) is int else computed[s] for s in c.sources]
    for values, wanted, dtype in zip(numbers, c.number_sources, _PACK_DTYPES):
        if wanted:
            inputs.append(np.array(values if c.all_numbers else [values[j] for j in wanted], dtype))
    live, lazies = [], []
    handed = c.handed
    for i in c.group:
        for slot, ref in enumerate(nodes[i].outputs):
            lazy = ref()
            if lazy is not None or (i, slot) in handed:
                live.append((i, slot))
                lazies.append(lazy)
    key = (tuple(live), tuple([(_ArrayImpl, (aval := x.aval).shape, aval.dtype) if type(x) is _ArrayImpl
                               else _kind(x) for x in inputs]))  # _kind, inline for device arrays
    compiled = c.executables.get(key)
    try:
        if compiled is None:  # (XLA refusing the chain is a failure of the chain too, not a JAX traceback)
            compiled = c.executables[key] = _compiled(c, nodes, key, inputs, reason)
        else:
            stats.hits += 1
        stats.flushes += 1
        stats.ops_fused += len(c.chain)
        results = (compiled(*inputs) if not _prof.torch_profiler._is_profiler_enabled
                   else _prof.run(f"fused chain ({len(c.chain)} ops)", compiled, inputs))
    except Exception as e:
        raise RuntimeError(f"tpu: a fused chain of {len(c.chain)} ops failed on the device: "
                           f"{str(e).strip().splitlines()[0] if str(e).strip() else e}") from None
    for (i, slot), lazy, value in zip(live, lazies, results):
        if lazy is not None:
            lazy.value = value
        if (i, slot) in handed:
            computed[(i, slot)] = value
    pending.note(results)


def _compiled(c, nodes, key, inputs, reason):
    """The executable of chain plan ``c`` for ``key`` (live outputs, input
    kinds): from the cache shared by all plans, else traced and compiled."""
    local = c.local
    live = tuple((local[i], s) for i, s in key[0])
    full_key = (c.structure, live, key[1])
    compiled = _cache.get(full_key)
    if compiled is not None:
        stats.hits += 1
        return compiled
    stats.misses += 1
    start = time.perf_counter()
    traced = jax.jit(_chain(c.chain, live, c.packs)).trace(*inputs)
    compiled = traced.lower().compile(runtime.compile_options(traced.jaxpr))  # cheaper for small exact chains
    _cache[full_key] = compiled
    seconds = time.perf_counter() - start
    stats.compile_seconds += seconds
    log.debug("fused chain of %d ops compiled in %.3fs (%s)", len(c.chain), seconds, reason)
    logs.fused_compile([nodes[i] for i in c.group], inputs, seconds, reason, stats.misses)  # TORCH_TPU_LOGS=recompiles
    return compiled


def _kind(x):
    shape = getattr(x, "shape", None)
    if shape is not None:  # jax or numpy array (dtype objects hash by value)
        return (type(x), tuple(shape), x.dtype)
    return (type(x),)


def _chain(nodes, live, packs):
    """The chain as one function of its external inputs; ``packs``: the
    positions of the packed floats and ints among them (or None)."""
    def run(*external):
        numbers = [None, None]
        for kind, position in enumerate(packs):
            if position is not None:  # each number as the weakly typed scalar JAX makes of a Python number
                pack = external[position]
                numbers[kind] = [_convert_element_type(pack[i], pack.dtype, weak_type=True)
                                 for i in range(pack.shape[0])]
        values = {}
        for i, (fn, refs) in enumerate(nodes):
            args = [external[r[0]] if type(r) is External else numbers[r[0]][r[1]] if type(r) is Number
                    else values[r] for r in refs]
            outs = runtime.nestable(fn)(*args)
            if not isinstance(outs, tuple):
                outs = (outs,)
            for slot, v in enumerate(outs):
                values[(i, slot)] = v
        return tuple(values[k] for k in live)
    return run


def clear_cache() -> None:
    with _lock:
        _cache.clear()
        _plans.clear()
        _next.clear()
        _read_points.clear()
        _retarget()


# ``record`` is the native helper's version of ``_record`` when it is built
# (native/recorder.cpp): a predicted op, wired as last time, is recorded in
# C++ (~2 us of Python an op); every other call is handed to ``_record``.
record = native.fused_recorder(globals(), _record) or _record
