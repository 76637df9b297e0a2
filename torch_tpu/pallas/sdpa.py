"""``F.scaled_dot_product_attention`` on a real TPU: the Pallas flash kernel.

Registered with ``ops.attention.sdpa.accelerated``: SDPA comes here only when
kernels are picked for a TPU (the device's platform, or the target of a TPU
lowering check: see target.py); elsewhere the interpreted kernel would only be
slower than the XLA-compiled fused op.
Cases the kernel does not cover (dropout, differing value head dim, nested or
non-4-D inputs) go on to the fused op or PyTorch's composite.
"""
import torch

from .. import target
from ..ops.attention import sdpa as attention


def on_tpu() -> bool:
    return target.kernel_platform() == "tpu"


def supported(query, key, value, attn_mask, dropout_p, enable_gqa) -> bool:
    if not on_tpu():
        return False
    if dropout_p or query.dim() != 4 or key.dim() != 4 or value.dim() != 4:
        return False
    if value.shape[-1] != query.shape[-1] or key.shape[-2] != value.shape[-2]:
        return False
    if key.shape[1] != query.shape[1] and not (enable_gqa and query.shape[1] % key.shape[1] == 0):
        return False
    return attn_mask is None or attn_mask.dtype == torch.bool or attn_mask.is_floating_point()


def run(query, key, value, attn_mask, is_causal, scale):
    from .ops import flash_attention
    return flash_attention(query, key, value, attn_mask, is_causal, scale)


attention.accelerated.append((supported, run))
