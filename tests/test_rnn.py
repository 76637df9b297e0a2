"""Recurrent layers on tpu against PyTorch's CPU results.  On accelerators ATen
runs LSTM and GRU steps through fused cell ops that the CPU never uses, so
these compare two different computations of the same layer."""
import warnings

import pytest
import torch

from helpers import assert_same, strict, to_cpu  # noqa: F401  (strict: no CPU fallback)


def _run(module_fn, device, dtype=torch.float32, seq=5, batch=2, features=3, hidden_out=True):
    torch.manual_seed(0)
    module = module_fn().to(device, dtype)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(seq, batch, features, generator=g).to(device, dtype).requires_grad_()
    y, h = module(x)
    h = h[0] if isinstance(h, tuple) else h
    (y.float().pow(2).sum() + h.float().sum()).backward()
    return [y, h, x.grad] + [p.grad for p in module.parameters()]


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
@pytest.mark.parametrize("options", [dict(), dict(bias=False), dict(num_layers=2, bidirectional=True)],
                         ids=["plain", "no-bias", "2-layer-bidirectional"])
def test_recurrent_layer_forward_and_backward(kind, options):
    def build():
        return getattr(torch.nn, kind)(3, 5, **options)
    assert_same(_run(build, "tpu"), _run(build, "cpu"), atol=1e-5, rtol=1e-5)


@pytest.mark.filterwarnings("ignore:LSTM with projections is not supported with oneDNN")  # the CPU reference's
def test_lstm_projection_and_bfloat16():
    def build():
        return torch.nn.LSTM(3, 5, proj_size=2)
    assert_same(_run(build, "tpu"), _run(build, "cpu"), atol=1e-5, rtol=1e-5)
    def gru():
        return torch.nn.GRU(3, 5)
    assert_same(_run(gru, "tpu", torch.bfloat16), _run(gru, "cpu", torch.bfloat16), atol=2e-2, rtol=2e-2)


def test_cells_and_double_backward():
    def run(device):
        torch.manual_seed(0)
        lstm, gru = torch.nn.LSTMCell(3, 4).to(device), torch.nn.GRUCell(3, 4).to(device)
        x = torch.randn(5, 3, generator=torch.Generator().manual_seed(1)).to(device).requires_grad_()
        h, c = lstm(x)
        h2 = gru(x, h)
        # create_graph: autograd takes the differentiable (non-fused) backward formulas
        (gx,) = torch.autograd.grad(h2.pow(2).sum() + c.sum(), x, create_graph=True)
        gx.pow(2).sum().backward()
        return [h, c, h2, gx, lstm.weight_ih.grad, gru.bias_hh.grad]
    assert_same(run("tpu"), run("cpu"), atol=1e-5, rtol=1e-5)


def test_packed_sequence_gru():
    def run(device):
        torch.manual_seed(0)
        gru = torch.nn.GRU(3, 4).to(device)
        x = torch.randn(5, 2, 3, generator=torch.Generator().manual_seed(1)).to(device)
        packed = torch.nn.utils.rnn.pack_padded_sequence(x, torch.tensor([5, 3]))
        y, h = gru(packed)
        return [torch.nn.utils.rnn.pad_packed_sequence(y)[0], h]
    assert_same(run("tpu"), run("cpu"), atol=1e-5, rtol=1e-5)


def test_compiled_lstm_training_step_matches_eager():
    def run(compiled):
        torch.manual_seed(0)
        lstm = torch.nn.LSTM(3, 4).to("tpu")
        x = torch.randn(4, 2, 3, generator=torch.Generator().manual_seed(1)).to("tpu")

        def loss_fn(x):
            return lstm(x)[0].pow(2).sum()
        fn = torch.compile(loss_fn, backend="tpu") if compiled else loss_fn
        with warnings.catch_warnings():  # the graphs must lower, not run op by op
            warnings.filterwarnings("error", message="torch_tpu: torch.compile")
            loss = fn(x)
            loss.backward()
        return [loss, lstm.weight_hh_l0.grad, lstm.bias_ih_l0.grad]
    assert_same(run(True), to_cpu(run(False)), atol=1e-5, rtol=1e-5)
