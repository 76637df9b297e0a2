"""FlexAttention on tpu: PyTorch's dense implementation over the tpu kernels in
eager, and lowered whole (forward and backward) under torch.compile."""
import math

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention.flex_attention import AuxRequest, create_block_mask, flex_attention

import torch_tpu
from helpers import assert_same, sample, strict  # noqa: F401  (strict: no CPU fallback)

B, HQ, HKV, L, E = 2, 4, 2, 128, 16


def _causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def _inputs():
    q, k, v = sample(B, HQ, L, E), sample(B, HKV, L, E) * 0.5, sample(B, HKV, L, E) - 1
    return q, k, v


def _score_mod(bias):
    """A relative-position bias plus a per-head bias read from a captured tensor."""
    def score_mod(score, b, h, q_idx, kv_idx):
        return score + (q_idx - kv_idx) * 0.01 + bias[h]
    return score_mod


def _run(device, q, k, v, attend=flex_attention, **kwargs):
    bias = torch.linspace(-1, 1, HQ).to(device)
    mask = create_block_mask(_causal, B, 1, L, L, device=device)
    return attend(q, k, v, block_mask=mask, score_mod=_score_mod(bias), enable_gqa=True, **kwargs)


def _reference(q, k, v):
    """The same attention written out in float64 on the CPU (which has no
    FlexAttention backward): scores, score_mod, causal mask, softmax."""
    groups = HQ // HKV
    k, v = k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(E)
    pos = torch.arange(L, dtype=torch.float64)
    scores = scores + (pos[:, None] - pos[None, :]) * 0.01 + torch.linspace(-1, 1, HQ, dtype=torch.float64)[:, None, None]
    causal = torch.ones(L, L, dtype=torch.bool).tril()
    return F.softmax(scores.masked_fill(~causal, -math.inf), -1) @ v


def _grads(out, inputs):
    out.square().sum().backward()
    return [x.grad for x in inputs]


def test_eager_forward_matches_cpu():
    q, k, v = _inputs()
    want = _run("cpu", q, k, v)
    assert_same(_run("tpu", q.to("tpu"), k.to("tpu"), v.to("tpu")), want)


def test_eager_gradients_match_a_float64_reference():
    q, k, v = (x.double().requires_grad_() for x in _inputs())
    want = _grads(_reference(q, k, v), (q, k, v))
    tpu = [x.detach().float().to("tpu").requires_grad_() for x in (q, k, v)]
    got = _grads(_run("tpu", *tpu), tpu)
    for g, w in zip(got, want):
        assert_same(g, w.float(), atol=2e-5, rtol=1e-4)


def test_compiled_lowers_whole_and_matches_eager():
    q, k, v = _inputs()
    eager_in = [x.to("tpu").requires_grad_() for x in (q, k, v)]
    eager_out = _run("tpu", *eager_in)
    eager_grads = _grads(eager_out, eager_in)

    compiled_in = [x.to("tpu").requires_grad_() for x in (q, k, v)]
    before = torch_tpu.compile.stats.as_dict()
    compiled_out = _run("tpu", *compiled_in, attend=torch.compile(flex_attention, backend="tpu"))
    compiled_grads = _grads(compiled_out, compiled_in)
    after = torch_tpu.compile.stats.as_dict()
    # forward and backward graphs became XLA executables, none ran on the eager kernels
    assert after["compiles"] >= before["compiles"] + 2
    assert after["eager_fallbacks"] == before["eager_fallbacks"]
    assert_same(compiled_out, eager_out.detach().cpu())
    for g, w in zip(compiled_grads, eager_grads):
        assert_same(g, w.cpu(), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_log_sum_exp_matches_cpu(compiled):
    q, k, v = _inputs()
    attend = torch.compile(flex_attention, backend="tpu") if compiled else flex_attention
    out, aux = _run("tpu", q.to("tpu"), k.to("tpu"), v.to("tpu"), attend=attend,
                    return_aux=AuxRequest(lse=True))
    want_out, want_aux = _run("cpu", q, k, v, return_aux=AuxRequest(lse=True))
    assert_same(out, want_out)
    assert_same(aux.lse, want_aux.lse)


def test_other_devices_keep_pytorchs_rules():
    q = sample(1, 1, 16, 8).requires_grad_()
    with pytest.raises(NotImplementedError, match="backward on CPU"):
        flex_attention(q, q, q)
