"""FlexAttention (``torch.nn.attention.flex_attention``) on tpu.

PyTorch runs FlexAttention outside ``torch.compile`` through its dense
implementation (scores materialized, ``score_mod``/``mask_mod`` vmapped over
them), which is ordinary ATen code and so runs on the tpu kernels; its
backward is dense ATen code too.  Only a device allow-list stands in the way,
so tpu is added to it.  Under ``torch.compile(backend="tpu")`` the
FlexAttention nodes are replaced by the same dense ATen ops and lowered with
the rest of the graph (``compile.rewrites.inline_dense_hops``).
"""
import torch.nn.attention.flex_attention as _flex

_checked_device = _flex._validate_device


def _validate_device(query, key, value):
    if query.device.type != "tpu":  # other devices keep PyTorch's rules
        _checked_device(query, key, value)


def install() -> None:
    _flex._validate_device = _validate_device
