"""torch.tpu.optimizers: the functional optimizers against torch.optim, and
SingleTraceTrainer (forward + backward + update as one executable) against
the eager training loop."""
import copy
import dataclasses
import os
import sys

import pytest
import torch
import torch.nn as nn

from torch_tpu.eager import pending
from torch_tpu.storage import buffers

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
import models  # noqa: E402  (benchmarks/models.py: the tiny GPT and the CNN)

optimizers = torch.tpu.optimizers


class _Launches:
    """Counts executables launched (every launch notes its results for synchronize)."""

    def __init__(self, monkeypatch):
        self.count = 0
        original = pending.note

        def note(results):
            self.count += 1
            original(results)
        monkeypatch.setattr(pending, "note", note)


def _mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(12, 24), nn.Tanh(), nn.Linear(24, 6))


def _close(a, b, tol=1e-5):
    torch.testing.assert_close(a.detach().cpu(), b.detach().cpu(), rtol=tol, atol=tol)


def _eager_loop(model, optimizer, batches, loss_of):
    losses = []
    for batch in batches:
        optimizer.zero_grad()
        loss = loss_of(model, batch)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


# ---- the functional optimizers, eager -----------------------------------------------

def _functional_run(opt, model, batches, device):
    model = copy.deepcopy(model).to(device)
    group = opt.init_param_group(dict(model.named_parameters()))
    for x, y in batches:
        params = {n: p.detach().requires_grad_() for n, p in group.params.items()}
        loss = nn.functional.mse_loss(torch.func.functional_call(model, params, (x.to(device),)), y.to(device))
        grads = dict(zip(params, torch.autograd.grad(loss, list(params.values()))))
        group = opt(group, grads)
    return group


def _batches(n, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(8, 12, generator=g), torch.randn(8, 6, generator=g)) for _ in range(n)]


@pytest.mark.parametrize("mode", ["debug", "strict", "fused"])
@pytest.mark.parametrize("make", [
    lambda: optimizers.AdamW(lr=1e-2, use_bfloat16_moments=False),
    lambda: optimizers.AdamW(lr=1e-2),
    lambda: optimizers.Sgd(lr=1e-2, momentum=0.9, nesterov=True, weight_decay=1e-3),
    lambda: optimizers.Muon(lr=2e-2),
], ids=["adamw", "adamw_bf16_moments", "sgd", "muon"])
def test_functional_optimizers_eager_match_cpu(mode, make):
    batches = _batches(3)
    on_cpu = _functional_run(make(), _mlp(), batches, "cpu")
    with torch.tpu.set_eager_mode(mode):
        on_tpu = _functional_run(make(), _mlp(), batches, "tpu")
    for leaf_tpu, leaf_cpu in zip(torch.utils._pytree.tree_leaves(on_tpu), torch.utils._pytree.tree_leaves(on_cpu)):
        assert leaf_tpu.dtype == leaf_cpu.dtype
        _close(leaf_tpu.float(), leaf_cpu.float(), 1e-4 if leaf_tpu.dtype != torch.bfloat16 else 1e-2)


def test_adamw_and_sgd_match_torch_optim():
    batches = _batches(5)
    for ours, theirs in ((optimizers.AdamW(lr=1e-2, weight_decay=0.05, use_bfloat16_moments=False),
                          lambda p: torch.optim.AdamW(p, lr=1e-2, weight_decay=0.05)),
                         (optimizers.Sgd(lr=1e-2, momentum=0.9, dampening=0.1, weight_decay=1e-3),
                          lambda p: torch.optim.SGD(p, lr=1e-2, momentum=0.9, dampening=0.1, weight_decay=1e-3))):
        group = _functional_run(ours, _mlp(), batches, "cpu")
        ref = _mlp()
        _eager_loop(ref, theirs(ref.parameters()), batches,
                    lambda m, b: nn.functional.mse_loss(m(b[0]), b[1]))
        for name, p in ref.named_parameters():
            _close(group.params[name], p)


def test_bfloat16_moments_are_stored_rounded():
    group = _functional_run(optimizers.AdamW(lr=1e-2), _mlp(), _batches(1), "tpu")
    ref = _mlp()
    opt = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    _eager_loop(ref, opt, _batches(1), lambda m, b: nn.functional.mse_loss(m(b[0]), b[1]))
    for name, p in ref.named_parameters():
        assert group.opt_state_m[name].dtype == torch.bfloat16
        _close(group.opt_state_m[name].float(), opt.state[p]["exp_avg"].bfloat16().float(), 1e-2)
        _close(group.opt_state_v[name].float(), opt.state[p]["exp_avg_sq"].bfloat16().float(), 1e-2)


def _reference_muon(model, batches, lr, weight_decay, adamw_lr, adamw_wd):
    """torch.optim.Muon on the 2-D weights, torch.optim.AdamW on the rest (CPU)."""
    weights = [p for p in model.parameters() if p.dim() == 2]
    others = [p for p in model.parameters() if p.dim() != 2]
    muon = torch.optim.Muon(weights, lr=lr, weight_decay=weight_decay)
    adamw = torch.optim.AdamW(others, lr=adamw_lr, weight_decay=adamw_wd)
    for x, y in batches:
        muon.zero_grad()
        adamw.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        muon.step()
        adamw.step()


def test_muon_matches_a_reference():
    batches = _batches(4)
    adamw = optimizers.AdamW(lr=3e-3, weight_decay=0.01, use_bfloat16_moments=False)
    group = _functional_run(optimizers.Muon(lr=2e-2, weight_decay=0.1, adamw=adamw), _mlp(), batches, "tpu")
    ref = _mlp()
    _reference_muon(ref, batches, 2e-2, 0.1, 3e-3, 0.01)
    for name, p in ref.named_parameters():
        _close(group.params[name], p, 1e-4)
    assert set(group.opt_state_v) == {"0.bias", "2.bias"}  # AdamW's second moments: the 1-D ones only


def test_newton_schulz_orthogonalises():
    g = torch.randn(16, 48)
    o = optimizers.newton_schulz(g.to("tpu"), steps=5).float().cpu()
    s = torch.linalg.svdvals(o)
    assert s.min() > 0.5 and s.max() < 1.5  # the quintic iteration's band around 1


# ---- SingleTraceTrainer ------------------------------------------------------------

def _gpt_setup():
    cfg = dataclasses.replace(models.GPT_CONFIGS["tiny"], batch=2)
    torch.manual_seed(0)
    model = models.GPT(cfg)
    g = torch.Generator().manual_seed(3)
    batches = [tuple(t.to("tpu") for t in models.gpt_batch(cfg, g)) for _ in range(20)]
    return model, batches


def _cnn_setup():
    torch.manual_seed(0)
    model = models.CNN(width=8)
    g = torch.Generator().manual_seed(3)
    batches = [tuple(t.to("tpu") for t in models.cnn_batch(4, g)) for _ in range(20)]
    return model, batches


@pytest.mark.parametrize("steps", [4, pytest.param(20, marks=pytest.mark.slow)])
@pytest.mark.parametrize("setup, ours, theirs", [
    # eps 1e-6: the key projection's bias gets a gradient that is zero but for
    # rounding noise (softmax ignores a shift of all scores), which Adam with a
    # tiny eps would turn into full-size steps of random sign on either side
    (_gpt_setup, lambda: optimizers.AdamW(lr=3e-3, eps=1e-6, use_bfloat16_moments=False),
     lambda p: torch.optim.AdamW(p, lr=3e-3, eps=1e-6)),
    (_cnn_setup, lambda: optimizers.Sgd(lr=5e-2, momentum=0.9),
     lambda p: torch.optim.SGD(p, lr=5e-2, momentum=0.9)),
], ids=["tiny_gpt_adamw", "cnn_sgd"])
def test_trainer_matches_the_eager_loop(setup, ours, theirs, steps, monkeypatch):
    model, batches = setup()
    batches = batches[:steps]
    eager = copy.deepcopy(model).to("tpu")
    model = model.to("tpu")
    trainer = optimizers.SingleTraceTrainer(model, ours())
    train_step = trainer.make_compiled_train_step(batches[0])
    launches = _Launches(monkeypatch)
    losses, per_step = [], []
    for batch in batches:
        before = launches.count
        losses.append(train_step(batch))
        per_step.append(launches.count - before)
    assert per_step == [1] * len(batches)  # the whole step is one executable
    expected = _eager_loop(eager, theirs(eager.parameters()), batches, lambda m, b: m(*b))
    torch.testing.assert_close(torch.tensor([loss.item() for loss in losses]), torch.tensor(expected),
                               rtol=1e-4, atol=1e-4)
    for p, q in zip(model.parameters(), eager.parameters()):
        _close(p, q, 2e-4)
    for b, c in zip(model.buffers(), eager.buffers()):  # BatchNorm statistics
        _close(b, c, 2e-4)


def test_trainer_updates_in_place_with_donated_buffers():
    model = _mlp().to("tpu")
    weight = model[0].weight
    trainer = optimizers.SingleTraceTrainer(model, optimizers.Sgd(lr=1e-2, momentum=0.9))
    x, y = (t.to("tpu") for t in _batches(1)[0])
    trainer.step(x, y)
    momentum = trainer.param_group.opt_state_m["0.weight"]
    old_weight, old_momentum = (buffers.get_buffer(t.untyped_storage()) for t in (weight, momentum))
    before = weight.detach().cpu().clone()
    trainer.step(x, y)
    assert model[0].weight is weight  # the model's own parameter, updated
    assert not torch.equal(weight.detach().cpu(), before)
    assert trainer.param_group.opt_state_m["0.weight"] is momentum  # state updated in place
    assert trainer.param_group.step.item() == 2
    assert old_weight.is_deleted() and old_momentum.is_deleted()  # donated to the executable
    graph = next(iter(trainer._steps.values())).compiled.graph
    # parameters, momentum buffers and the step count: every input the step rewrites
    assert len(graph.mutated) == 4 + 4 + 1


def test_trainer_without_optimizer_gives_gradients():
    model = _mlp().to("tpu")
    eager = copy.deepcopy(model)
    x, y = (t.to("tpu") for t in _batches(1)[0])
    loss = optimizers.SingleTraceTrainer(model).step(x, y)
    expected = nn.functional.mse_loss(eager(x), y)
    expected.backward()
    _close(loss, expected)
    for p, q in zip(model.parameters(), eager.parameters()):
        _close(p.grad, q.grad)
        _close(p, q)  # not updated


def test_trainer_loss_function_and_tied_weights():
    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(20, 8)
            self.head = nn.Linear(8, 20, bias=False)
            self.head.weight = self.embed.weight

        def forward(self, idx):
            return self.head(self.embed(idx))

    torch.manual_seed(0)
    model = Tied().to("tpu")
    eager = copy.deepcopy(model)
    idx = torch.randint(0, 20, (4, 5), device="tpu")

    def loss_fn(logits, targets):
        return nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())

    trainer = optimizers.SingleTraceTrainer(model, optimizers.Sgd(lr=0.1), compute_loss_fn=loss_fn)
    assert list(trainer.params) == ["embed.weight"]
    opt = torch.optim.SGD(eager.parameters(), lr=0.1)
    for _ in range(3):
        loss = trainer.step(idx, idx)
        opt.zero_grad()
        expected = loss_fn(eager(idx), idx)
        expected.backward()
        opt.step()
        _close(loss, expected)
    assert model.head.weight is model.embed.weight
    _close(model.embed.weight, eager.embed.weight)


def test_trainer_rejects_a_different_structure():
    model = _mlp().to("tpu")
    trainer = optimizers.SingleTraceTrainer(model, optimizers.Sgd())
    x, y = (t.to("tpu") for t in _batches(1)[0])
    step = trainer.make_compiled_train_step(x, y)
    with pytest.raises(ValueError, match="targets"):
        step(x)


@pytest.mark.parametrize("make", [
    lambda: optimizers.AdamW(lr=1e-2, use_bfloat16_moments=False),
    lambda: optimizers.Sgd(lr=1e-2, momentum=0.9, nesterov=True, weight_decay=1e-3),
    lambda: optimizers.Muon(lr=2e-2),
], ids=["adamw", "sgd", "muon"])
def test_functional_optimizer_under_torch_compile_without_graph_breaks(make):
    from torch_tpu.compile import backend
    fallbacks = backend.stats.eager_fallbacks
    model = _mlp().to("tpu")
    opt = make()
    group = opt.init_param_group(dict(model.named_parameters()))
    grads = {n: torch.randn_like(p) for n, p in group.params.items()}
    compiled = torch.compile(opt, backend="tpu", fullgraph=True)
    new = compiled(group, grads)
    new = compiled(new, grads)  # the second step: momentum buffers exist
    expected = opt(opt(group, grads), grads)
    for mine, theirs in zip(torch.utils._pytree.tree_leaves(new), torch.utils._pytree.tree_leaves(expected)):
        assert mine.dtype == theirs.dtype
        _close(mine.float(), theirs.float(), 1e-4 if mine.dtype != torch.bfloat16 else 1e-2)
    assert backend.stats.eager_fallbacks == fallbacks  # really compiled


def test_muon_in_one_compiled_step_matches_eager_muon(monkeypatch):
    batches = [tuple(t.to("tpu") for t in b) for b in _batches(3)]
    make = lambda: optimizers.Muon(lr=2e-2, adamw=optimizers.AdamW(lr=3e-3, use_bfloat16_moments=False))  # noqa: E731
    eager = _functional_run(make(), _mlp(), batches, "tpu")
    model = _mlp().to("tpu")
    trainer = optimizers.SingleTraceTrainer(model, make())
    step = trainer.make_compiled_train_step(*batches[0])
    launches = _Launches(monkeypatch)
    for x, y in batches:
        step(x, y)
    assert launches.count == len(batches)
    for name, p in model.named_parameters():
        _close(p, eager.params[name], 1e-4)
        _close(trainer.param_group.opt_state_m[name], eager.opt_state_m[name], 1e-4)
