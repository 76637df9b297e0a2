"""The eval fast paths of ``nn.MultiheadAttention`` and ``nn.TransformerEncoderLayer``.

Without autograd, in eval mode, both modules hand a privateuse1 input to one
fused ATen op: ``_native_multi_head_attention`` (input projection, masked
softmax attention, output projection) and ``_transformer_encoder_layer_fwd``
(that attention plus residuals, layer norms and the feed-forward block).  Each
is one jitted JAX function here, following ATen's CPU kernels, which differ
from ``F.scaled_dot_product_attention`` in two ways: a float mask is read as a
bool one (nonzero: masked; the modules pass 0/-inf), and a row whose keys are
all masked comes out NaN, not zero.

``nn.TransformerEncoder`` (``enable_nested_tensor=True``) also packs a padded
batch into a nested tensor on that path.  Nested tensors do not exist on tpu,
so that op raises an error naming the way around it.
"""
import jax
import jax.numpy as jnp
import torch

from ... import precision
from ...dtypes import to_opmath
from ..linalg import matmul
from ..nn import native_layer_norm
from ..registry import kernel, register, register_raw
from .sdpa import _root_scale, _scores


def _linear(x, weight, bias):
    return matmul(x, weight.T) + bias


def _allowed(mask, mask_type):
    """Where attention may look, broadcastable to the (B, heads, L, S) scores.
    ``mask_type`` 1 is a (B, S) key padding mask, 0 an (L, S) attention mask,
    2 a merged (B, heads, L, S) one, as ``MultiheadAttention.merge_masks`` makes them."""
    if mask is None:
        return None
    allowed = ~mask.astype(bool)  # ATen casts the mask to bool: any nonzero value masks
    if mask.ndim == 2 and mask_type == 1:
        return allowed[:, None, None, :]
    return allowed


def _attention(query, key, value, embed_dim, num_head, qkv_weight, qkv_bias, proj_weight,
               proj_bias, mask, mask_type):
    """Self-attention output (B, L, E) and weights (B, heads, L, S), in the accumulation dtype."""
    (wq, wk, wv), (bq, bk, bv) = jnp.split(to_opmath(qkv_weight), 3), jnp.split(to_opmath(qkv_bias), 3)

    def heads(x, w, b):  # (B, T, E) -> (B, heads, T, E / heads)
        y = _linear(to_opmath(x), w, b)
        return y.reshape(y.shape[:2] + (num_head, embed_dim // num_head)).swapaxes(1, 2)

    q, k, v = heads(query, wq, bq), heads(key, wk, bk), heads(value, wv, bv)
    s = _scores(q, k, _allowed(mask, mask_type), False, _root_scale(q, None), dtype=q.dtype)
    p = jax.nn.softmax(s, axis=-1)  # all keys masked: NaN, as ATen's _masked_softmax
    ctx = jnp.einsum("bhqk,bhkd->bhqd", p, v, precision=precision.for_operands(v))
    ctx = ctx.swapaxes(1, 2).reshape(ctx.shape[0], ctx.shape[2], embed_dim)
    return _linear(ctx, to_opmath(proj_weight), to_opmath(proj_bias)), p


# ---- _native_multi_head_attention ------------------------------------------------

def _mha(query, key, value, embed_dim, num_head, qkv_weight, qkv_bias, proj_weight, proj_bias,
         mask=None, need_weights=True, average_attn_weights=True, mask_type=None):
    out, p = _attention(query, key, value, embed_dim, num_head, qkv_weight, qkv_bias,
                        proj_weight, proj_bias, mask, mask_type)
    if not need_weights:
        return out.astype(query.dtype)
    if average_attn_weights:
        p = p.sum(axis=1) / num_head
    return out.astype(query.dtype), p.astype(query.dtype)


# no meta kernel in PyTorch: result shapes come from tracing _mha
_MHA = kernel("_native_multi_head_attention.default", _mha, meta=False)


def _check_mha(query, key, value, embed_dim, num_head, mask, mask_type):
    """ATen's argument checks (errors the JAX code would report less clearly)."""
    torch._check(query.dim() == 3 and key.dim() == 3 and value.dim() == 3,
                 lambda: "expected 3-D `query`, `key` and `value`")
    torch._check(query.shape == key.shape == value.shape,
                 lambda: "expected `query`/`key`/`value` shapes to match")
    torch._check(query.shape[2] == embed_dim,
                 lambda: f"passed-in embed_dim {embed_dim} didn't match last dim of query")
    torch._check(embed_dim % num_head == 0, lambda: "`embed_dim` must divide evenly by `num_heads`")
    torch._check(mask is None or mask_type is not None, lambda: "Mask Type should be defined")


def native_multi_head_attention(query, key, value, embed_dim, num_head, qkv_weight, qkv_bias,
                                proj_weight, proj_bias, mask=None, need_weights=True,
                                average_attn_weights=True, mask_type=None):
    _check_mha(query, key, value, embed_dim, num_head, mask, mask_type)
    need_weights = need_weights and query.numel() > 0  # ATen returns no weights for empty input
    outs = _MHA(query, key, value, embed_dim, num_head, qkv_weight, qkv_bias, proj_weight,
                proj_bias, mask, need_weights, average_attn_weights, mask_type)
    return outs if need_weights else (outs, None)  # None: ATen's undefined weights


class _MhaInGraph:
    """How a torch.compile graph runs the op: (out, None) without weights."""
    opts = _MHA.opts

    def promote_dtype(self, args, kwargs):
        return None

    def apply(self, args, kwargs, promote_dtype, out_dtypes, key=None):
        outs = _MHA.apply(args, kwargs, None, None, key)
        return outs + [None] * (2 - len(outs))


register_raw("_native_multi_head_attention.default", graph=_MhaInGraph())(native_multi_head_attention)


# ---- _transformer_encoder_layer_fwd -----------------------------------------------

@register("_transformer_encoder_layer_fwd.default", meta=False)
def transformer_encoder_layer_fwd(src, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight,
                                  proj_bias, use_gelu, norm_first, eps, norm_weight_1, norm_bias_1,
                                  norm_weight_2, norm_bias_2, ffn_weight_1, ffn_bias_1,
                                  ffn_weight_2, ffn_bias_2, mask=None, mask_type=None):
    """ATen's order: pre- or post-norm residual attention, then the same around the FFN."""
    def norm(x, weight, bias):
        return native_layer_norm(x, (embed_dim,), weight, bias, eps)[0]

    def ffn(x):
        h = _linear(x, to_opmath(ffn_weight_1), to_opmath(ffn_bias_1))
        h = jax.nn.gelu(h, approximate=False) if use_gelu else jnp.maximum(h, 0)
        return _linear(h, to_opmath(ffn_weight_2), to_opmath(ffn_bias_2))

    x = to_opmath(src)
    h = norm(x, norm_weight_1, norm_bias_1) if norm_first else x
    x = x + _attention(h, h, h, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight,
                       proj_bias, mask, mask_type)[0]
    if not norm_first:
        x = norm(x, norm_weight_1, norm_bias_1)
    h = norm(x, norm_weight_2, norm_bias_2) if norm_first else x
    x = x + ffn(h)
    if not norm_first:
        x = norm(x, norm_weight_2, norm_bias_2)
    return x.astype(src.dtype)


# ---- nested tensors (nn.TransformerEncoder) ---------------------------------------

def _left_aligned(t, mask):
    """Each row of the mask is a run of True then only False."""
    lengths = mask.sum(axis=1, keepdims=True)
    return jnp.all(mask == (jnp.arange(mask.shape[1]) < lengths))


_LEFT_ALIGNED = kernel("_nested_tensor_from_mask_left_aligned.default", _left_aligned, meta=False)


@register_raw("_nested_tensor_from_mask_left_aligned.default")
def nested_tensor_from_mask_left_aligned(t, mask):
    torch._check(mask.dtype == torch.bool,
                 lambda: f"Expected mask to be of ScalarType Bool, but got {mask.dtype} instead.")
    torch._check(mask.dim() == 2, lambda: "Padding mask should be 2D")
    torch._check(t.dim() == 3, lambda: "Input should be a 3D tensor, N * L * D")
    torch._check(tuple(t.shape[:2]) == tuple(mask.shape), lambda: "Mask size should match input size")
    return bool(_LEFT_ALIGNED(t, mask).item())  # the op returns a Python bool


@register_raw("_nested_tensor_from_mask.default")
def nested_tensor_from_mask(t, mask, mask_check=True):
    raise NotImplementedError(
        "torch_tpu: nested tensors are not supported on tpu (aten::_nested_tensor_from_mask). "
        "nn.TransformerEncoder takes this path in eval mode without autograd when given a "
        "src_key_padding_mask; build it with enable_nested_tensor=False to avoid it "
        "(the padded batch then runs as is, with the mask).")
