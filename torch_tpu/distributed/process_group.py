"""``ProcessGroupTpu``: the c10d process group behind the ``tpu_dist`` backend.

Collectives run as XLA programs (see programs.py) on the ranks' devices.
Point-to-point ops use a Gloo group on CPU copies: XLA collectives are SPMD
programs both peers must launch in the same order, while c10d lets each side
post sends and receives independently (``batch_isend_irecv`` posts isend
before irecv on both ends), which only a tagged transport serves.  When the
JAX multi-process runtime is unavailable (see bootstrap.py) every op takes
the Gloo path.
"""
import functools
from datetime import timedelta

import jax
import jax.numpy as jnp
import torch
import torch.distributed as dist
from torch.distributed import ProcessGroup

from ..eager import fusion
from . import bootstrap, spmd, stream, tensors
from .work import CopyBackWork, XlaWork

_R = dist.ReduceOp.RedOpType
_OPS = {_R.SUM: "sum", _R.AVG: "avg", _R.PRODUCT: "product", _R.MIN: "min", _R.MAX: "max",
        _R.BAND: "band", _R.BOR: "bor", _R.BXOR: "bxor"}


# by the enum's int: hashing and comparing the bound enum cost ~3 us a call
_STATICS = {int(k): (name, None) for k, name in _OPS.items()}
_PREMUL = int(_R.PREMUL_SUM)


def _reduce_op(op):
    kind = int(getattr(op, "op", op))
    if kind == _PREMUL:
        factor = op.factor
        if isinstance(factor, torch.Tensor):
            factor = factor.item()
        return "sum", float(factor)
    return _STATICS[kind]


class ProcessGroupTpu(ProcessGroup):
    def __init__(self, store, rank, size, timeout, global_ranks):
        super().__init__(rank, size)
        self._timeout_s = timeout.total_seconds() if isinstance(timeout, timedelta) else float(timeout)
        self._ranks = list(global_ranks) if global_ranks else list(range(size))
        self._name = ""
        self._whats = {}  # collective kind -> how errors name a call of it
        self._desc = ""
        # Every member must join the Gloo group now: creation is collective.
        self._gloo = dist.ProcessGroupGloo(dist.PrefixStore("gloo/", store), rank, size,
                                           timeout if isinstance(timeout, timedelta)
                                           else timedelta(seconds=timeout))
        self._xla = bootstrap.transport() == "xla"
        if self._xla:
            self._devices = tuple(bootstrap.device_of_rank(r) for r in self._ranks)
            self._device = self._devices[rank]
        self._token = None  # barrier's operand, made once

    # ---- identity ---------------------------------------------------------
    def getBackendName(self):
        return "tpu_dist"

    def _set_group_name(self, name):
        self._name = name
        self._whats = {}

    def getGroupName(self):
        return self._name

    def _set_group_desc(self, desc):
        self._desc = desc

    def getGroupDesc(self):
        return self._desc

    @property
    def _device_types(self):
        return [torch.device("tpu"), torch.device("cpu")]

    def transport(self):
        return "xla" if self._xla else "gloo"

    # ---- helpers ----------------------------------------------------------
    def _what(self, kind):
        # (rank() and size() cross into C++ each: formatted once)
        what = self._whats[kind] = f"{kind} on group {self._name or '?'} (rank {self.rank()} of {self.size()})"
        return what

    def _start(self, kind, static, x, block=None, out_shape=None):
        """Submit ``kind`` on block ``x`` (seen by the kernel reshaped to
        ``block``; its local result shaped ``out_shape``): a future."""
        if not spmd.active():
            fusion.flush("collective")  # ranks must not fuse different op chains around it
        return stream.submit(kind, static, self._devices, x, block, out_shape, self._timeout_s)

    def _jax(self, t):
        return tensors.to_jax(t, self._device)

    def _work(self, kind, pending, result, after=None, may_defer=False, checked_too=False):
        return XlaWork(self._whats.get(kind) or self._what(kind), self._timeout_s, pending, result,
                       after, may_defer, checked_too)

    def _via_gloo(self, method, outputs, *args):
        """Run Gloo ``method`` on CPU copies; outputs: the tensors written back."""
        copies = {}

        def cpu(t):
            if isinstance(t, torch.Tensor):
                if t.device.type == "cpu":
                    return t
                if id(t) not in copies:
                    copies[id(t)] = (t, t.detach().cpu())
                return copies[id(t)][1]
            if isinstance(t, list):
                return [cpu(x) for x in t]
            return t

        cargs = [cpu(a) for a in args]
        inner = getattr(self._gloo, method)(*cargs)
        back = [copies[id(t)] for t in _flat(outputs) if id(t) in copies]
        return CopyBackWork(inner, back, _flat(outputs))

    # ---- collectives --------------------------------------------------------
    def allreduce(self, tensors_, opts=None):
        opts = opts or dist.AllreduceOptions()
        if not self._xla:
            return self._via_gloo("allreduce", tensors_, tensors_, opts)
        static = _reduce_op(opts.reduceOp)
        pending = []
        for t in tensors_:
            fut = self._start("all_reduce", static, self._jax(t))
            pending.append((fut, functools.partial(tensors.write, t)))
        return self._work("all_reduce", pending, tensors_, may_defer=True)

    def allreduce_coalesced(self, tensors_, opts=None):
        o = dist.AllreduceOptions()
        o.reduceOp = (opts or dist.AllreduceCoalescedOptions()).reduceOp
        return self.allreduce(tensors_, o)

    def reduce(self, tensors_, opts=None):
        opts = opts or dist.ReduceOptions()
        if not self._xla:
            return self._via_gloo("reduce", tensors_, tensors_, opts)
        static = _reduce_op(opts.reduceOp)
        root = opts.rootRank
        pending = []
        for t in tensors_:
            fut = self._start("all_reduce", static, self._jax(t))
            writer = (lambda o, t=t: tensors.write(t, o)) if self.rank() == root else None
            pending.append((fut, writer))
        return self._work("reduce", pending, tensors_)

    def broadcast(self, tensors_, opts=None):
        opts = opts or dist.BroadcastOptions()
        if not self._xla:
            return self._via_gloo("broadcast", tensors_, tensors_, opts)
        root = opts.rootRank
        pending = []
        for t in tensors_:
            fut = self._start("broadcast", (root,), self._jax(t))
            writer = (lambda o, t=t: tensors.write(t, o)) if self.rank() != root else None
            pending.append((fut, writer))
        return self._work("broadcast", pending, tensors_)

    def _gather_to(self, kind, outputs, x, keep=True):
        """All-gather block ``x``; write piece j into outputs[j] if ``keep``."""
        fut = self._start("all_gather", (), x, block=(1,) + tuple(x.shape))

        def writer(o):
            for j, t in enumerate(outputs):
                tensors.write(t, o[j])
        return fut, (writer if keep else None)

    def allgather(self, output_lists, inputs, opts=None):
        if not self._xla:
            return self._via_gloo("allgather", output_lists, output_lists, inputs,
                                  opts or dist.AllgatherOptions())
        pending = [self._gather_to("all_gather", outs, self._jax(t))
                   for outs, t in zip(output_lists, inputs)]
        return self._work("all_gather", pending, output_lists)

    def allgather_coalesced(self, output_lists, inputs, opts=None):
        return self.allgather(output_lists, inputs, opts)

    def _allgather_base(self, output, input_, opts=None):
        if not self._xla:
            return self._via_gloo("_allgather_base", [output], output, input_,
                                  opts or dist.AllgatherOptions())
        fut = self._start("all_gather", (), self._jax(input_), block=(1,) + tuple(input_.shape),
                          out_shape=tuple(output.shape))
        return self._work("all_gather_into_tensor",
                          [(fut, functools.partial(tensors.write, output))], [output],
                          may_defer=True, checked_too=True)

    def allgather_into_tensor_coalesced(self, outputs, inputs, opts=None):
        works = [self._allgather_base(o, i, opts) for o, i in zip(outputs, inputs)]
        return _chain(works, outputs)

    def gather(self, output_lists, inputs, opts=None):
        opts = opts or dist.GatherOptions()
        if not self._xla:
            return self._via_gloo("gather", output_lists, output_lists, inputs, opts)
        keep = self.rank() == opts.rootRank
        pending = [self._gather_to("gather", output_lists[0] if keep else [], self._jax(t), keep)
                   for t in inputs]
        return self._work("gather", pending, output_lists)

    def scatter(self, outputs, input_lists, opts=None):
        opts = opts or dist.ScatterOptions()
        if not self._xla:
            return self._via_gloo("scatter", outputs, outputs, input_lists, opts)
        pending = []
        for i, t in enumerate(outputs):
            if self.rank() == opts.rootRank:
                x = jnp.stack([self._jax(s) for s in input_lists[i]])
            else:  # only the root's blocks count; ours is a placeholder of the same shape
                x = jnp.zeros((self.size(),) + tuple(t.shape), _jdtype(t), device=self._device)
            fut = self._start("scatter", (opts.rootRank,), x)
            pending.append((fut, lambda o, t=t: tensors.write(t, o)))
        return self._work("scatter", pending, outputs)

    def reduce_scatter(self, outputs, input_lists, opts=None):
        opts = opts or dist.ReduceScatterOptions()
        if not self._xla:
            return self._via_gloo("reduce_scatter", outputs, outputs, input_lists, opts)
        static = _reduce_op(opts.reduceOp)
        pending = []
        for t, ins in zip(outputs, input_lists):
            x = jnp.stack([self._jax(s) for s in ins])
            fut = self._start("reduce_scatter", static, x)
            pending.append((fut, lambda o, t=t: tensors.write(t, o)))
        return self._work("reduce_scatter", pending, outputs)

    def _reduce_scatter_base(self, output, input_, opts=None):
        opts = opts or dist.ReduceScatterOptions()
        if not self._xla:
            return self._via_gloo("_reduce_scatter_base", [output], output, input_, opts)
        fut = self._start("reduce_scatter", _reduce_op(opts.reduceOp), self._jax(input_),
                          block=(self.size(),) + tuple(output.shape), out_shape=tuple(output.shape))
        return self._work("reduce_scatter_tensor",
                          [(fut, functools.partial(tensors.write, output))], [output],
                          may_defer=True, checked_too=True)

    def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts=None):
        works = [self._reduce_scatter_base(o, i, opts) for o, i in zip(outputs, inputs)]
        return _chain(works, outputs)

    def alltoall(self, outputs, inputs, opts=None):
        if not self._xla:
            return self._via_gloo("alltoall", outputs, outputs, inputs,
                                  opts or dist.AllToAllOptions())
        if len({tuple(t.shape) for t in list(inputs) + list(outputs)}) == 1:
            x = jnp.stack([self._jax(t) for t in inputs])
            fut = self._start("all_to_all", (), x)

            def writer(o):
                for j, t in enumerate(outputs):
                    tensors.write(t, o[j])
            return self._work("all_to_all", [(fut, writer)], outputs)
        return self._alltoall_uneven([self._jax(t).reshape(-1) for t in inputs], outputs)

    def alltoall_base(self, output, input_, output_split_sizes, input_split_sizes, opts=None):
        if not self._xla:
            return self._via_gloo("alltoall_base", [output], output, input_,
                                  output_split_sizes, input_split_sizes,
                                  opts or dist.AllToAllOptions())
        w = self.size()
        x = self._jax(input_)
        if not input_split_sizes and not output_split_sizes:
            x = x.reshape((w, -1) + tuple(x.shape[1:]))
            fut = self._start("all_to_all", (), x)
            return self._work("all_to_all_single",
                              [(fut, lambda o: tensors.write(output, o))], [output])
        row = 1
        for d in input_.shape[1:]:
            row *= d
        ins = list(input_split_sizes) or [input_.shape[0] // w] * w
        outs = list(output_split_sizes) or [output.shape[0] // w] * w
        chunks, start = [], 0
        for n in ins:
            chunks.append(x[start:start + n].reshape(-1))
            start += n
        views, start = [], 0
        for n in outs:
            views.append((start * row, n * row))
            start += n
        return self._alltoall_uneven(chunks, None, flat_output=(output, views))

    def _alltoall_uneven(self, chunks, outputs, flat_output=None):
        """All-to-all of unequal flat chunks: pad to the group-wide largest."""
        size = jnp.array([max(int(c.shape[0]) for c in chunks)], jnp.int64)
        fut = self._start("all_reduce", ("max", None), jax.device_put(size, self._device))
        sizes = XlaWork(self._what("all_to_all (sizes)"), self._timeout_s, [(fut, None)])
        sizes.wait()
        m = max(1, int(jax.device_get(sizes.outputs[0]).reshape(-1)[0]))
        dtype = chunks[0].dtype
        x = jnp.stack([jnp.pad(c.astype(dtype), (0, m - c.shape[0])) for c in chunks])
        fut = self._start("all_to_all", (), x)

        def writer(o):
            if flat_output is not None:
                t, views = flat_output
                flat = jnp.concatenate([o[j, :n] for j, (_, n) in enumerate(views)]) if views else o[:0]
                tensors.write(t, flat)
            else:
                for j, t in enumerate(outputs):
                    tensors.write(t, o[j, :t.numel()])
        return self._work("all_to_all", [(fut, writer)],
                          [flat_output[0]] if flat_output else outputs)

    def barrier(self, opts=None):
        if not self._xla:
            return self._gloo.barrier(opts or dist.BarrierOptions())
        if self._token is None:
            self._token = jnp.zeros((1,), jnp.int32, device=self._device)
        fut = self._start("all_reduce", ("sum", None), self._token)
        work = self._work("barrier", [(fut, None)], [])
        work.wait()  # c10d's barrier is expected to have synchronized on return
        return work

    def monitored_barrier(self, opts=None, wait_all_ranks=False):
        return self.barrier(opts)

    # torch >= 2.13 names for the tensor-in/tensor-out forms
    def all_gather_single(self, output, input_, opts=None):
        return self._allgather_base(output, input_, opts)

    def all_gather_single_coalesced(self, outputs, inputs, opts=None):
        return self.allgather_into_tensor_coalesced(outputs, inputs, opts)

    def reduce_scatter_single(self, output, input_, opts=None):
        return self._reduce_scatter_base(output, input_, opts)

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts=None):
        return self.reduce_scatter_tensor_coalesced(outputs, inputs, opts)

    def all_to_all_single(self, output, input_, output_split_sizes, input_split_sizes, opts=None):
        return self.alltoall_base(output, input_, output_split_sizes, input_split_sizes, opts)

    # ---- point to point (Gloo, see module docstring) ----------------------
    def send(self, tensors_, dst, tag=0):
        cpu = [t.detach().cpu() for t in tensors_]
        return CopyBackWork(self._gloo.send(cpu, dst, tag), [], tensors_)

    def recv(self, tensors_, src, tag=0):
        return self._via_gloo("recv", tensors_, tensors_, src, tag)

    def recv_anysource(self, tensors_, tag=0):
        return self._via_gloo("recv_anysource", tensors_, tensors_, tag)

    def shutdown(self):
        self._gloo = None

    def abort(self):
        self._gloo = None


def _jdtype(t):
    from .. import dtypes
    return dtypes.TORCH_TO_NP[t.dtype]


def _flat(x):
    if isinstance(x, torch.Tensor):
        return [x]
    out = []
    for y in x:
        out.extend(_flat(y))
    return out


class _Chained(dist.Work):
    def __init__(self, works, result):
        super().__init__()
        self._works = works
        self._result = result

    def wait(self, timeout=timedelta(0)):
        for w in self._works:
            w.wait(timeout)
        return True

    def is_completed(self):
        return all(w.is_completed() for w in self._works)

    def get_future(self):
        fut = torch.futures.Future()
        self.wait()
        fut.set_result(self._result)
        return fut

    def result(self):
        return self._result


def _chain(works, result):
    return works[0] if len(works) == 1 else _Chained(works, result)
