"""``torch.tpu.ops.splash_sdpa``: JAX's Pallas splash attention (block-sparse
flash attention whose mask skips whole blocks) as a torch op; interpreted off
a real TPU.  Gradients come from the kernel's own backward (its custom_vjp)."""
import functools
import math

import jax
import jax.numpy as jnp
import torch

from ..pallas import interpret
from ..pallas.api import jax_op


@functools.lru_cache(maxsize=64)
def _kernel(heads, q_len, kv_len, is_causal, window, block_q, block_kv, block_dkv, interpreted):
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as sk
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask as sm
    shape = (q_len, kv_len)
    if window is not None:  # the last `window` keys up to the query (causal) or either side
        mask = sm.LocalMask(shape, window_size=(window, 0 if is_causal else window), offset=0)
    elif is_causal:
        mask = sm.CausalMask(shape)
    else:
        mask = sm.FullMask(shape)
    bq, bkv, bdkv = min(block_q, q_len), min(block_kv, kv_len), min(block_dkv, kv_len)
    sizes = sk.BlockSizes(block_q=bq, block_kv=bkv, block_kv_compute=bkv, block_q_dkv=bq,
                          block_kv_dkv=bdkv, block_kv_dkv_compute=bdkv, block_q_dq=bq, block_kv_dq=bkv)
    with jax.ensure_compile_time_eval():  # its mask tables are constants, shared by every trace
        return sk.make_splash_mha(sm.MultiHeadMask([mask] * heads), block_sizes=sizes, head_shards=1,
                                  q_seq_shards=1, interpret=interpreted)


@jax_op("tpu::splash_attention")
def _splash(q: jax.Array, k: jax.Array, v: jax.Array, scale: float, is_causal: bool, window: int,
            block_q: int, block_kv: int, block_dkv: int) -> jax.Array:
    batch, heads, q_len, _ = q.shape
    kernel = _kernel(heads, q_len, k.shape[2], is_causal, window if window >= 0 else None,
                     block_q, block_kv, block_dkv, interpret.enabled())
    dtype = q.dtype
    out = jax.vmap(kernel)((q.astype(jnp.float32) * scale).astype(dtype), k, v)
    return out.astype(dtype)


@torch._dynamo.dont_skip_tracing  # torch_tpu is on Dynamo's skip list; this wrapper is plain torch
def splash_sdpa(q, k, v, *, scale=None, is_causal=True, local_window_size=None, enable_gqa=False,
                block_q=512, block_kv=512, block_dkv=512, **block_options):
    """``F.scaled_dot_product_attention`` on (batch, heads, seq, head_dim) tpu
    tensors through splash attention.  Masks: causal (top-left aligned, as
    PyTorch's ``is_causal``), none (``is_causal=False``), or a local window of
    ``local_window_size`` keys before each query (and after it, when not
    causal).  ``enable_gqa`` repeats the key/value heads for grouped queries.
    Sequence lengths must be multiples of 128; block sizes are rounded down
    to multiples of 128 and capped at the lengths; Google's other block
    options are accepted and ignored."""
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError("splash_sdpa expects 4-D (batch, heads, seq, head_dim) tensors")
    heads, kv_heads = q.shape[1], k.shape[1]
    if kv_heads != heads:
        if not enable_gqa or heads % kv_heads:
            raise ValueError(f"splash_sdpa: {heads} query heads and {kv_heads} key/value heads need "
                             "enable_gqa=True and a whole number of query heads per key head")
        k = k.repeat_interleave(heads // kv_heads, dim=1)
        v = v.repeat_interleave(heads // kv_heads, dim=1)
    for name, n in (("query", q.shape[2]), ("key", k.shape[2])):
        if n % 128:
            raise ValueError(f"splash_sdpa: the {name} length ({n}) must be a multiple of 128 "
                             "(splash attention's block granularity)")
    block_q, block_kv, block_dkv = (max(128, int(b) // 128 * 128) for b in (block_q, block_kv, block_dkv))
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    window = -1 if local_window_size is None else int(local_window_size)
    return _splash(q, k, v, scale, bool(is_causal), window, int(block_q), int(block_kv), int(block_dkv))
