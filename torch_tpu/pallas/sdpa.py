"""``F.scaled_dot_product_attention`` on a real TPU: the flash kernel.

Only installed when the platform is a TPU.  Elsewhere SDPA keeps PyTorch's
composite (matmul + softmax, which XLA fuses well on the CPU), and the
interpreted Pallas kernel would only be slower.  Cases the kernel does not
cover (dropout, differing value head dim, nested or non-4-D inputs) also take
the composite.
"""
import torch

from .. import runtime

_sdpa = torch.ops.aten.scaled_dot_product_attention.default
_LIB = None


def on_tpu() -> bool:
    return runtime.jax_device().platform == "tpu"


def supported(query, key, value, attn_mask, dropout_p, enable_gqa) -> bool:
    if dropout_p or query.dim() != 4 or key.dim() != 4 or value.dim() != 4:
        return False
    if value.shape[-1] != query.shape[-1] or key.shape[-2] != value.shape[-2]:
        return False
    if key.shape[1] != query.shape[1] and not (enable_gqa and query.shape[1] % key.shape[1] == 0):
        return False
    return attn_mask is None or attn_mask.dtype == torch.bool or attn_mask.is_floating_point()


def sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
         enable_gqa=False):
    """The AutogradPrivateUse1 kernel: flash when it applies, else the composite."""
    if on_tpu() and supported(query, key, value, attn_mask, dropout_p, enable_gqa):
        from .ops import flash_attention
        return flash_attention(query, key, value, attn_mask, is_causal, scale)
    return _sdpa.decompose(query, key, value, attn_mask, dropout_p, is_causal, scale=scale,
                           enable_gqa=enable_gqa)


def install() -> None:
    global _LIB
    if runtime.platform_name() != "tpu" or _LIB is not None:
        return
    _LIB = torch.library.Library("aten", "IMPL")
    # Autograd key: above it, the composite would already have decomposed SDPA.
    _LIB.impl(_sdpa, sdpa, "AutogradPrivateUse1")
