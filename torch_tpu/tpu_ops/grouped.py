"""``torch.tpu.ops``: optimization_barrier, ragged_dot (grouped matmul for
mixture-of-experts) and its weight gradient, and the jagged-tensor padding
helpers.  Each op is a ``jax_op`` (a torch custom op backed by a registry
kernel), so it runs in every eager mode, inside torch.compile graphs, and
under autograd.
"""
import jax
import jax.numpy as jnp
import numpy as np
import torch

from .. import precision
from ..pallas.api import jax_op


@jax_op("tpu::optimization_barrier")
def _barrier(tensors: list[jax.Array]) -> list[jax.Array]:
    return list(jax.lax.optimization_barrier(tuple(tensors)))


def _barrier_backward(ctx, grads):
    # the identity's gradient, kept behind a barrier of its own
    grads = [torch.zeros(shape, dtype=dtype, device=ctx.device) if g is None else g
             for g, (shape, dtype) in zip(grads, ctx.metas)]
    return list(_barrier(grads))


def _barrier_context(ctx, inputs, output):
    ctx.metas = [(t.shape, t.dtype) for t in inputs[0]]
    ctx.device = inputs[0][0].device


_barrier.register_autograd(_barrier_backward, setup_context=_barrier_context)


@torch._dynamo.dont_skip_tracing  # torch_tpu is on Dynamo's skip list; this wrapper is plain torch
def optimization_barrier(*tensors):
    """XLA's optimization barrier: the values come back unchanged, but XLA may
    not move computation across it (e.g. to keep a rematerialisation where it
    is).  Takes one tensor (returned alone), several, or one list of them
    (returned as a tuple)."""
    single = len(tensors) == 1 and isinstance(tensors[0], torch.Tensor)
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    if not tensors:
        return ()
    out = tuple(_barrier(list(tensors)))
    return out[0] if single else out


def _acc(a, b):
    dtype = jnp.result_type(a, b)
    return np.dtype(np.float32) if dtype in (jnp.bfloat16, jnp.float16) else dtype


@jax_op("tpu::ragged_dot")
def _ragged_dot(lhs: jax.Array, rhs: jax.Array, group_sizes: jax.Array) -> jax.Array:
    out = jax.lax.ragged_dot(lhs, rhs, group_sizes.astype(jnp.int32),
                             precision=precision.for_operands(lhs, rhs),
                             preferred_element_type=_acc(lhs, rhs))
    return out.astype(jnp.result_type(lhs, rhs))


def _weight_grad(lhs, grad, group_sizes):
    """d(ragged_dot)/d(rhs): for each group g, lhs[rows of g].T @ grad[rows of g]."""
    groups = group_sizes.shape[0]
    zeros = jnp.zeros((groups, lhs.shape[1], grad.shape[1]), lhs.dtype)
    _, pullback = jax.vjp(lambda r: jax.lax.ragged_dot(lhs, r, group_sizes.astype(jnp.int32),
                                                       precision=precision.for_operands(lhs, grad),
                                                       preferred_element_type=_acc(lhs, grad)), zeros)
    return pullback(grad.astype(_acc(lhs, grad)))[0].astype(lhs.dtype)


@jax_op("tpu::ragged_dot_weight_grad")
def _ragged_dot_weight_grad(lhs: jax.Array, grad: jax.Array, group_sizes: jax.Array) -> jax.Array:
    return _weight_grad(lhs, grad, group_sizes)


@_ragged_dot.def_backward
def _ragged_dot_backward(lhs, rhs, group_sizes, grad):
    sizes = group_sizes.astype(jnp.int32)
    acc = _acc(lhs, rhs)
    # rows of group g times rhs[g].T: a ragged_dot against the transposed weights
    grad_lhs = jax.lax.ragged_dot(grad.astype(acc), jnp.swapaxes(rhs, 1, 2).astype(acc), sizes,
                                  precision=precision.for_operands(lhs, rhs))
    return grad_lhs.astype(lhs.dtype), _weight_grad(lhs, grad, group_sizes).astype(rhs.dtype), None


@torch._dynamo.dont_skip_tracing
def _check_ragged(lhs, rhs, group_sizes, what="rhs"):
    if lhs.dim() != 2 or rhs.dim() != 3:
        raise RuntimeError(f"ragged_dot: expected lhs (m, k) and {what} (groups, k, n), got "
                           f"{list(lhs.shape)} and {list(rhs.shape)}")
    if group_sizes.dim() != 1 or group_sizes.shape[0] != rhs.shape[0]:
        raise RuntimeError(f"ragged_dot: group_sizes must be 1-D with one entry per group "
                           f"({rhs.shape[0]}), got shape {list(group_sizes.shape)}")
    if group_sizes.is_floating_point() or group_sizes.is_complex():
        raise RuntimeError(f"ragged_dot: group_sizes must be integers, got {group_sizes.dtype}")
    if lhs.shape[1] != rhs.shape[1]:
        raise RuntimeError(f"ragged_dot: lhs has {lhs.shape[1]} columns but {what} has {rhs.shape[1]} rows per group")


@torch._dynamo.dont_skip_tracing
def ragged_dot(lhs: torch.Tensor, rhs: torch.Tensor, group_sizes: torch.Tensor) -> torch.Tensor:
    """Grouped matmul (``jax.lax.ragged_dot``): the rows of ``lhs`` (m, k) come
    in consecutive groups of ``group_sizes`` (groups,) rows; group g is
    multiplied by ``rhs[g]`` (k, n).  Rows past ``group_sizes.sum()`` come out 0."""
    _check_ragged(lhs, rhs, group_sizes)
    return _ragged_dot(lhs, rhs, group_sizes)


@torch._dynamo.dont_skip_tracing
def ragged_dot_weight_grad(lhs: torch.Tensor, grad: torch.Tensor, group_sizes: torch.Tensor) -> torch.Tensor:
    """The gradient of ``ragged_dot`` with respect to ``rhs``: (groups, k, n),
    group g being ``lhs[rows of g].T @ grad[rows of g]``."""
    if lhs.dim() != 2 or grad.dim() != 2 or lhs.shape[0] != grad.shape[0]:
        raise RuntimeError(f"ragged_dot_weight_grad: expected lhs (m, k) and grad (m, n), got "
                           f"{list(lhs.shape)} and {list(grad.shape)}")
    if group_sizes.dim() != 1:
        raise RuntimeError("ragged_dot_weight_grad: group_sizes must be 1-D")
    return _ragged_dot_weight_grad(lhs, grad, group_sizes)


# ---- jagged (nested) tensors --------------------------------------------------------

@torch._dynamo.dont_skip_tracing
def align_jagged_to_multiple(nt: torch.Tensor, multiple: int = 128, padding_value=0.0) -> torch.Tensor:
    """Pad a ``torch.jagged`` nested tensor's flat values to a multiple of
    ``multiple`` rows (``padding_value`` rows at the end), keeping its offsets:
    fewer distinct shapes to compile, and full MXU tiles."""
    from torch.nested._internal.nested_tensor import nested_view_from_values_offsets
    if multiple < 1:
        raise ValueError(f"align_jagged_to_multiple: multiple must be positive, got {multiple}")
    values = nt.values()
    short = -values.shape[0] % multiple
    if not short:
        return nt
    pad = torch.full((short, *values.shape[1:]), padding_value, dtype=values.dtype, device=values.device)
    return nested_view_from_values_offsets(torch.cat([values, pad]), nt.offsets())


@torch._dynamo.dont_skip_tracing
def strip_jagged_padding(nt: torch.Tensor, valid_tokens: int = None) -> torch.Tensor:
    """Drop the padding rows ``align_jagged_to_multiple`` added (a view).
    ``valid_tokens`` (the real row count, if the host knows it) saves reading
    ``offsets[-1]`` back from the device."""
    from torch.nested._internal.nested_tensor import nested_view_from_values_offsets
    offsets = nt.offsets()
    if valid_tokens is None:
        valid_tokens = int(offsets[-1].item()) if offsets.numel() else 0
    if nt.values().shape[0] == valid_tokens:
        return nt
    return nested_view_from_values_offsets(nt.values()[:valid_tokens], offsets)
