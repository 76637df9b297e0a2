"""The eval fast paths of nn.MultiheadAttention / nn.TransformerEncoderLayer on tpu.

The fused ops must run here (strict: a CPU fallback is an error) and match
PyTorch's CPU fast path.
"""
import copy

import pytest
import torch
import torch.nn as nn
from torch.utils._python_dispatch import TorchDispatchMode

import torch_tpu  # noqa: F401
from helpers import assert_same, sample, strict  # noqa: F401

B, L, E, HEADS = 2, 5, 8, 2

# (B, L) key padding: batch 0 keeps 3 tokens, batch 1 all 5
PADDING = torch.tensor([[False, False, False, True, True], [False] * 5])
CAUSAL = torch.ones(L, L, dtype=torch.bool).triu(1)
MHA = torch.ops.aten._native_multi_head_attention.default
LAYER = torch.ops.aten._transformer_encoder_layer_fwd.default


class _Ops(TorchDispatchMode):
    """Records the ATen ops dispatched while active."""

    def __init__(self):
        super().__init__()
        self.seen = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.seen.add(func)
        return func(*args, **(kwargs or {}))


def _both(module, *inputs, fused=(), **kwargs):
    """module on CPU and a tpu copy, in eval mode without autograd; the ``fused``
    ops must run on tpu (proof that the fast path was taken)."""
    module = module.eval()
    tpu_module = copy.deepcopy(module).to("tpu")
    moved = {}  # one tpu tensor per CPU one: MHA's fast path needs `query is key is value`

    def to_tpu(x):
        return moved.setdefault(id(x), x.to("tpu")) if isinstance(x, torch.Tensor) else x
    with torch.inference_mode():
        cpu = module(*inputs, **kwargs)
        with _Ops() as ops:
            tpu = tpu_module(*map(to_tpu, inputs), **{k: to_tpu(v) for k, v in kwargs.items()})
    assert set(fused) <= ops.seen, set(fused) - ops.seen
    return tpu, cpu


# ---- nn.MultiheadAttention ------------------------------------------------------

@pytest.mark.parametrize("need_weights", [False, True])
@pytest.mark.parametrize("average", [True, False])
@pytest.mark.parametrize("masks", ["none", "padding", "attn", "both"])
def test_mha_fast_path(need_weights, average, masks):
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(E, HEADS, batch_first=True)
    x = sample(B, L, E)
    kw = {"need_weights": need_weights, "average_attn_weights": average}
    if masks in ("padding", "both"):
        kw["key_padding_mask"] = PADDING
    if masks in ("attn", "both"):
        kw["attn_mask"] = CAUSAL
    tpu, cpu = _both(mha, x, x, x, fused=[MHA], **kw)
    assert_same(tpu[0], cpu[0])
    if need_weights:
        assert_same(tpu[1], cpu[1])
    else:
        assert tpu[1] is None and cpu[1] is None


def test_native_mha_op_masks():
    """The op itself: float masks read as bool, per-batch 4-D masks, a fully
    masked row (NaN, as on CPU), key/value other than the query."""
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(E, HEADS, batch_first=True)
    params = (mha.in_proj_weight, mha.in_proj_bias, mha.out_proj.weight, mha.out_proj.bias)
    x, y = sample(B, L, E), sample(B, L, E) * 2
    full = torch.rand(B, HEADS, L, L, generator=torch.Generator().manual_seed(1)) > 0.6
    full[1, 0, 2] = True  # one row with every key masked
    cases = [
        (x, x, x, torch.tensor([[0.0, -1.5, 0, 0, 0], [0, 0, 0, 0, float("-inf")]]), 1),
        (x, x, x, full, 2),
        (x, x, x, torch.zeros(full.shape).masked_fill(full, float("-inf")), 2),
        (x, y, y, torch.eye(L, dtype=torch.bool), 0),
    ]
    with torch.no_grad():
        for q, k, v, mask, mask_type in cases:
            for need_weights, average in ((True, True), (True, False), (False, True)):
                def f(q, k, v, mask, *params):
                    return torch._native_multi_head_attention(q, k, v, E, HEADS, *params, mask,
                                                              need_weights, average, mask_type)
                cpu = f(q, k, v, mask, *params)
                tpu = f(*(t.to("tpu") for t in (q, k, v, mask, *params)))
                assert_same(tpu[0], cpu[0])
                assert (tpu[1] is None) == (cpu[1] is None)
                if cpu[1] is not None:
                    assert_same(tpu[1], cpu[1])


# ---- nn.TransformerEncoderLayer ---------------------------------------------------

@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("masks", ["none", "padding", "both", "both_float"])
def test_encoder_layer_fast_path(norm_first, activation, masks):
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(E, HEADS, dim_feedforward=16, activation=activation,
                                       norm_first=norm_first, batch_first=True)
    kw = {}
    if masks != "none":
        kw["src_key_padding_mask"] = PADDING
    if masks.startswith("both"):
        kw["src_mask"] = CAUSAL
    if masks == "both_float":  # 0 / -inf, as generate_square_subsequent_mask makes them
        kw = {k: torch.zeros(m.shape).masked_fill(m, float("-inf")) for k, m in kw.items()}
    tpu, cpu = _both(layer, sample(B, L, E), fused=[LAYER], **kw)
    assert_same(tpu, cpu)


# ---- nn.TransformerEncoder --------------------------------------------------------

def _encoder(nested):
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(E, HEADS, dim_feedforward=16, batch_first=True)
    return nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=nested)


def test_encoder_without_nested_tensor():
    tpu, cpu = _both(_encoder(False), sample(B, L, E), fused=[LAYER], src_key_padding_mask=PADDING)
    assert_same(tpu, cpu)


def test_encoder_nested_path_raises_clear_error():
    encoder = _encoder(True).eval().to("tpu")
    with torch.inference_mode(), pytest.raises(NotImplementedError, match="enable_nested_tensor=False"):
        encoder(sample(B, L, E).to("tpu"), src_key_padding_mask=PADDING.to("tpu"))


def test_encoder_nested_path_skipped_for_unaligned_mask():
    """A padding mask that is not left-aligned keeps the padded batch, as on CPU."""
    mask = torch.tensor([[False, True, False, True, False], [False] * 5])
    left_aligned = torch.ops.aten._nested_tensor_from_mask_left_aligned.default
    tpu, cpu = _both(_encoder(True), sample(B, L, E), fused=[left_aligned, LAYER],
                     src_key_padding_mask=mask)
    assert_same(tpu, cpu)


@pytest.mark.parametrize("mask", [
    [[True, True, False, False], [True, True, True, True]],
    [[True, False, True, False], [True, True, True, True]],
    [[False, False, False, False], [True, False, False, False]],
    [[False, True, True, True], [True, True, True, False]],
])
def test_nested_tensor_from_mask_left_aligned(mask):
    t, mask = sample(2, 4, 3), torch.tensor(mask)
    got = torch._nested_tensor_from_mask_left_aligned(t.to("tpu"), mask.to("tpu"))
    assert type(got) is bool
    assert got == torch._nested_tensor_from_mask_left_aligned(t, mask)


def test_nested_tensor_from_mask_left_aligned_errors():
    t = sample(2, 4, 3).to("tpu")
    with pytest.raises(RuntimeError, match="Bool"):
        torch._nested_tensor_from_mask_left_aligned(t, torch.zeros(2, 4, device="tpu"))
    with pytest.raises(RuntimeError, match="Mask size"):
        torch._nested_tensor_from_mask_left_aligned(t, torch.ones(2, 3, dtype=torch.bool, device="tpu"))
