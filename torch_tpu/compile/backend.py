"""The TorchDynamo backend ``"tpu"``: Dynamo -> AOTAutograd (forward and
backward ATen graphs) -> one JAX function per graph -> one XLA executable.

A graph whose ops the lowering does not know runs through the eager tpu
kernels instead, with a warning naming the op.  Executables are cached in
memory per input signature and on disk by JAX's persistent compilation cache.
"""
import contextlib
import dataclasses
import functools
import itertools
import logging
import math
import threading
import time
import warnings
from typing import NamedTuple

import jax
import numpy as np
import torch
from torch._dynamo.backends.common import aot_autograd
from torch._functorch.aot_autograd import make_boxed_func

from .. import dtypes, logs, precision
from ..device import rng
from ..eager import access, fusion, modes
from ..eager.launch import launch
from ..ops import registry, signature_match
from ..storage import buffers, transfer, views
from . import collectives, lowering, rewrites, options as compiler_options
from .host import HostPart

log = logging.getLogger("torch_tpu.compile")


class Stats:
    def __init__(self):
        self.graphs = 0
        self.compiles = 0
        self.compile_seconds = 0.0
        self.eager_fallbacks = 0

    def as_dict(self):
        return {"graphs": self.graphs, "compiles": self.compiles,
                "compile_seconds": round(self.compile_seconds, 4),
                "eager_fallbacks": self.eager_fallbacks}


stats = Stats()


class CompiledGraph:
    """Runs one ATen graph as XLA executables, one per input signature.

    Inputs enter as the storages' own buffers; views of them are read inside
    the executable.  Outputs leave in the layout their tensors' storages use;
    outputs that are inputs or views of inputs or of other outputs (weights a
    Linear saves for backward, say) are made on the host as aliases, as eager
    would; new values of mutated inputs go straight into those inputs'
    storages.  So a call costs one executable launch plus tensor bookkeeping.
    """

    def __init__(self, gm, name, donate_mutated=False, donate_when_safe=False, defer=False):
        # donate_mutated: hand the buffers of the inputs the graph rewrites to
        # the executable (a training step updating parameters in place);
        # donate_when_safe: the same, on the calls where nothing else holds
        # those buffers (checked per call: an optimizer step's parameters and
        # state), else through a second, non-donating executable; defer: record
        # a training graph into the fused program instead of running it (below)
        self.donate_mutated = donate_mutated
        rewrites.inline_dense_hops(gm)
        rewrites.masked_sums(gm)
        self.gm = gm
        self.name = name
        outputs = next(n for n in gm.graph.nodes if n.op == "output").args[0]
        outputs = list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]
        self.host_views = _host_views(gm, outputs)
        self.host = HostPart(gm)
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        # CPU inputs only host nodes read never cross to the device
        self.host_inputs = {i for i, n in enumerate(placeholders) if n in self.host.nodes}
        self.host_outputs = {i: n for i, n in enumerate(outputs) if n in self.host.nodes}
        self.fn = lowering.lower(gm, skip_outputs={*self.host_views, *self.host_outputs},
                                 host=self.host if self.host else None)
        self.mutated = self.fn.mutated_inputs
        self.executables = {}
        self.donate_when_safe = donate_when_safe and bool(self.mutated) and not donate_mutated
        self.donating = {}   # signature -> the executable that donates the rewritten inputs' buffers
        self.donatable = {}  # signature -> its _Donation
        self.last_donation = (None, None)  # (signature, its _Donation): found without hashing a repeated one
        self.lock = threading.Lock()
        self.xla_options = compiler_options.current()
        vals = [n.meta.get("val") if isinstance(n, torch.fx.Node) else n for n in outputs]
        self.out_plans = [_OutputPlan(v) for v in vals]
        # Sizes a dynamic-shape forward hands its backward (SymInt outputs): plain
        # Python numbers while tracing, fixed per signature, so kept on the host.
        self.scalar_outputs = {} if any(isinstance(v, (int, float, torch.SymInt, torch.SymFloat))
                                        for v in vals) else None
        # A training graph (forward or backward: no mutated inputs, no host
        # part, static shapes) is recorded as one op of the fused program
        # instead of run (see _record): it runs when a value is read, with
        # what else is pending, so a backward recorded after its forward runs
        # in one executable with it and the saved tensors never leave it.
        self.deferrable = (defer and name in ("forward", "backward") and not self.mutated and not self.host
                           and self.scalar_outputs is None and not self.xla_options
                           and all(p.static or not isinstance(p.val, torch.Tensor) or i in self.host_views
                                   for i, p in enumerate(self.out_plans)))
        self.recorded = {}  # signature -> _Recorded
        self.made = None  # how outputs become tensors, once known: see _made
        self.input_plan = None  # (the last call's signature, its matcher or None): see _input_matcher
        self.uses_rng = any(n.op == "call_function" and registry.graph_form(n.target) is not None
                            and registry.graph_form(n.target).opts.rng
                            for sub in gm.modules() if isinstance(sub, torch.fx.GraphModule)  # cond branches too
                            for n in sub.graph.nodes)

    def __call__(self, args):
        defer = self.deferrable and modes._mode is not modes.EagerMode.DEBUG
        if not defer and fusion.pending_ops():
            # recorded work (a deferred training graph) runs first, as one
            # program; a flush, not a host read: no read point is learnt
            fusion.flush("compiled graph")
        plan = self.input_plan  # the last call's signature and its matcher
        arrays = plan[1].match(args, defer) if plan is not None and plan[1] is not None else None
        matched = arrays is not None and plan[0][-1] is precision.current
        if matched:
            signature, offsets = plan[0], ()
        else:
            arrays, signature, offsets = [], [], []
            for i, a in enumerate(args):
                if i in self.host_inputs:
                    signature.append(_ON_HOST)
                elif isinstance(a, torch.Tensor):
                    arrays.append(_input_buffer(a, signature, offsets, defer))
                else:
                    signature.append(a)
            signature.append(precision.current)  # torch.tpu.precision is traced into the executable
            signature = tuple(signature)
            if plan is None or plan[0] != signature:
                self.input_plan = (signature, None if offsets else _input_matcher(signature, args))
        if defer:
            return self._record(signature, arrays + offsets if offsets else arrays, args)
        donate = None  # the argument positions this call donates (None: the default executable)
        plan = self._donation(signature, arrays) if self.donate_when_safe else None
        if plan is not None and plan.may(arrays, args):
            donate, exe = plan.positions, plan.exe
        else:
            exe = self.executables.get(signature)
            if exe is _ON_EAGER_KERNELS:
                return self._run_eagerly(args)
        # the host inputs as they were, in case the graph must run eagerly after all
        before = [args[i].clone() for i in self.host.input_positions] if exe is None and self.host else None
        host_values = None
        if self.host:  # after the inputs are read: it updates host-only inputs in place
            host_values, packs = self.host.run(args)
            arrays.extend(packs)
        if offsets:  # last: the views' run-time storage offsets (see program)
            arrays.extend(offsets)
        if exe is None:
            with self.lock:
                try:
                    exe = (self.executables.get(signature) or self._compile(signature, arrays) if donate is None
                           else self.donating.get(signature) or self._compile(signature, arrays, donate))
                    if donate is not None:
                        plan.exe = exe
                except Exception as e:  # a lowering bug must not take the program down
                    return self._fall_back(signature, args, before, e)
        material = rng.next_key_material() if self.uses_rng else _NO_RNG
        outputs, new_values = launch(f"compiled {self.name} graph", exe, (material, *arrays))
        if self.mutated:
            targets = [args[i] for i in self.mutated]
            if plan is not None and plan.swaps is None:  # worked out once per signature
                plan.swaps = _swaps(targets, new_values)
                plan.all_swap = all(plan.swaps)
            if matched and plan is not None and plan.all_swap:
                # the matcher saw each storage hold its buffer, and no lazy conj/neg bit (a dispatch key)
                for t, value in zip(targets, new_values):
                    t.untyped_storage()._tpu_buf = value
            else:
                _write_inputs(targets, new_values, plan.swaps if plan is not None else ())
        return self._tensors(signature, args, outputs, host_values)

    def _record(self, signature, arrays, args):
        """Record this call into the fused program (run when a value is read):
        its outputs are pending buffers, wrapped as tensors like results."""
        recorded = self.recorded.get(signature)
        if recorded is None:
            if self.executables.get(signature) is _ON_EAGER_KERNELS:
                return self._run_eagerly(args)
            try:
                recorded = self.recorded[signature] = _Recorded(self, signature, arrays)
            except Exception as e:  # a lowering bug must not take the program down
                return self._fall_back(signature, args, None, e)
        material = rng.next_key_material() if self.uses_rng else _NO_RNG
        outputs = [None] * len(self.out_plans)
        for i, lazy in zip(recorded.kept, fusion.record(recorded.fn, (material, *arrays), recorded.out_buffers)):
            outputs[i] = lazy
        return self._tensors(signature, args, outputs, None)

    def _tensors(self, signature, args, outputs, host_values):
        """The graph's output tensors from the executable's ``outputs`` (None
        where made on the host) and the host part's values."""
        view_bases = {i: args[v.input] for i, v in self.host_views.items() if v.input is not None}
        args.clear()  # boxed calling convention: let inputs die early
        made = self.made
        if made is not None:  # every output the executable makes wrapped at once
            at, wrap, rest = made
            tensors = [None] * len(self.out_plans)
            for i, t in zip(at, wrap([outputs[i] for i in at])):
                tensors[i] = t
            for i in rest:
                tensors[i] = self.out_plans[i](outputs[i])
            for i, node in self.host_outputs.items():
                tensors[i] = host_values[node]
        else:
            tensors = [None if i in self.host_views else
                       host_values[self.host_outputs[i]] if i in self.host_outputs else plan(r)
                       for i, (r, plan) in enumerate(zip(outputs, self.out_plans))]
            self.made = self._made()
        for i, view in self.host_views.items():
            tensors[i] = view(view_bases[i] if view.input is not None else tensors[view.output])
        if self.scalar_outputs is not None:
            for i, value in self.scalar_outputs[signature].items():
                tensors[i] = value
        return tensors

    def _made(self):
        """``(positions, buffers.OutputTensors, other positions)`` of the outputs
        the executable makes, once their plans know their tensors (after a
        first call): the static tpu tensors, wrapped together, and the rest."""
        own = [i for i in range(len(self.out_plans)) if i not in self.host_views and i not in self.host_outputs]
        at = [i for i in own if self.out_plans[i].meta is not None]
        if any(self.out_plans[i].static and self.out_plans[i].meta is None for i in own):
            return None  # (a first call that made no such tensor: not known yet)
        return at, buffers.OutputTensors([self.out_plans[i].meta for i in at]), [i for i in own if i not in at]

    def _fall_back(self, signature, args, host_inputs, error):
        """Run this signature's calls on the eager kernels from now on (with
        the host inputs restored: the eager graph updates them itself)."""
        stats.eager_fallbacks += 1
        warnings.warn(f"torch_tpu: torch.compile: building the XLA executable of this {self.name} graph "
                      f"failed ({type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}); "
                      "it runs through the eager tpu kernels instead", stacklevel=3)
        if host_inputs is not None:
            for i, value in zip(self.host.input_positions, host_inputs):
                args[i].copy_(value)
        self.executables[signature] = _ON_EAGER_KERNELS
        if self.donate_when_safe:
            self.donatable[signature] = _Donation((), ())  # never the donating executable either
            self.last_donation = (None, None)
        return self._run_eagerly(args)

    def _run_eagerly(self, args):
        outputs = self.gm(*args)
        args.clear()
        return list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]

    def program(self, key):
        """The JAX function the executable for ``key`` (the inputs' signature
        entries, then the matmul precision) runs, called as (rng key material,
        *input arrays) -> (outputs, new values of mutated inputs), and the dict
        where tracing it leaves the outputs that are sizes computed from static
        sizes (the TPU lowering check lowers it too)."""
        signature, matmul_precision = key[:-1], key[-1]
        fn = self.fn
        readers = [views.reader(e.spec) if type(e) is TpuInput else None for e in signature]
        # views that read their storage offset at run time: the offsets come last
        n_offsets = sum(type(e) is TpuInput and e.spec.offset is None for e in signature)
        layouts = [plan.layout for plan in self.out_plans]
        scalars = {}

        def with_statics(material, *arrays_):
            if n_offsets:
                arrays_, offsets = arrays_[:-n_offsets], iter(arrays_[-n_offsets:])
            it, full = iter(arrays_), []
            for i, e in enumerate(signature):
                if not _is_tensor_entry(e):
                    full.append(e)
                elif readers[i] is None:  # a CPU input
                    full.append(next(it))
                elif e.spec.offset is None:
                    full.append(readers[i](next(it), next(offsets)))
                else:
                    full.append(readers[i](next(it)))
            with precision.tracing(matmul_precision):
                outputs, new_values = fn(material, *full, *it)  # the rest: host values
            outputs = [views.to_storage_layout(o, lay) if lay is not None and o is not None else o
                       for o, lay in zip(outputs, layouts)]
            for i, o in enumerate(outputs):
                if isinstance(o, (int, float)):  # a size computed from static sizes
                    scalars[i] = o
                    outputs[i] = None
            return outputs, new_values
        return with_statics, scalars

    def _donation(self, signature, arrays):
        """The donation plan of calls with ``signature``, worked out on its first call."""
        last, plan = self.last_donation
        if signature is last:  # (the input matcher hands back the same tuple: an optimizer's is ~100 long)
            return plan
        plan = self.donatable.get(signature)
        if plan is None:
            positions = self._donated(signature[:-1], arrays)
            inputs = [i for i, e in enumerate(signature[:-1]) if _is_tensor_entry(e)]
            plan = self.donatable[signature] = _Donation(positions, [inputs[k - 1] for k in positions])
        self.last_donation = (signature, plan)
        return plan

    def _compile(self, key, arrays, donate=None):
        """The executable for ``key``; ``donate``: the argument positions it
        donates (None: the inputs' buffers are donated with donate_mutated,
        else kept)."""
        with_statics, scalars = self.program(key)
        signature = key[:-1]
        start = time.perf_counter()
        executables = self.executables if donate is None else self.donating
        if donate is None:
            donate = self._donated(signature, arrays) if self.donate_mutated else ()
        lowered = jax.jit(with_statics, donate_argnums=donate).lower(_NO_RNG, *arrays)
        exe = lowered.compile(compiler_options={**self.xla_options, **compiler_options.current()} or None)
        seconds = time.perf_counter() - start
        stats.compiles += 1
        stats.compile_seconds += seconds
        shapes = [e.spec.size if type(e) is TpuInput else e.shape for e in signature if _is_tensor_entry(e)]
        first = not self.executables and not self.donating
        logs.graph_compile(self.name, shapes, seconds, first=first)  # TORCH_TPU_LOGS
        if not first:
            log.info("torch_tpu: recompiling %s for new input shapes %s (%.2fs)", self.name, shapes, seconds)
        else:
            log.debug("compiled %s in %.2fs", self.name, seconds)
        if self.scalar_outputs is not None:
            self.scalar_outputs[key] = scalars
        executables[key] = exe
        return exe

    def _donated(self, signature, arrays):
        """Argument positions of the rewritten inputs whose tensor owns its whole
        buffer, passed once: XLA may write their new values in place."""
        position, positions = {}, []
        for i, e in enumerate(signature):
            if _is_tensor_entry(e):
                position[i] = len(position)
        uses = {}
        for a in arrays:
            uses[id(a)] = uses.get(id(a), 0) + 1
        for i in self.mutated:
            k = position.get(i)
            spec = signature[i].spec if type(signature[i]) is TpuInput else None
            # (a buffer of another shape could not hold the new value: XLA would warn)
            if (k is not None and spec is not None and views.covers_buffer(spec)
                    and spec.buf_shape == spec.size and uses[id(arrays[k])] == 1):
                positions.append(1 + k)  # after the rng material
        return tuple(positions)


class _Recorded:
    """A deferred graph's program for one signature, as fused mode records it:
    one jitted function of (rng key material, *input arrays) returning the
    outputs the executable makes, and their (shape, dtype)."""

    def __init__(self, graph, signature, arrays):
        start = time.perf_counter()
        with_statics, _ = graph.program(signature)
        self.kept = kept = [i for i, plan in enumerate(graph.out_plans) if isinstance(plan.val, torch.Tensor)
                            and i not in graph.host_views and i not in graph.host_outputs]

        def made(material, *arrays_):
            outputs, _ = with_statics(material, *arrays_)
            return tuple(outputs[i] for i in kept)
        self.fn = jax.jit(made)
        avals = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in arrays]  # traced once here: a lowering bug shows now
        results = jax.eval_shape(self.fn, jax.ShapeDtypeStruct(_NO_RNG.shape, _NO_RNG.dtype), *avals)
        self.out_buffers = [(r.shape, r.dtype) for r in results]
        stats.compiles += 1  # (XLA compiles it with the chain it joins)
        stats.compile_seconds += time.perf_counter() - start


class _Donation:
    """Which buffers calls of one signature may donate, and the executable that does."""
    __slots__ = ("positions", "at", "inputs", "exe", "swaps", "all_swap")

    def __init__(self, positions, inputs):
        self.positions = positions  # argument positions (after the rng material)
        self.at = [k - 1 for k in positions]  # the same among the call's arrays
        self.inputs = inputs  # the graph inputs whose buffers those are
        self.exe = None  # the donating executable, once built
        self.swaps = None  # per rewritten input, whether its new value becomes its buffer (_swaps)
        self.all_swap = False  # every one does

    def may(self, arrays, args):
        """Whether this call may donate them: each is its storage's buffer and
        nothing but the storage (and the launch queue, which does not read it)
        holds it: no other input, storage, fused chain or ``to_jax`` caller
        (the rule every donating write follows)."""
        return bool(self.positions) and access.can_donate(arrays, self.at, [args[i] for i in self.inputs])


_NO_RNG = np.zeros(3, np.uint32)
_ON_EAGER_KERNELS = "run on the eager kernels"  # executables entry of a signature that failed to build
_ON_HOST = "read on the host"  # signature entry of a CPU input only host nodes read


class _HostView:
    """A graph output that is a chain of view ops over a graph input or over
    another output: made on the host from that tensor, as eager (and inductor)
    would alias it, instead of copied out of the executable."""

    def __init__(self, ops, input=None, output=None):
        self.ops = ops        # [(OpOverload, args after the viewed tensor, kwargs)], innermost first
        self.input = input    # index of the graph input it views, or None
        self.output = output  # else the index of the output it views

    def __call__(self, base):
        for op, args, kwargs in self.ops:
            base = op(base, *args, **kwargs)
        return base


def _mentions_node(args):
    """Whether (possibly nested) op arguments include a graph value."""
    found = []
    torch.fx.node.map_arg(args, found.append)
    return bool(found)


def _host_views(gm, outputs):
    """{output index: _HostView} for the outputs that are tpu graph inputs, or
    views of them or of other (computed) outputs, with static view arguments."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    chains = {}
    for i, node in enumerate(outputs):
        ops = []
        while (isinstance(node, torch.fx.Node) and node.op == "call_function"
               and isinstance(node.target, torch._ops.OpOverload) and node.target.is_view
               and not _mentions_node((node.args[1:], node.kwargs))):  # sizes may be graph values
            ops.append((node.target, tuple(node.args[1:]), dict(node.kwargs)))
            node = node.args[0]
        val = outputs[i].meta.get("val") if isinstance(outputs[i], torch.fx.Node) else None
        if isinstance(val, torch.Tensor) and val.device.type == "tpu" and (ops or node.op == "placeholder"):
            chains[i] = (node, ops[::-1])
    views = {}
    computed = {n: i for i, n in enumerate(outputs) if i not in chains and isinstance(n, torch.fx.Node)}
    for i, (root, ops) in chains.items():
        if root in placeholders:
            views[i] = _HostView(ops, input=placeholders.index(root))
        elif root in computed:
            views[i] = _HostView(ops, output=computed[root])
    return views


# A tensor input's entry in a graph call's signature: its own type, so a
# static argument that happens to be a tuple can never be mistaken for one.
class TpuInput(NamedTuple):
    spec: views.ViewSpec  # how the graph reads the buffer passed for it


class CpuInput(NamedTuple):
    shape: tuple
    dtype: np.dtype


def _is_tensor_entry(e):
    return type(e) is TpuInput or type(e) is CpuInput


def _input_matcher(signature, args):
    """The matcher of a call whose tpu tensor inputs are each their storage's
    whole buffer, as it is or permuted (the common case: parameters,
    activations, optimizer state, a backward's transposed weights and heads),
    so later calls with the signature skip ``_input_buffer``; else None."""
    tensor_at, expect, statics = [], [], []
    for i, (a, e) in enumerate(zip(args, signature)):
        if type(e) is TpuInput:
            spec = e.spec
            if a.is_neg() or a.is_conj():  # passed as its values (_input_buffer_general), not its buffer
                return None
            if not _whole_buffer(spec):
                return None
            tensor_at.append(i)
            expect.append((spec.buf_shape, spec.buf_dtype))
        elif type(e) is CpuInput or isinstance(a, torch.Tensor) and e is not _ON_HOST:
            return None
        elif e is not _ON_HOST:
            statics.append((i, a))
    return signature_match.graph_matcher(args, tuple(tensor_at), tuple(expect), tuple(statics))


def _whole_buffer(spec):
    """Whether ``_input_buffer`` passes a tensor of view spec ``spec`` as its
    storage's buffer unchanged, given only that the buffer and the tensor's
    geometry match the spec (what a GraphMatcher checks): its whole buffer,
    in row-major order or permuted (``_view_input``'s second case, which a
    flat buffer never reaches: it is reshaped first)."""
    if spec.offset != 0 or spec.dtype != spec.buf_dtype:
        return False
    return spec.size == spec.buf_shape or (len(spec.buf_shape) != 1
                                           and math.prod(spec.size) == math.prod(spec.buf_shape))


def _input_buffer(t, signature, offsets, lazy=False):
    """The array passed for graph input ``t``; appends its signature entry,
    and to ``offsets`` the storage offset of a view that reads it at run time
    (``lazy``: a pending fused result is passed as it is, for recording)."""
    # The common case first, with no helper calls: a tpu tensor whose storage
    # holds its buffer (C++-made alias storages and CPU tensors lack _tpu_buf).
    buf = getattr(t.untyped_storage(), "_tpu_buf", None)
    if buf is None or t.is_conj() or t.is_neg():
        return _input_buffer_general(t, signature, offsets)
    if type(buf) is fusion.LazyBuffer and (not lazy or buf.value is not None):
        buf = fusion.resolve(buf)
    shape, aval, offset = tuple(t.shape), getattr(buf, "aval", buf), t.storage_offset()
    spec = _new(views.ViewSpec, (aval.shape, aval.dtype, shape, t.stride(), offset, dtypes.TORCH_TO_NP[t.dtype]))
    if offset or shape != spec.buf_shape:  # (else its whole buffer)
        buf, spec = _view_input(t, buf, spec, offsets)
    signature.append(_new(TpuInput, (spec,)))
    return buf


def _input_buffer_general(t, signature, offsets):
    if t.device.type != "tpu":
        host = dtypes.numpy_from_cpu_tensor(t)
        signature.append(CpuInput(host.shape, host.dtype))
        return host
    if views.lazy_bits(t):  # a lazy conjugate/negative view: the graph expects its values
        value = access.read(t)
        shape = tuple(value.shape)
        signature.append(TpuInput(views.ViewSpec(shape, value.dtype, shape, buffers.contiguous_strides(shape),
                                                 0, value.dtype)))
        return value
    spec, buf = views.spec_of(t, dtypes.TORCH_TO_NP[t.dtype])
    buf, spec = _view_input(t, fusion.resolve(buf), views.ViewSpec._make(spec), offsets)
    signature.append(TpuInput(spec))
    return buf


def _view_input(t, buf, spec, offsets):
    """``(buf, spec)`` of an input that may not be its whole buffer.  A view
    that could sit elsewhere in its buffer (a row, a column, a window) reads
    its offset at run time, as the eager kernels do: its spec's offset is None
    and the offset joins ``offsets``, so ``for row in x: f(row)`` compiles once."""
    if len(spec.buf_shape) == 1 and spec.buf_shape != spec.size and views.covers_buffer(spec):
        return _shaped_like(t, fusion.resolve(buf), spec)
    if not spec.offset and spec.dtype == spec.buf_dtype and math.prod(spec.size) == math.prod(spec.buf_shape):
        return buf, spec  # its whole buffer, permuted (a weight's transpose): split_offset's answer, cheaper
    free, offset = views.split_offset(spec)
    if offset is None:
        return buf, spec
    offsets.append(_offset_arg(offset))
    return buf, _new(views.ViewSpec, free)


def _offset_arg(offset):
    """The device scalar passed for a view's storage offset, made once per offset."""
    arg = _offset_args.get(offset)
    if arg is None:
        if len(_offset_args) >= 4096:  # a loop over a huge buffer: start over
            _offset_args.clear()
        arg = _offset_args[offset] = jax.device_put(np.int64(offset))  # (jit would copy an int per call)
    return arg


_offset_args = {}


def _shaped_like(t, buf, spec):
    """A whole storage kept flat: give the storage the tensor's shape once, so
    later calls share one signature.  (Only flat ones: a storage two graphs
    read in two shapes would otherwise be reshaped every call.)"""
    buf = buf.reshape(spec.size)
    buffers.set_buffer(t.untyped_storage(), buf)
    return buf, spec._replace(buf_shape=spec.size)


_new = tuple.__new__  # builds signature entries without NamedTuple's keyword handling (every graph input)


class _OutputPlan:
    """How one graph output becomes a tensor: its storage layout (a transpose
    applied inside the executable, or None) and the tensor's geometry."""

    def __init__(self, val):
        self.val = val
        self.layout = None  # the OutSpec of a permuted-stride output
        self.static = False  # a tpu tensor of static geometry: every result has the first one's
        self.meta = None  # then wrap_as's arguments, taken from the first result's tensor
        if not isinstance(val, torch.Tensor) or val.device.type != "tpu":
            return
        if not all(isinstance(d, int) for d in (*val.shape, *val.stride())):
            return  # symbolic shape (dynamic=True): row-major
        self.static = True
        spec = views.OutSpec(tuple(val.shape), tuple(val.stride()), dtypes.to_np(val.dtype))
        if views.permuted_order(spec) is not None:
            self.layout = spec

    def __call__(self, result):
        if self.meta is not None:
            return _wrap_as(result, *self.meta)
        val = self.val
        if not isinstance(val, torch.Tensor):
            return result
        if val.device.type == "cpu":
            from ..ops.core import to_cpu_tensor
            return to_cpu_tensor(buffers.wrap(result))
        t = buffers.wrap(result) if self.layout is None else buffers.wrap(result, *self.layout[:2])
        if self.static:  # strides None: row-major, the storage-swap path of wrap_as (~half the cost)
            self.meta = (t.dtype, t.untyped_storage().nbytes(), tuple(t.shape),
                         None if self.layout is None else t.stride())
        return t


_wrap_as = buffers.wrap_as


def _swaps(tensors, values):
    """Per rewritten input, whether its new value simply becomes its storage's
    buffer (``access.write``'s whole-storage case): the inputs' and the
    values' geometry is the signature's, so the answer holds for every call
    with the signature (only a lazy conj/neg bit is not in it: checked per call)."""
    return [not t.is_cpu and access.becomes_buffer(t, buffers.get_buffer(t.untyped_storage()), v)
            for t, v in zip(tensors, values)]


def _write_inputs(tensors, values, swaps=()):
    """Store a graph's new values into the inputs it mutates: the new buffer
    itself where ``swaps`` says so, else through ``access.write`` (which hands
    a whole-storage input the new buffer too, after asking); CPU inputs (e.g.
    an optimizer's step counts) are read back in one transfer."""
    cpu = []
    for t, value, swap in itertools.zip_longest(tensors, values, swaps):
        if swap and not t.is_conj() and not t.is_neg():
            buffers.set_buffer(t.untyped_storage(), value)
        elif t.is_cpu:
            cpu.append((t, value))
        else:
            access.write(t, value)
    if cpu:
        hosts = transfer.fetch([v for _, v in cpu])
        for (t, _), host in zip(cpu, hosts):
            if t.dim() == 0:  # a step count: fill_ with the exact value is the cheap path
                t.fill_(host.item())
            else:
                t.copy_(dtypes.cpu_tensor_from_numpy(np.asarray(host)).reshape(t.shape))


def make_boxed_func_from(compiled):
    def run(args):
        return compiled(args)
    run._boxed_call = True
    return run


def _compiler(name):
    def compile_graph(gm: torch.fx.GraphModule, example_inputs):
        stats.graphs += 1
        if collectives.present(gm):  # cut at its collectives: compile/collectives.py
            return collectives.compile_split(gm, name, CompiledGraph)
        try:
            compiled = CompiledGraph(gm, name, donate_when_safe=True, defer=True)
        except lowering.LoweringError as e:
            stats.eager_fallbacks += 1
            warnings.warn(f"torch_tpu: torch.compile: {e}; this {name} graph runs through the "
                          "eager tpu kernels instead", stacklevel=2)
            return make_boxed_func(gm.forward)
        return make_boxed_func_from(compiled)
    return compile_graph


def _random_factories():
    """rand/randn(_like) as an empty tensor filled by the random kernels, whose
    keys the lowering derives from the graph's seed (drop path, noise)."""
    aten = torch.ops.aten

    def factory(fill, like):
        def build(arg, *, generator=None, dtype=None, layout=None, device=None, pin_memory=None,
                  memory_format=None):
            empty = (aten.empty_like.default(arg, dtype=dtype, device=device) if like else
                     aten.empty.memory_format(arg, dtype=dtype, device=device))
            return fill(empty, generator=generator)
        return build
    uniform = aten.uniform.default
    normal = aten.normal_functional.default
    return {aten.rand.default: factory(uniform, False), aten.randn.default: factory(normal, False),
            aten.rand.generator: factory(uniform, False), aten.randn.generator: factory(normal, False),
            aten.rand_like.default: factory(uniform, True), aten.randn_like.default: factory(normal, True)}


def _decompositions():
    # Decompose only the ops we cannot lower directly; keep the rest whole, so
    # layer_norm, SDPA and friends reach XLA as one op each.
    from torch._decomp import core_aten_decompositions
    table = {**core_aten_decompositions(), **_random_factories()}
    return {op: fn for op, fn in table.items()
            if not isinstance(registry.KERNELS.get(op), registry.Kernel)
            and op not in lowering.VIEW_LOWERINGS}


@functools.lru_cache(maxsize=None)
def _aot_backend():
    return aot_autograd(fw_compiler=_compiler("forward"), bw_compiler=_compiler("backward"),
                        inference_compiler=_compiler("inference"),
                        decompositions=_decompositions(), keep_inference_input_mutations=True)


@contextlib.contextmanager
def _data_dependent_sizes_allowed(example_inputs):
    """While AOTAutograd traces the backward, let fake ops with data-dependent
    output sizes (``x[mask] = v`` selects by the mask in its backward) return
    unbacked sizes instead of raising.  An exception raised there, inside a tpu
    backward node, reaches a stream guard whose Python device-guard call aborts
    the process (std::terminate in PyTorch's torch.acc guard).  Such a graph
    then fails to lower (its sizes are unknown) and runs on the eager kernels."""
    shape_env = getattr(torch._guards.detect_fake_mode(example_inputs), "shape_env", None)
    if shape_env is None or shape_env.allow_dynamic_output_shape_ops:
        yield
        return
    settings = shape_env.settings  # a frozen dataclass
    shape_env.settings = dataclasses.replace(settings, allow_dynamic_output_shape_ops=True)
    try:
        yield
    finally:
        shape_env.settings = settings


def tpu_backend(gm, example_inputs, mode=None, options=None):
    """``torch.compile(model, backend="tpu")``. ``mode`` is accepted (XLA already
    runs whole graphs, so "reduce-overhead" needs nothing more); ``options`` may
    carry XLA compiler options (see torch.tpu.compiler.custom_compiler_options)."""
    fusion.flush("torch.compile")
    with _data_dependent_sizes_allowed(example_inputs), \
            compiler_options.custom_compiler_options(dict(options or {})):
        return _aot_backend()(gm, example_inputs)
