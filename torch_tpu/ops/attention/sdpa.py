"""``F.scaled_dot_product_attention`` as one op forward and one op backward.

PyTorch leaves the choice of an SDPA backend for PrivateUse1 to a C++ stub a
Python backend cannot fill, so without help SDPA decomposes into about ten
ops each way (matmuls, a "safe" softmax with its mask checks, ...).  Instead
an AutogradPrivateUse1 kernel for ``scaled_dot_product_attention`` sends the
cases it covers to ``_scaled_dot_product_fused_attention_overrideable``, the
overload PyTorch reserves for out-of-tree backends: autograd, AOTAutograd and
the meta kernels already know it and its backward.  The kernels below compute
it in float32 (half types included, as PyTorch's CPU kernels accumulate),
keep the log-sum-exp for the backward, and give fully masked rows zeros, as
PyTorch's math path does.  Dropout and other shapes keep the composite.
"""
import math

import jax.numpy as jnp
import numpy as np
import torch
from torch.nn.attention import SDPBackend

from ... import precision
from ...storage import buffers, views
from ..registry import entry_of, kernel, register, register_raw, resolve

_SDPA = torch.ops.aten.scaled_dot_product_attention.default
_FUSED = resolve("_scaled_dot_product_fused_attention_overrideable.default")
_F32 = np.dtype(np.float32)


# ---- the math --------------------------------------------------------------

def _expand_heads(x, heads):
    """Grouped-query attention: repeat each key/value head for its query heads."""
    return x if x.shape[-3] == heads else jnp.repeat(x, heads // x.shape[-3], axis=-3)


def _reduce_heads(g, heads):
    """The gradient of ``_expand_heads``: sum each group back onto its head."""
    if g.shape[-3] == heads:
        return g
    return g.reshape(g.shape[:-3] + (heads, g.shape[-3] // heads) + g.shape[-2:]).sum(axis=-3)


def _scores(q, k, bias, is_causal, root_scale, dtype=_F32):
    """Scaled, masked attention scores in ``dtype`` (float32 here; the
    transformer fast paths pass float64 through).  Like PyTorch's math path,
    both operands are scaled by the square root of the scale: ``root_scale``
    is the (query's, key's) factors, the query's negative for a negative scale."""
    q_scale, k_scale = root_scale
    s = jnp.einsum("...qe,...ke->...qk", q.astype(dtype) * q_scale, k.astype(dtype) * k_scale,
                   precision=precision.for_operands(q))
    if is_causal:  # top-left aligned, as PyTorch's tril mask
        allowed = jnp.tril(jnp.ones(s.shape[-2:], bool))
        s = jnp.where(allowed, s, -jnp.inf)
    if bias is not None:
        s = jnp.where(bias, s, -jnp.inf) if bias.dtype == bool else s + bias.astype(dtype)
    return s


def _root_scale(q, scale):
    """The factors of the query and the key whose product is the scale, as
    PyTorch's math path splits it: the square root of its magnitude each, the
    query's negated for a negative scale (``math.sqrt`` refuses that one)."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    root = math.sqrt(abs(scale))
    return (-root if scale < 0 else root), root


def _unbroadcast(g, shape):
    """Sum ``g`` down to ``shape`` (the gradient of a broadcast)."""
    lead = g.ndim - len(shape)
    g = g.sum(axis=tuple(range(lead))) if lead else g
    axes = tuple(i for i, n in enumerate(shape) if n == 1 and g.shape[i] != 1)
    return g.sum(axis=axes, keepdims=True) if axes else g


def _fused_forward(query, key, value, attn_bias=None, dropout_p=0.0, is_causal=False,
                   return_debug_mask=False, scale=None):
    heads = query.shape[-3]
    k, v = _expand_heads(key, heads), _expand_heads(value, heads)
    s = _scores(query, k, attn_bias, is_causal, _root_scale(query, scale))
    m = jnp.max(s, axis=-1, keepdims=True, initial=-jnp.inf)  # (no keys: -inf, as a fully masked row)
    m = jnp.where(jnp.isfinite(m), m, 0.0)  # fully masked row: no shift, sum 0
    e = jnp.exp(s - m)
    total = jnp.sum(e, axis=-1, keepdims=True)
    p = jnp.where(total > 0, e / jnp.where(total > 0, total, 1.0), 0.0)
    out = jnp.einsum("...qk,...kd->...qd", p, v.astype(_F32), precision=precision.for_operands(query))
    lse = (m + jnp.log(total))[..., 0]
    if query.ndim == 3:  # the meta kernel's shape: (1, heads, L) for 3-D inputs
        lse = lse[None]
    return out.astype(query.dtype), lse


def _fused_backward(grad_out, query, key, value, attn_bias, grad_input_mask, out, logsumexp,
                    cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal, philox_seed,
                    philox_offset, scale=None):
    heads, kv_heads = query.shape[-3], key.shape[-3]
    root_scale = _root_scale(query, scale)
    q, k, v = (x.astype(_F32) for x in (query, _expand_heads(key, heads), _expand_heads(value, heads)))
    dout = grad_out.astype(_F32)
    prec = precision.for_operands(query)
    lse = logsumexp.reshape(query.shape[:-1])[..., None]
    s = _scores(query, k, attn_bias, is_causal, root_scale)
    p = jnp.where(jnp.isfinite(lse), jnp.exp(s - jnp.where(jnp.isfinite(lse), lse, 0.0)), 0.0)
    dp = jnp.einsum("...qd,...kd->...qk", dout, v, precision=prec)
    ds = p * (dp - jnp.sum(p * dp, axis=-1, keepdims=True))
    grads = []
    q_scale, k_scale = root_scale
    if grad_input_mask[0]:
        dq = jnp.einsum("...qk,...ke->...qe", ds, k * k_scale, precision=prec) * q_scale
        grads.append(dq.astype(query.dtype))
    if grad_input_mask[1]:
        dk = jnp.einsum("...qk,...qe->...ke", ds, q * q_scale, precision=prec) * k_scale
        grads.append(_reduce_heads(dk, kv_heads).astype(key.dtype))
    if grad_input_mask[2]:
        dv = jnp.einsum("...qk,...qd->...kd", p, dout, precision=prec)
        grads.append(_reduce_heads(dv, kv_heads).astype(value.dtype))
    if grad_input_mask[3]:
        grads.append(_unbroadcast(ds, attn_bias.shape).astype(attn_bias.dtype))
    return tuple(grads)


# ---- kernels ----------------------------------------------------------------

# Outputs laid out as the CPU's kernels lay them out: the attention like the
# query (``torch.empty_like``), the gradients of 4-D queries, keys and values
# in (batch, seq, heads, dim) order whatever their inputs' layout (its flash
# kernel), and as its math path leaves them where it takes that path.  For
# the usual query, a (batch, seq, heads, dim) projection transposed, the head
# merge after attention (``out.transpose(1, 2).reshape(...)``) and the
# gradients' way back through the projection's view are then views, not copies.
def _out_like_query(args, out_specs):
    return [views.laid_out_like(args[0], out_specs[0]), *out_specs[1:]]


def _grad_like_cpu(i, spec, args, math_path):
    if i == 3:  # the mask's
        return views.laid_out_like(args[4], spec)
    if not math_path:  # the CPU's flash kernel: (batch, seq, heads, dim) order
        return spec._replace(stride=views.dense_strides(spec.size, (0, 2, 1, 3)))
    if i == 1:  # the math path's: the key's gradient comes out of a transposed matmul
        n = len(spec.size)
        return spec._replace(stride=views.dense_strides(spec.size, (*range(n - 2), n - 1, n - 2)))
    return spec


def _grads_like_cpu(args, out_specs):
    mask = args[5] if len(args) > 5 else (True,) * 4  # grad_input_mask: which of q, k, v, bias
    # the CPU takes its math path for 3-D inputs and for a mask that needs a gradient
    math_path = args[1].dim() != 4 or mask[3]
    which = [i for i, wanted in enumerate(mask) if wanted]
    return [_grad_like_cpu(i, spec, args, math_path) for i, spec in zip(which, out_specs)]


# (its meta kernel returns the op's nine results; the kernel computes two)
_forward = kernel(_FUSED, _fused_forward, meta=False, layout=_out_like_query)
_enter_forward = entry_of(_forward)  # (its native entry when built: the cached call in C++)


class _ForwardInGraph:
    """The forward as a torch.compile graph runs it: the op's nine results."""
    opts = _forward.opts

    def promote_dtype(self, args, kwargs):
        return None

    def apply(self, args, kwargs, promote_dtype, out_dtypes, key=None):
        out, lse = _fused_forward(*args, **kwargs)
        no_seed = jnp.zeros((), jnp.int64)
        return [out, lse, None, None, args[0].shape[-2], args[1].shape[-2], no_seed, no_seed, None]


@register_raw("_scaled_dot_product_fused_attention_overrideable.default", graph=_ForwardInGraph())
def fused_attention(query, key, value, *args, **kwargs):
    out, lse = _enter_forward(query, key, value, *args, **kwargs)
    # No dropout here, so no RNG state to hand the backward (PyTorch's CUDA
    # kernels return empty seed/offset tensors in that case too; made here
    # without two trips through the dispatcher's empty).
    seed = buffers.allocate_like((), (), torch.long)
    offset = buffers.allocate_like((), (), torch.long)
    return out, lse, None, None, query.shape[-2], key.shape[-2], seed, offset, None


register("_scaled_dot_product_fused_attention_overrideable_backward.default",
         mask="grad_input_mask", layout=_grads_like_cpu)(_fused_backward)


# ---- routing F.scaled_dot_product_attention -----------------------------------

def fused_supported(query, key, value, attn_mask, dropout_p, is_causal, enable_gqa) -> bool:
    """Whether the fused kernels cover this call (else PyTorch's composite,
    which also raises PyTorch's errors for invalid ones)."""
    if dropout_p or query.dim() not in (3, 4) or key.dim() != query.dim() or value.dim() != query.dim():
        return False
    # the fused kernel computes in float32: float64 takes the composite, in float64 as the CPU
    if query.dtype not in (torch.float32, torch.bfloat16, torch.float16):
        return False
    if not query.dtype == key.dtype == value.dtype:
        return False
    if query.is_nested or key.is_nested or value.is_nested:
        return False
    if query.shape[-1] != key.shape[-1] or key.shape[-2] != value.shape[-2]:
        return False
    if query.shape[:-3] != key.shape[:-3] or key.shape[:-2] != value.shape[:-2]:
        return False
    heads, kv_heads = query.shape[-3], key.shape[-3]
    if heads != kv_heads and not (enable_gqa and heads % kv_heads == 0):
        return False
    if attn_mask is None:
        return True
    if is_causal or attn_mask.dim() > query.dim():
        return False
    if attn_mask.dtype != torch.bool and attn_mask.dtype != query.dtype:
        return False
    scores = tuple(query.shape[:-1]) + (key.shape[-2],)
    try:
        return torch.broadcast_shapes(attn_mask.shape, scores) == scores
    except RuntimeError:
        return False


def _causal_merges(query, key, value, attn_mask, dropout_p, is_causal, enable_gqa) -> bool:
    """Whether a mask with is_causal is computed as one mask (where the CPU's flash kernel takes the pair)."""
    return is_causal and attn_mask is not None and _flash_takes(query, key, value, attn_mask, dropout_p, enable_gqa)


def _flash_takes(query, key, value, attn_mask, dropout_p, enable_gqa) -> bool:
    """Whether the CPU's flash kernel takes this call with both a mask and is_causal (PyTorch's
    math path refuses the pair; so does the CPU for a call its flash kernel does not cover, or
    under ``sdpa_kernel`` without it)."""
    if not (torch._C._get_flash_sdp_enabled() or torch._C._get_overrideable_sdp_enabled()):
        return False
    if dropout_p or attn_mask.requires_grad or any(t.dim() != 4 or t.stride(-1) != 1 for t in (query, key, value)):
        return False
    if query.is_nested or key.is_nested or value.is_nested or query.dtype not in _FLASH_DTYPES:
        return False
    (batch, heads, length, dim), (kv_batch, kv_heads, keys, _) = query.shape, key.shape
    if not (batch == kv_batch == value.shape[0] and dim == key.shape[-1] == value.shape[-1]):
        return False
    if kv_heads != value.shape[1] or (heads != kv_heads and not (enable_gqa and heads % kv_heads == 0)):
        return False
    mask = attn_mask.shape
    if attn_mask.dim() not in (2, 4) or mask[-2] not in (1, length) or mask[-1] not in (1, keys):
        return False
    return attn_mask.dim() == 2 or (mask[0] in (1, batch) and mask[1] in (1, heads))


_FLASH_DTYPES = (torch.float32, torch.float64, torch.bfloat16, torch.float16)


def _causal_into_mask(query, key, attn_mask):
    """The mask with the top-left causal one applied too: where both allow attention."""
    allowed = torch.ones(query.shape[-2], key.shape[-2], dtype=torch.bool, device=query.device).tril()
    if attn_mask.dtype == torch.bool:
        return attn_mask.logical_and(allowed)
    return attn_mask.masked_fill(allowed.logical_not(), float("-inf"))


@register_raw("_fused_sdp_choice.default")
def fused_sdp_choice(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, *, scale=None,
                     enable_gqa=False):
    """The backend ``scaled_dot_product_attention`` takes for these arguments, as an
    ``SDPBackend`` value: the out-of-tree backends' overload where the fused kernels
    cover the call, else the math composite (the CPU's choice, which answered before,
    names its own flash kernel)."""
    if _causal_merges(query, key, value, attn_mask, dropout_p, is_causal, enable_gqa):
        is_causal = False  # (merged into the mask, which keeps its shape and dtype)
    if fused_supported(query, key, value, attn_mask, dropout_p, is_causal, enable_gqa):
        return SDPBackend.OVERRIDEABLE.value
    return SDPBackend.MATH.value


# Faster SDPA kernels tried first, as (covers(query, key, value, attn_mask,
# dropout_p, enable_gqa) -> bool, run(query, key, value, attn_mask, is_causal,
# scale)): the pallas package adds its flash kernel for a real TPU.
accelerated: list = []


@register_raw("scaled_dot_product_attention.default", dispatch_key="AutogradPrivateUse1")
def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False,
                                 scale=None, enable_gqa=False):
    """The AutogradPrivateUse1 kernel (above it the composite would already have
    decomposed SDPA): an accelerated kernel that covers the call (Pallas flash
    on a real TPU), else the fused overload, else PyTorch's composite.  A mask
    with is_causal, which the CPU's flash kernel takes and PyTorch's math path
    refuses, becomes one mask where the CPU would take its flash kernel."""
    if _causal_merges(query, key, value, attn_mask, dropout_p, is_causal, enable_gqa):
        attn_mask, is_causal = _causal_into_mask(query, key, attn_mask), False
    for covers, run in accelerated:
        if covers(query, key, value, attn_mask, dropout_p, enable_gqa):
            return run(query, key, value, attn_mask, is_causal, scale)
    if fused_supported(query, key, value, attn_mask, dropout_p, is_causal, enable_gqa):
        return _FUSED(query, key, value, attn_mask, 0.0, is_causal, False, scale=scale)[0]
    return _SDPA.decompose(query, key, value, attn_mask, dropout_p, is_causal, scale=scale,
                           enable_gqa=enable_gqa)

