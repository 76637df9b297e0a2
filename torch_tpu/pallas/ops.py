"""The built-in Pallas kernels as torch ops on tpu tensors (part of ``torch.tpu.ops``).

Each is a ``jax_op`` around a kernel in ``kernels/``; gradients come from the
kernels' own backward passes (``jax.vjp`` reaches their ``custom_vjp``).
"""
import math

import jax
import torch

from .. import import_hook
from .api import jax_op
from .kernels import flash_attention as _fa, rms_norm as _rms


@jax_op("torch_tpu::flash_attention")
def _flash(q: jax.Array, k: jax.Array, v: jax.Array, is_causal: bool, scale: float,
           block_q: int, block_k: int) -> jax.Array:
    return _fa.flash_attention(q, k, v, None, causal=is_causal, scale=scale,
                               block_q=block_q, block_k=block_k)


@jax_op("torch_tpu::flash_attention_masked")
def _flash_masked(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array, is_causal: bool,
                  scale: float, block_q: int, block_k: int) -> jax.Array:
    return _fa.flash_attention(q, k, v, mask, causal=is_causal, scale=scale,
                               block_q=block_q, block_k=block_k)


@jax_op("torch_tpu::rms_norm")
def _rms_norm(x: jax.Array, weight: jax.Array, normalized_dims: int, eps: float) -> jax.Array:
    return _rms.rms_norm(x, weight, eps, normalized_dims=normalized_dims)


def _allow_in_graph(fn):
    """``torch._dynamo.allow_in_graph(fn)`` once Dynamo is imported (now if it
    is): torch_tpu does not import it itself (compile/__init__.py)."""
    import_hook.after_import("torch._dynamo", lambda dynamo: dynamo.allow_in_graph(fn))
    return fn


# Dynamo skips torch_tpu's Python (compile/__init__.py): without allow_in_graph
# a call from compiled code would break the graph and run eagerly.
@_allow_in_graph
def flash_attention(query, key, value, attn_mask=None, is_causal=False, scale=None, *,
                    block_q=128, block_k=128):
    """Flash attention (Pallas) on (B, H, L, D) tpu tensors, with
    ``F.scaled_dot_product_attention``'s meaning for ``attn_mask`` (boolean:
    True attends; float: added to the scores; gets no gradient), ``is_causal``
    and ``scale``.  ``key``/``value`` may have fewer heads (GQA)."""
    if query.dim() != 4 or key.dim() != 4 or value.dim() != 4:
        raise ValueError("flash_attention expects 4-D (batch, heads, seq, head_dim) tensors")
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else float(scale)
    if attn_mask is None:
        return _flash(query, key, value, bool(is_causal), scale, int(block_q), int(block_k))
    while attn_mask.dim() < 4:
        attn_mask = attn_mask.unsqueeze(0)
    return _flash_masked(query, key, value, attn_mask, bool(is_causal), scale,
                         int(block_q), int(block_k))


@_allow_in_graph
def rms_norm(input, normalized_shape, weight=None, eps=None):
    """``F.rms_norm`` as one fused Pallas kernel (forward and backward)."""
    normalized_shape = ((normalized_shape,) if isinstance(normalized_shape, int)
                        else tuple(normalized_shape))
    if tuple(input.shape[input.dim() - len(normalized_shape):]) != normalized_shape:
        raise RuntimeError(f"rms_norm: normalized_shape {list(normalized_shape)} does not match "
                           f"the trailing dims of an input of shape {list(input.shape)}")
    if eps is None:
        eps = torch.finfo(input.dtype).eps
    if weight is None:
        weight = torch.ones(normalized_shape, dtype=input.dtype, device=input.device)
    return _rms_norm(input, weight, len(normalized_shape), float(eps))

