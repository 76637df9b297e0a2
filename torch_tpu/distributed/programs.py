"""Collectives as XLA programs over a 1-D mesh with one device per rank.

Each rank passes its local array; the program is ``shard_map``'ed over the
group's mesh, so XLA runs the collective (Gloo between CPU processes, ICI/DCN
on TPU).  Every program checks that all ranks asked for the same collective
on the same shapes: a checked one (Plan) exchanges the signatures first (see
folded.py; a small one is that exchange and nothing else), a predicted one
(FastPlan, see stream.py) reduces a "missed the prediction" mark per rank
with its payload, in one collective.
"""
import concurrent.futures
import functools
import math
import time
import zlib

import jax
import jax.numpy as jnp
import numpy as np
from jax._src import core
from jax._src.array import ArrayImpl
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from . import folded

AXIS = "r"
SIG_DIMS = 6  # dims of the first input recorded in the signature (for errors)
SIG_LEN = 3 + SIG_DIMS


def _neutral_fill(dtype):
    # x + (-0.0) == x exactly for every float x (NaN, inf and -0.0 included),
    # so a psum where all but one rank contribute -0.0 is an exact broadcast.
    if jnp.issubdtype(dtype, jnp.floating) or jnp.issubdtype(dtype, jnp.complexfloating):
        return jnp.array(-0.0, dtype)
    return jnp.array(0, dtype)


def _as_summable(x):
    return x.astype(jnp.uint8) if x.dtype == jnp.bool_ else x


def _reduce(x, op, world):
    """All-reduce of the local block ``x`` with reduce op name ``op``."""
    if x.dtype == jnp.bool_:
        op = {"sum": "max", "avg": "max", "product": "min", "band": "min",
              "bor": "max", "bxor": "bxor"}.get(op, op)
        if op != "bxor":
            return _reduce(x.astype(jnp.uint8), op, world).astype(jnp.bool_)
    if op in ("sum", "avg"):
        y = jax.lax.psum(x, AXIS)
        if op == "avg":
            y = y // world if jnp.issubdtype(x.dtype, jnp.integer) else y / world
        return y.astype(x.dtype)
    if op == "max":
        return jax.lax.pmax(x, AXIS)
    if op == "min":
        return jax.lax.pmin(x, AXIS)
    # No XLA primitive for these: gather every block and fold locally.
    g = jax.lax.all_gather(x, AXIS)
    if op == "product":
        return jnp.prod(g, axis=0).astype(x.dtype)
    fold = {"band": jnp.bitwise_and, "bor": jnp.bitwise_or, "bxor": jnp.bitwise_xor}[op]
    return functools.reduce(fold, [g[i] for i in range(world)])


def _kernel(kind, static, world):
    """The per-device body of collective ``kind`` (static: hashable params)."""
    if kind == "all_reduce":
        op, scale = static
        def f(x):
            if scale is not None:  # PREMUL_SUM
                x = (x * scale).astype(x.dtype)
            return _reduce(x, op, world)
    elif kind == "broadcast":
        (root,) = static
        def f(x):
            me = jax.lax.axis_index(AXIS)
            y = _as_summable(x)
            y = jnp.where(me == root, y, _neutral_fill(y.dtype))
            return jax.lax.psum(y, AXIS).astype(x.dtype)
    elif kind == "all_gather":  # (k, ...) -> (world*k, ...)
        def f(x):
            return jax.lax.all_gather(x, AXIS, tiled=True)
    elif kind == "reduce_scatter":  # (world*k, ...) -> (k, ...)
        op, scale = static
        def f(x):
            if scale is not None:
                x = (x * scale).astype(x.dtype)
            if op in ("sum", "avg") and x.dtype != jnp.bool_:
                y = jax.lax.psum_scatter(x, AXIS, scatter_dimension=0, tiled=True)
                if op == "avg":
                    y = y // world if jnp.issubdtype(x.dtype, jnp.integer) else y / world
                return y.astype(x.dtype)
            k = x.shape[0] // world
            full = _reduce(x, op, world)
            return jax.lax.dynamic_slice_in_dim(full, jax.lax.axis_index(AXIS) * k, k, 0)
    elif kind == "scatter":  # root's (world*k, ...) -> (k, ...) on every rank
        (root,) = static
        def f(x):
            me = jax.lax.axis_index(AXIS)
            y = _as_summable(x)
            y = jnp.where(me == root, y, _neutral_fill(y.dtype))
            return jax.lax.psum_scatter(y, AXIS, scatter_dimension=0, tiled=True).astype(x.dtype)
    elif kind == "all_to_all":  # (world*k, ...) -> (world*k, ...)
        def f(x):
            return jax.lax.all_to_all(x, AXIS, 0, 0, tiled=True)
    else:
        raise ValueError(f"unknown collective {kind!r}")
    return f


class _Layout:
    """How a rank's local block becomes the global array a program takes:
    the sharding and aval, derived once per signature."""

    def __init__(self, devices, shape, dtype):
        world = len(devices)
        self.spec = NamedSharding(Mesh(np.array(devices, dtype=object), (AXIS,)), P(AXIS))
        self.dtype = jnp.dtype(dtype)
        local = tuple(shape) or (1,)  # a sharded global array needs a leading dim
        self.scalar = not shape  # (a 0-d block is passed reshaped to (1,))
        self.global_shape = (world * local[0],) + local[1:]
        # what make_array_from_single_device_arrays derives on every call, once
        self.aval = core.update_aval_with_sharding(
            core.ShapedArray(self.global_shape, self.dtype, weak_type=False), self.spec)
        # a wait for this payload polls before handing off (Launched.result)
        self.small = math.prod(local) * self.dtype.itemsize <= POLL_MAX_BYTES

    def assemble(self, x):
        """The global array whose block on this rank is ``x``."""
        if self.scalar:
            x = x.reshape(1)
        # jax.make_array_from_single_device_arrays without rebuilding the aval
        # and re-checking the dtype each call (the plan is keyed on both)
        # and without re-checking x's device and shape (the rank's own, the plan's)
        return ArrayImpl(self.aval, self.spec, [x], committed=True, _skip_checks=True)

    def launch(self, x):
        """Start the program on this rank's block ``x``: (local result, check
        output), both possibly still running."""
        out, sigs = self.program(self.assemble(x))
        return out._arrays[0], sigs._arrays[0]  # the one local shard (addressable_data(0), unchecked)


class Plan(_Layout):
    """One collective signature, built once and cached: the sharding and
    global shape the rank's block is assembled with, and the compiled program.

    The program starts with the fixed-size signature exchange of folded.py.
    A payload that fits in it is computed from the gathered blocks: one round
    trip.  A larger one runs the collective itself under ``lax.cond``, only
    when all signatures agree: mismatched shapes then fail cleanly on every
    rank instead of feeding incompatible buffers to the transport.
    """

    def __init__(self, kind, static, devices, shape, dtype, block, out_shape):
        super().__init__(devices, shape, dtype)
        world = len(devices)
        block = tuple(shape) if block is None else block
        size = folded.fold_bytes(world)
        self.folded = folded.nbytes(block, self.dtype) <= size
        kernel = _kernel(kind, static, world)
        header = signature(kind, static, shape, self.dtype)
        head = len(header) * header.itemsize
        small = self.folded

        def body(x):
            x = x.reshape(block)  # the reshapes live in the program, where they are free
            payload = folded.to_bytes(x) if small else jnp.zeros((0,), jnp.uint8)
            buf = jnp.concatenate([folded.to_bytes(jnp.asarray(header)), payload,
                                   jnp.zeros((size - payload.shape[0],), jnp.uint8)])
            gathered = jax.lax.all_gather(buf, AXIS)  # (world, head + size)
            sigs = folded.from_bytes(gathered[:, :head], header.shape, header.dtype)
            if small:
                blocks = folded.from_bytes(gathered[:, head:head + payload.shape[0]], block, x.dtype)
                y = folded.result(kind, static, blocks, jax.lax.axis_index(AXIS), world)
            else:
                out = jax.eval_shape(kernel, x)
                y = jax.lax.cond(jnp.all(sigs == sigs[0:1]), kernel,
                                 lambda x: jnp.zeros(out.shape, out.dtype), x)
            if out_shape is not None:
                y = y.reshape(out_shape)
            y = y.reshape(1) if y.ndim == 0 else y  # 0-d: the writer reshapes back
            # the cost-estimate padding rides after the signatures (see rows):
            # one output array fewer to create per call
            return y, jnp.concatenate([sigs.reshape(-1), _not_cheap(gathered).astype(sigs.dtype)])

        self.program = jax.jit(jax.shard_map(body, mesh=self.spec.mesh, in_specs=P(AXIS),
                                             out_specs=(P(AXIS), P(AXIS)),
                                             check_vma=False))



INLINE_FLOPS = 1000  # XLA:CPU runs a program estimated below this on the caller's thread


def _not_cheap(gathered):
    """A few thousand flops on data the collective produced, so XLA's cost
    estimate never marks the program cheap: a cheap program runs on the
    launching thread and blocks it until every peer joins (forever if one
    never does), while any other is dispatched to XLA's threads and the
    caller keeps the group timeout (Work.wait)."""
    head = gathered.reshape(-1)[:2 * INLINE_FLOPS].astype(jnp.int32)
    return jnp.sum(head * head, keepdims=True)


def _cost_pad(gone):
    """_not_cheap for the predicted programs: an iota the size of the inline
    threshold, scaled by what the collective produced (the missed flags) so
    XLA cannot fold it away."""
    return jnp.sum(jnp.arange(2 * INLINE_FLOPS, dtype=jnp.int32) * (jnp.sum(gone) + 1), keepdims=True)


@functools.lru_cache(maxsize=1024)
def plan(kind, static, devices, shape, dtype, block=None, out_shape=None):
    counts["plans"] += 1
    return Plan(kind, static, devices, shape, dtype, block, out_shape)


FAST_OPS = ("sum", "avg", "max", "min")
# Up to this payload the marks ride in the payload's buffer (one round trip,
# two copies of the payload: in and out).  Above it a sum of floats takes no
# copy and no second round (see FastPlan's poison); any other large one gets
# its marks their own tiny reduce.  (Measured between 2 CPU processes: joint
# and separate cost the same at 256 KB; from 1 MB on the copies cost more
# than the second round: +0.3 ms at 1 MB, +1.3 ms at 4 MB; the second round
# itself costs 0.1 to 0.6 ms.)
JOINT_BYTES = 1 << 18


def fast_capable(kind, static, block, out_shape):
    """Whether a call has a predicted form (FastPlan, FastBlocks)."""
    if kind == "all_reduce":
        return static[0] in FAST_OPS and block is None and out_shape is None
    return kind == "all_gather" or (kind == "reduce_scatter" and static[0] in ("sum", "avg"))


def fast(sig, devices):
    """The predicted program of call signature ``sig`` (stream.py's)."""
    kind, static, shape, dtype, block, out_shape = sig
    if kind == "all_reduce":
        return fast_plan(static, devices, shape, dtype)
    return fast_blocks(kind, static, devices, shape, dtype, block, out_shape)


class FastPlan(_Layout):
    """An all_reduce of a signature every rank predicted (see stream.py) as
    ONE collective.  A small payload (up to folded.fold_bytes, as the
    checked program's) is all-gathered with each rank's missed flag after it
    and reduced on every rank in rank order: the checked program's
    arithmetic, and on a latency-bound transport an all-gather is one phase
    where an all-reduce is two (64 KB between 2 CPU processes: 0.8 against
    1.0 ms).  A larger one: the payload with ``world`` marker slots appended.  Rank
    r's slot says whether rank r called something else than predicted (its
    payload is then zeros).  Hitting and missing ranks run the same
    executable, the mark being an input: whatever the ranks called, their
    collectives have the same shapes, so a wrong guess costs a wasted round,
    never a transport mismatch.  (The marks ride in the payload's buffer: a
    separate or tuple reduce is a second collective, and with a constant
    mark XLA would drop it.)  The second output: every rank's missed flag
    (int32, one per rank), then the cost padding.

    A large sum of floats (``poisoned``) carries no marks at all: a rank that
    missed sends zeros with a NaN first (``missed_payload``), and NaN plus
    anything is NaN, so a result whose first element is a number proves
    that no rank missed.  Only a NaN there (a miss, or the callers' own
    NaN or inf - inf) makes the ranks reduce their marks, in a second
    collective under ``lax.cond``: every rank sees the same first element
    (an all-reduce's result is the same on every rank), so all of them take
    the branch or none.  The payload is then neither copied (as a joint
    buffer would be) nor followed by a second round."""

    def __init__(self, static, devices, shape, dtype):
        super().__init__(devices, shape, dtype)
        world = len(devices)
        op, scale = static
        self.shape = tuple(shape)
        local = self.shape or (1,)
        n = int(np.prod(local))
        joint = n * self.dtype.itemsize <= JOINT_BYTES
        gathers = n * self.dtype.itemsize <= folded.fold_bytes(world)
        self.poisoned = poisoned = (not joint and n > 0 and op in ("sum", "avg")
                                    and jnp.issubdtype(self.dtype, jnp.inexact))

        def body(x, flag):
            if gathers:  # every rank's payload and flag, reduced on each rank
                g = jax.lax.all_gather(jnp.concatenate([x.reshape(-1), flag.astype(x.dtype)]), AXIS)
                out = folded.result("all_reduce", static, g[:, :n].reshape((world,) + local), None, world)
                gone = (g[:, n] != 0).astype(jnp.int32)
                return out.reshape(local), jnp.concatenate([gone, _cost_pad(gone)])
            dt = x.dtype
            flat = x.reshape(-1)
            red = op
            if dt == jnp.bool_:  # logical or / and, as _reduce
                flat, red = flat.astype(jnp.uint8), ("min" if op == "min" else "max")
            if scale is not None:  # PREMUL_SUM
                flat = (flat * scale).astype(flat.dtype)
            mine = jnp.arange(world) == jax.lax.axis_index(AXIS)
            # min: the others' slots hold 1 and mine 1 - flag; else 0 and flag
            marks = jnp.where(mine, 1 - flag, 1) if red == "min" else jnp.where(mine, flag, 0)
            reduce = jax.lax.psum if red in ("sum", "avg") else \
                jax.lax.pmax if red == "max" else jax.lax.pmin
            if joint:
                y = reduce(jnp.concatenate([flat, marks.astype(flat.dtype)]), AXIS)
                out, marks = y[:n], y[n:]
            elif poisoned:  # the marks' round only when the result starts with a NaN
                out = reduce(flat, AXIS)
                marks = jax.lax.cond(jnp.isnan(out[0]),
                                     lambda m: reduce(m.astype(jnp.int32), AXIS),
                                     lambda m: jnp.zeros(m.shape, jnp.int32), marks)
            else:  # copying a large payload costs more than a second, tiny round
                out, marks = reduce(flat, AXIS), reduce(marks.astype(jnp.int32), AXIS)
            if red == "avg":
                out = out // world if jnp.issubdtype(dt, jnp.integer) else out / world
            gone = ((marks == 0) if red == "min" else (marks != 0)).astype(jnp.int32)
            return out.astype(dt).reshape(local), jnp.concatenate([gone, _cost_pad(gone)])

        self.program = jax.jit(jax.shard_map(body, mesh=self.spec.mesh, in_specs=(P(AXIS), P(AXIS)),
                                             out_specs=(P(AXIS), P(AXIS)), check_vma=False))
        self._marks = {}

    def mark(self, x, missed):
        """The global mark input, built once per value (on x's device: a
        process drives one device of the mesh, the same each call)."""
        m = self._marks.get(missed)
        if m is None:
            local = jax.device_put(np.array([1 if missed else 0], np.int32), next(iter(x.devices())))
            aval = core.update_aval_with_sharding(
                core.ShapedArray((len(self.spec.mesh.devices),), np.int32, weak_type=False), self.spec)
            m = self._marks[missed] = ArrayImpl(aval, self.spec, [local], committed=True)
        return m

    in_store = False  # (FastBlocks' reduce_scatter of floats: its program takes no marks)

    def launch(self, x, missed=False):
        if self.in_store:  # (a miss is in its payload and the store)
            out, check = self.program(self.assemble(x))
        else:
            m = self._marks.get(missed)  # (built once per value: mark)
            out, check = self.program(self.assemble(x), self.mark(x, missed) if m is None else m)
        return out._arrays[0], check._arrays[0]

    def missed(self, check, asked=None):
        """The ranks that called something else, from the check output."""
        return missed_ranks(check)

    def missed_payload(self, device):
        """What a rank that called something else sends: zeros (poisoned:
        with a NaN first, the mark itself)."""
        zeros = np.zeros(self.shape, self.dtype)
        if self.poisoned:
            zeros.reshape(-1)[0] = np.nan
        return jax.device_put(zeros, device)


@functools.lru_cache(maxsize=1024)
def fast_plan(static, devices, shape, dtype):
    counts["plans"] += 1
    return FastPlan(static, devices, shape, dtype)


class FastBlocks(_Layout):
    """An all_gather or reduce_scatter every rank predicted (see stream.py):
    the checked program's collective without its signature exchange (a
    fixed-size gather of at least 64 KB a rank), its check the ranks' missed
    marks as FastPlan's.  A gather of floats carries them in the payload, as
    FastPlan's poison: a rank that missed sends zeros with a NaN first, and
    every rank sees every block, so only a NaN first in some block (a miss,
    or the callers' own NaN) makes the ranks reduce their marks, under
    ``lax.cond``.

    A reduce_scatter of floats (sum, avg: ``in_store``) is its payload's
    reduce-scatter alone, with no marks in the program at all: a rank that
    missed sends zeros with a NaN first in EVERY rank's row, so every rank's
    result starts with a NaN, and it has said so in the group's c10d store
    before launching (stream.py).  Each rank sees only its own chunk, so a
    NaN there cannot decide a collective under a cond alike on every rank
    (the callers' own NaN may start one chunk and not another); instead the
    check output is "my chunk starts with a NaN", and only then does the
    rank look in the store for who missed (``missed``): every rank that did
    wrote it before its program started, so before this one finished.  Any
    other call reduces the marks in a second, tiny collective."""

    def __init__(self, kind, static, devices, shape, dtype, block, out_shape):
        super().__init__(devices, shape, dtype)
        world = len(devices)
        self.shape = tuple(shape)
        kernel = _kernel(kind, static, world)
        block = tuple(shape) if block is None else tuple(block)
        n = int(np.prod(self.shape or (1,)))
        inexact = n > 0 and jnp.issubdtype(self.dtype, jnp.inexact)
        self.poisoned = poisoned = kind == "all_gather" and inexact
        self.in_store = in_store = kind == "reduce_scatter" and inexact
        self.rows = block[0] if in_store else 1  # the missed payload's NaNs: one a row

        def body(x, flag=None):
            y = kernel(x.reshape(block))
            if in_store:  # no marks, only whether my chunk starts with a NaN (see above)
                gone = jnp.isnan(y.reshape(-1)[0]).astype(jnp.int32).reshape(1)
            else:
                marks = jnp.where(jnp.arange(world) == jax.lax.axis_index(AXIS), flag, 0).astype(jnp.int32)
                if poisoned:  # every rank's block, first element: the same on every rank
                    firsts = y.reshape(world, -1)[:, 0]
                    marks = jax.lax.cond(jnp.any(jnp.isnan(firsts)), lambda m: jax.lax.psum(m, AXIS),
                                         lambda m: jnp.zeros(m.shape, jnp.int32), marks)
                else:
                    marks = jax.lax.psum(marks, AXIS)
                gone = (marks != 0).astype(jnp.int32)
            pad = _cost_pad(gone)
            if out_shape is not None:
                y = y.reshape(out_shape)
            y = y.reshape(1) if y.ndim == 0 else y
            return y, jnp.concatenate([gone, pad])

        # (in_store: the payload is the only input, one argument fewer to pass per call)
        self.program = jax.jit(jax.shard_map(body, mesh=self.spec.mesh,
                                             in_specs=P(AXIS) if in_store else (P(AXIS), P(AXIS)),
                                             out_specs=(P(AXIS), P(AXIS)), check_vma=False))
        self._marks = {}

    mark = FastPlan.mark
    launch = FastPlan.launch

    def missed_payload(self, device):
        """Zeros, with a NaN first in each rank's row (poisoned, in_store)."""
        zeros = np.zeros(self.shape, self.dtype)
        if self.poisoned or self.in_store:
            zeros.reshape(self.rows, -1)[:, 0] = np.nan
        return jax.device_put(zeros, device)

    def missed(self, check, asked):
        """The ranks that called something else, from the check output;
        ``asked(rank)``: whether the store says that rank missed."""
        if not self.in_store:
            return missed_ranks(check)
        if not np.asarray(check)[0]:  # a number first: no rank missed
            return []
        return [r for r in range(len(self.spec.mesh.devices)) if asked(r)]


@functools.lru_cache(maxsize=1024)
def fast_blocks(kind, static, devices, shape, dtype, block, out_shape):
    counts["plans"] += 1
    return FastBlocks(kind, static, devices, shape, dtype, block, out_shape)


def missed_ranks(check):
    """The ranks a FastPlan's check output says called something else."""
    return [i for i, m in enumerate(np.asarray(check)[:-1]) if m]


def signature(kind, static, shape, dtype):
    key = repr((kind, static, tuple(shape), str(dtype))).encode()
    dims = list(shape)[:SIG_DIMS] + [-1] * (SIG_DIMS - min(len(shape), SIG_DIMS))
    return np.array([zlib.crc32(key), len(shape), _dtype_code(dtype)] + dims, np.int64)


_DTYPES = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16",
           "float32", "float64", "complex64", "complex128", "uint16", "uint32", "uint64"]


def _dtype_code(dtype):
    name = str(jnp.dtype(dtype))
    return _DTYPES.index(name) if name in _DTYPES else len(_DTYPES)


def describe(sig_row):
    ndim = int(sig_row[1])
    dims = [int(d) for d in sig_row[3:3 + min(ndim, SIG_DIMS)]]
    code = int(sig_row[2])
    dtype = _DTYPES[code] if code < len(_DTYPES) else "?"
    return f"shape {tuple(dims)}{'...' if ndim > SIG_DIMS else ''} {dtype}"


# deterministic: tests count them, not time them ("waits": Launched.result calls;
# "polled": waits of a small collective that found it unfinished and polled it;
# "handoffs": waits that handed it to the waiter thread)
counts = {"plans": 0, "launches": 0, "fast": 0, "waits": 0, "polled": 0, "handoffs": 0}


def rows(sigs):
    """Every rank's signature, one row each, from a program's second output."""
    return np.asarray(sigs)[:-1].reshape(-1, SIG_LEN)  # the last element: _not_cheap's


def agrees(sigs):
    r = rows(sigs)
    return bool((r == r[0]).all())


def mismatch_of_signatures(sigs):
    """A checked program's verdict: None if every rank's signature agrees."""
    if agrees(sigs):
        return None
    return "; ".join(f"rank {i}: {describe(r)}" for i, r in enumerate(rows(sigs)))


_waiter = None

# One item per Launched given up on, in any stream: a stream looks through its
# running collectives for one only when this grew (stream.check_timeouts).
GIVEN_UP = []


class Launched:
    """A launched collective: ``result(timeout)`` gives (local result, every
    rank's signature) once the program is done, like a concurrent Future.

    The program runs on XLA's threads (see _not_cheap), so the caller never
    blocks in the launch.  A wait that finds it unfinished polls it briefly if
    it is small (see _poll), then hands the blocking wait to one waiter thread
    and waits on that with the timeout: a missing peer then costs the group
    timeout, not a hang.
    """
    __slots__ = ("value", "_waited", "mismatch", "_timed_out", "predicted", "checked", "small")

    def __init__(self, value, mismatch=None, predicted=False, checked=False, small=False):
        self.value = value
        # a small collective's wait polls it before handing it off (see _poll)
        self.small = small
        self._waited = None
        # mismatch(check output) -> None, or what the ranks disagreed on
        self.mismatch = mismatch or mismatch_of_signatures
        self._timed_out = False
        # a FastPlan every rank launched as predicted: no transport mismatch
        # possible, so its work need not wait for it (work.py)
        self.predicted = predicted
        # a checked program (its payload's collective runs only when every
        # rank agrees): no transport mismatch possible either.  (Not a missed
        # prediction's program: its result has the predicted call's shape.)
        self.checked = checked

    @property
    def timed_out(self):
        """Given up on by a wait (its stream stops predicting: stream.py)."""
        return self._timed_out

    @timed_out.setter
    def timed_out(self, value):
        if value and not self._timed_out:
            GIVEN_UP.append(None)  # (list.append is atomic: counted from any thread)
        self._timed_out = value

    def done(self):
        for a in self.value:
            if not a.is_ready():
                return False
        return True

    def result(self, timeout=None):
        # done() first, even with a wait handed off already: the waiter thread
        # itself asks (a work completing there) while that wait is queued
        # behind it, and must not wait for its own queue (stream.py's settle
        # hands off a wait for a collective whose future completes there)
        counts["waits"] += 1
        if self.done():
            return self.value
        if self._waited is None and self.small:
            counts["polled"] += 1
            start = time.monotonic()
            if _poll(self.done, _POLL_S if timeout is None else min(timeout, _POLL_S)):
                return self.value
            timeout = None if timeout is None else max(0.0, timeout - (time.monotonic() - start))
        if self._waited is None:
            counts["handoffs"] += 1
            self._waited = _pool().submit(jax.block_until_ready, self.value)
        self._waited.result(timeout)
        return self.value


# A small collective's wait first looks at it every 50 us for up to 2 ms,
# sleeping between looks, on the waiting thread, and hands the blocking wait
# off only if it is not done by then: the handoff's thread switches were
# ~0.1-0.3 ms of a waited 4-256 KB collective here (a metric all_reduce read
# with .item(); benchmarks/allreduce_bandwidth.py's "each waited").  Larger ones
# go straight to the handoff: polling while a 1 MB reduce_scatter ran made it
# finish later on this 2-core machine (2.0-3.2 -> 3.7-4.7 ms; why, not found yet).
POLL_MAX_BYTES = 256 << 10
_POLL_S = 2e-3
_PAUSE_S = 5e-5


def _poll(ready, seconds):
    """Whether ``ready()`` within ``seconds``, looked at every 50 us (sleeping between)."""
    deadline = time.monotonic() + seconds
    while not ready():
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(_PAUSE_S, left))
    return True


def _pool():
    global _waiter
    if _waiter is None:
        _waiter = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="tpu_dist")
    return _waiter


def _ready_then(values, fn):
    try:
        jax.block_until_ready(values)
    except Exception:  # noqa: BLE001 -- a failed program's error surfaces in fn's wait
        pass
    fn()


def when_done(launched, fn):
    """Call ``fn()`` on the waiter thread once every ``Launched`` in
    ``launched`` is done (a work's future completes there, so whoever holds
    it, like DDP's reducer, keeps going meanwhile)."""
    _pool().submit(_ready_then, [one.value for one in launched], fn)


def submit(kind, static, devices, x, block=None, out_shape=None):
    """Launch collective ``kind`` on this rank's block ``x`` as a checked
    program (every rank's signature exchanged first); returns a ``Launched``
    (a Future of (local result, every rank's signature)).  stream.submit
    chooses between this and the one-collective FastPlan.

    ``block``: the shape the kernel sees ``x`` as; ``out_shape``: the local
    result's shape (both reshapes happen inside the program).
    """
    p = plan(kind, static, devices, tuple(x.shape), x.dtype,
             None if block is None else tuple(block), None if out_shape is None else tuple(out_shape))
    counts["launches"] += 1
    return Launched(p.launch(x), checked=True, small=p.small)
