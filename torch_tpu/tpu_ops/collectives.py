"""``torch.tpu.ops`` collectives by dimension, ragged all-to-all and
point-to-point, on top of the process group (``tpu_dist`` or any other):
each is a torch.distributed collective on a tensor laid out so the group's
ranks line up along dimension 0.  all_gather_dim and reduce_scatter_dim are
each other's gradient, so both work under autograd."""
import torch
import torch.distributed as dist


def _dim(tensor, dim):
    return dim % tensor.dim() if tensor.dim() else 0


def _gather(tensor, dim, group):
    world = dist.get_world_size(group)
    front = tensor.movedim(dim, 0).contiguous()
    out = torch.empty((world * front.shape[0], *front.shape[1:]), dtype=tensor.dtype, device=tensor.device)
    dist.all_gather_into_tensor(out, front, group=group)
    return out.movedim(0, dim)


def _scatter(tensor, dim, op, group):
    world = dist.get_world_size(group)
    if tensor.shape[dim] % world:
        raise RuntimeError(f"reduce_scatter_dim: dimension {dim} has size {tensor.shape[dim]}, "
                           f"not a multiple of the group size {world}")
    front = tensor.movedim(dim, 0).contiguous()
    out = torch.empty((front.shape[0] // world, *front.shape[1:]), dtype=tensor.dtype, device=tensor.device)
    dist.reduce_scatter_tensor(out, front, op=op, group=group)
    return out.movedim(0, dim)


class _AllGatherDim(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, dim, group):
        ctx.dim, ctx.group = dim, group
        return _gather(tensor, dim, group)

    @staticmethod
    def backward(ctx, grad):
        return _scatter(grad, ctx.dim, dist.ReduceOp.SUM, ctx.group), None, None


class _ReduceScatterDim(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, dim, group):
        ctx.dim, ctx.group = dim, group
        return _scatter(tensor, dim, dist.ReduceOp.SUM, group)

    @staticmethod
    def backward(ctx, grad):
        return _gather(grad, ctx.dim, ctx.group), None, None


def all_gather_dim(tensor: torch.Tensor, dim: int = 0, group=None) -> torch.Tensor:
    """Every rank's ``tensor`` concatenated along ``dim`` in rank order."""
    return _AllGatherDim.apply(tensor, _dim(tensor, dim), group)


def reduce_scatter_dim(tensor: torch.Tensor, dim: int = 0, op=dist.ReduceOp.SUM, group=None) -> torch.Tensor:
    """``tensor`` reduced over the ranks, then split along ``dim``: rank r keeps part r."""
    dim = _dim(tensor, dim)
    if op == dist.ReduceOp.SUM:
        return _ReduceScatterDim.apply(tensor, dim, group)
    return _scatter(tensor, dim, op, group)


def ragged_all_to_all(input: torch.Tensor, output: torch.Tensor, input_offsets, send_sizes,
                      output_offsets, recv_sizes, group=None) -> torch.Tensor:
    """``jax.lax.ragged_all_to_all``'s contract: this rank sends rows
    ``input[input_offsets[j] : + send_sizes[j]]`` to rank j, where they land at
    row ``output_offsets[j]`` of rank j's output (the sender picks the place);
    ``recv_sizes[i]`` is how many rows come from rank i.  Rows of ``output``
    nobody writes keep their value; returns the updated copy of ``output``.
    Sizes and offsets are read on the host."""
    world = dist.get_world_size(group)
    values = [torch.as_tensor(v).reshape(-1).tolist() for v in (input_offsets, send_sizes, output_offsets, recv_sizes)]
    in_off, send, out_off, recv = values
    if not all(len(v) == world for v in values):
        raise RuntimeError(f"ragged_all_to_all: offsets and sizes need one entry per rank ({world})")
    send_buf = torch.cat([input[o:o + n] for o, n in zip(in_off, send)]) if sum(send) else input[:0]
    recv_buf = torch.empty((sum(recv), *input.shape[1:]), dtype=input.dtype, device=input.device)
    dist.all_to_all_single(recv_buf, send_buf.contiguous(), output_split_sizes=recv,
                           input_split_sizes=send, group=group)
    # where our rows land on each receiver: the receivers tell us, we tell the senders
    offsets = torch.tensor(out_off, dtype=torch.int64, device=input.device)
    landing = torch.empty_like(offsets)
    dist.all_to_all_single(landing, offsets, group=group)
    result = output.clone()
    start = 0
    for n, at in zip(recv, landing.tolist()):
        if n:
            result[at:at + n] = recv_buf[start:start + n]
        start += n
    return result


def send(tensor: torch.Tensor, dst: int, group=None, tag: int = 0) -> None:
    """Point-to-point send of ``tensor`` to rank ``dst`` (blocking)."""
    dist.send(tensor.contiguous(), dst, group=group, tag=tag)


def recv(tensor: torch.Tensor, src: int, group=None, tag: int = 0) -> torch.Tensor:
    """Receive into ``tensor`` from rank ``src``; returns it."""
    dist.recv(tensor, src, group=group, tag=tag)
    return tensor
