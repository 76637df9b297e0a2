"""``torch.tpu.ops`` collectives by dimension, ragged all-to-all and
point-to-point, on top of the process group (``tpu_dist`` or any other).

Each is built on PyTorch's functional collectives (the ``_c10d_functional``
ops, each followed by its ``wait_tensor``): eagerly they are c10d calls on
the group, and under ``torch.compile`` Dynamo puts them into the graph, where
the "tpu" backend cuts the graph at them (compile/collectives.py) instead of
breaking it.  PyTorch registers their gradients: all_gather_dim and
reduce_scatter_dim (sum) are each other's, all-to-all's is the reverse
all-to-all.
"""
import torch
import torch.distributed as dist

from ..compile import collectives as comm_ops

_c10d = torch.ops._c10d_functional
_R = dist.ReduceOp
# c10d's reduce ops by the names the functional collectives take
_OP_NAMES = {_R.SUM: "sum", _R.AVG: "avg", _R.PRODUCT: "product", _R.MIN: "min", _R.MAX: "max",
             _R.BAND: "band", _R.BOR: "bor", _R.BXOR: "bxor"}


def _dim(tensor, dim):
    return dim % tensor.dim() if tensor.dim() else 0


def _group(group):
    """(group name, group size) of ``group`` (None: the default group)."""
    group = dist.group.WORLD if group is None else group
    return group.group_name, dist.get_world_size(group)


def _op_name(op):
    name = _OP_NAMES.get(op) if not isinstance(op, str) else op.lower()
    if name is None or name not in _OP_NAMES.values():
        raise ValueError(f"reduce_scatter_dim: unsupported reduce op {op} "
                         f"(supported: {', '.join(_OP_NAMES.values())})")
    return name


@torch._dynamo.dont_skip_tracing  # torch_tpu is on Dynamo's skip list; this wrapper is plain torch
def all_gather_dim(tensor: torch.Tensor, dim: int = 0, group=None) -> torch.Tensor:
    """Every rank's ``tensor`` concatenated along ``dim`` in rank order.
    Gradient: the upstream gradient summed over the ranks, each rank keeping
    its own part (reduce_scatter_dim)."""
    dim = _dim(tensor, dim)
    name, world = _group(group)
    front = tensor.movedim(dim, 0).contiguous()
    out = _c10d.wait_tensor(_c10d.all_gather_into_tensor(front, world, name))
    return out.movedim(0, dim)


@torch._dynamo.dont_skip_tracing
def reduce_scatter_dim(tensor: torch.Tensor, dim: int = 0, op=dist.ReduceOp.SUM, group=None) -> torch.Tensor:
    """``tensor`` reduced over the ranks, then split along ``dim``: rank r keeps
    part r.  Gradient (SUM only, as PyTorch's): all_gather_dim of the upstream
    gradient."""
    dim = _dim(tensor, dim)
    name, world = _group(group)
    if tensor.shape[dim] % world:
        raise RuntimeError(f"reduce_scatter_dim: dimension {dim} has size {tensor.shape[dim]}, "
                           f"not a multiple of the group size {world}")
    front = tensor.movedim(dim, 0).contiguous()
    out = _c10d.wait_tensor(_c10d.reduce_scatter_tensor(front, _op_name(op), world, name))
    return out.movedim(0, dim)


def _ints(values, world, what):
    if isinstance(values, torch.Tensor):
        values = values.reshape(-1).tolist()  # a host read (a graph break under torch.compile)
    values = [int(v) for v in values]
    if len(values) != world:
        raise RuntimeError(f"ragged_all_to_all: {what} needs one entry per rank ({world}), got {len(values)}")
    return values


@torch._dynamo.dont_skip_tracing
def ragged_all_to_all(input: torch.Tensor, output: torch.Tensor, input_offsets, send_sizes,
                      output_offsets, recv_sizes, group=None) -> torch.Tensor:
    """``jax.lax.ragged_all_to_all``'s contract: this rank sends rows
    ``input[input_offsets[j] : + send_sizes[j]]`` to rank j, where they land at
    row ``output_offsets[j]`` of rank j's output (the sender picks the place);
    ``recv_sizes[i]`` is how many rows come from rank i.  Rows of ``output``
    nobody writes keep their value; returns the updated copy of ``output``.

    Offsets and sizes given as Python ints (or, eagerly, tensors read on the
    host) set the shapes moved: only the rows sent travel.  Under
    torch.compile, sizes given as tensors stay on the device instead (they
    are data there): every rank then sends each peer ``input.shape[0]`` rows,
    of which the receiver keeps ``recv_sizes[i]``, so that no shape depends on
    them (more bytes moved, no graph break)."""
    name, world = _group(group)
    args = (input_offsets, send_sizes, output_offsets, recv_sizes)
    if torch.compiler.is_compiling() and any(isinstance(a, torch.Tensor) for a in args):
        return _ragged_padded(input, output, *args, name, world)
    in_off, send, out_off, recv = (_ints(a, world, what) for a, what in zip(args, _ARG_NAMES))
    send_buf = torch.cat([input[o:o + n] for o, n in zip(in_off, send)]) if sum(send) else input[:0]
    received = _c10d.wait_tensor(_c10d.all_to_all_single(send_buf.contiguous(), recv, send, name))
    landing = _landing(torch.tensor(out_off, dtype=torch.int64, device=input.device), world, name)
    if not sum(recv):
        return output.clone()
    rows = torch.cat([landing[i] + torch.arange(n, device=input.device) for i, n in enumerate(recv) if n])
    return output.index_copy(0, rows, received.to(output.dtype))


_ARG_NAMES = ("input_offsets", "send_sizes", "output_offsets", "recv_sizes")


def _landing(output_offsets, world, name):
    """Where our rows land on each receiver: the receivers tell us, we tell the senders."""
    return _c10d.wait_tensor(_c10d.all_to_all_single(output_offsets, [1] * world, [1] * world, name))


def _ragged_padded(input, output, input_offsets, send_sizes, output_offsets, recv_sizes, name, world):
    """ragged_all_to_all with every shape static: each peer gets a block of
    ``input.shape[0]`` rows starting at its offset; the receiver scatters the
    first ``recv_sizes[i]`` rows of block i and drops the rest."""
    device, n = input.device, input.shape[0]

    def vector(v, what):
        v = torch.as_tensor(v, device=device).reshape(-1).to(torch.int64)
        if v.shape[0] != world:
            raise RuntimeError(f"ragged_all_to_all: {what} needs one entry per rank ({world}), got {v.shape[0]}")
        return v
    in_off, _, out_off, recv = (vector(a, what) for a, what in
                                zip((input_offsets, send_sizes, output_offsets, recv_sizes), _ARG_NAMES))
    step = torch.arange(n, device=device)
    rows = (in_off[:, None] + step).clamp(max=max(n - 1, 0))  # rows past the input are never kept
    blocks = input[rows.reshape(-1)]  # (world * n, ...): block j for rank j
    received = _c10d.wait_tensor(_c10d.all_to_all_single(blocks.contiguous(), [n] * world, [n] * world, name))
    landing = _landing(out_off, world, name)
    spare = output.shape[0]  # one extra row takes what is dropped
    dest = torch.where(step < recv[:, None], landing[:, None] + step, spare)
    padded = torch.cat([output, output.new_zeros((1, *output.shape[1:]))])
    return padded.index_copy(0, dest.reshape(-1), received.to(output.dtype))[:spare]


# Point to point as custom ops of our own: c10d's functional isend leaves its
# work unwaited (its result is an empty tensor wait_tensor cannot find), and
# irecv takes group ranks where torch.distributed takes global ones.
@torch.library.custom_op("tpu_ops::send", mutates_args=())
def _send(tensor: torch.Tensor, dst: int, tag: int, group_name: str) -> None:
    dist.send(tensor, dst, group=_resolve(group_name), tag=tag)


@_send.register_fake
def _(tensor, dst, tag, group_name):
    return None


@torch.library.custom_op("tpu_ops::recv", mutates_args=())
def _recv(like: torch.Tensor, src: int, tag: int, group_name: str) -> torch.Tensor:
    out = torch.empty_like(like, memory_format=torch.contiguous_format)
    dist.recv(out, src, group=_resolve(group_name), tag=tag)
    return out


@_recv.register_fake
def _(like, src, tag, group_name):
    return torch.empty_like(like, memory_format=torch.contiguous_format)


def _resolve(group_name):
    return dist.distributed_c10d._resolve_process_group(group_name)


for _op in (torch.ops.tpu_ops.send.default, torch.ops.tpu_ops.recv.default):
    torch.fx.node.has_side_effect(_op)  # never dropped from a graph, even when nothing reads them
    comm_ops.register(_op)  # compiled graphs run them between their pieces


@torch._dynamo.dont_skip_tracing
def send(tensor: torch.Tensor, dst: int, group=None, tag: int = 0) -> None:
    """Point-to-point send of ``tensor`` to rank ``dst`` (a global rank;
    returns when sent)."""
    name, _ = _group(group)
    _send(tensor.contiguous(), dst, tag, name)


@torch._dynamo.dont_skip_tracing
def recv(tensor: torch.Tensor, src: int, group=None, tag: int = 0) -> torch.Tensor:
    """Receive into ``tensor`` from rank ``src`` (a global rank); returns it."""
    name, _ = _group(group)
    received = _recv(tensor, src, tag, name)
    with torch.no_grad():
        tensor.copy_(received)
    return tensor
