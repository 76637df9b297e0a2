"""Training end to end on tpu: the same losses as on the CPU, state round-trips."""
import copy
import io

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_tpu


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1, bias=False)  # BN follows: a bias gets only float noise as gradient
        self.bn = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 8, 3, stride=2, padding=1)
        self.head = nn.Linear(8 * 4 * 4, 4)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn(self.conv1(x))), 2)
        x = F.relu(self.conv2(x))
        return self.head(x.flatten(1))


def _model(kind):
    torch.manual_seed(0)
    if kind == "mlp":
        return nn.Sequential(nn.Linear(10, 32), nn.GELU(), nn.Dropout(0.0), nn.Linear(32, 4))
    return SmallCNN()


def _data(kind):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(16, 10, generator=g) if kind == "mlp" else torch.randn(16, 1, 16, 16, generator=g)
    return x, torch.randint(0, 4, (16,), generator=g)


def _optimizer(name, params):
    if name == "sgd":
        return torch.optim.SGD(params, lr=0.05, momentum=0.9)
    return torch.optim.AdamW(params, lr=1e-3)  # foreach is the default on tpu


def _train(kind, opt_name, device, steps=20):
    model = _model(kind).to(device)
    x, y = (t.to(device) for t in _data(kind))
    opt = _optimizer(opt_name, model.parameters())
    losses = []
    for _ in range(steps):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, model


@pytest.mark.parametrize("kind", ["mlp", "cnn"])
@pytest.mark.parametrize("opt_name", ["sgd", "adamw"])
def test_training_matches_cpu(kind, opt_name):
    before = dict(torch_tpu.fallback_ops())
    cpu_losses, cpu_model = _train(kind, opt_name, "cpu")
    tpu_losses, tpu_model = _train(kind, opt_name, "tpu")
    torch.testing.assert_close(torch.tensor(tpu_losses), torch.tensor(cpu_losses), rtol=1e-4, atol=1e-5)
    assert tpu_losses[-1] < tpu_losses[0]
    for (name, p), q in zip(tpu_model.state_dict().items(), cpu_model.state_dict().values()):
        torch.testing.assert_close(p.cpu(), q, rtol=1e-4, atol=1e-4, msg=name)
    assert torch_tpu.fallback_ops() == before, "training ran ops on the CPU"


def test_state_dict_save_load_and_move_back():
    _, model = _train("cnn", "adamw", "tpu", steps=2)
    buf = io.BytesIO()
    torch.save(model.state_dict(), buf)
    buf.seek(0)
    restored = _model("cnn").to("tpu")
    restored.load_state_dict(torch.load(buf, map_location="tpu"))
    for (k, a), b in zip(model.state_dict().items(), restored.state_dict().values()):
        assert b.device.type == "tpu" and torch.equal(a.cpu(), b.cpu()), k
    values = {k: v.cpu() for k, v in model.state_dict().items()}
    model.to("cpu")
    for k, v in model.state_dict().items():
        assert v.device.type == "cpu" and torch.equal(v, values[k]), k


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_grad_scaler_matches_cpu(mode):
    # torch.amp.GradScaler: unscale and check for inf/NaN, skip the step on an
    # overflow, back the scale off, grow it every growth_interval good steps
    def run(device):
        torch.manual_seed(0)
        model = nn.Linear(4, 4).to(device)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        scaler = torch.amp.GradScaler(device, init_scale=2.0 ** 4, growth_interval=2)
        scales = []
        with torch.tpu.set_eager_mode(mode if device == "tpu" else "strict"):
            for i in range(6):
                x = torch.full((2, 4), 1e30 if i == 3 else 1.0, device=device)  # step 3 overflows
                scaler.scale(model(x).pow(2).mean()).backward()
                scaler.unscale_(opt)
                scaler.step(opt)
                scaler.update()
                opt.zero_grad()
                scales.append(scaler.get_scale())
        return scales, model.weight.detach().cpu()
    cpu_scales, cpu_weight = run("cpu")
    before = torch_tpu.fallback_ops()
    tpu_scales, tpu_weight = run("tpu")
    assert tpu_scales == cpu_scales == [16.0, 32.0, 32.0, 16.0, 16.0, 32.0]
    torch.testing.assert_close(tpu_weight, cpu_weight)
    assert not any(k.startswith("aten::_amp") for k in torch_tpu.fallback_ops() if k not in before)


_FUSED_STEPS = {
    "sgd": (torch._fused_sgd_, 2, dict(weight_decay=0.0, momentum=0.0, lr=0.01, dampening=0.0, nesterov=False,
                                         maximize=False, is_first_step=False)),
    "sgd_momentum_first": (torch._fused_sgd_, 3, dict(weight_decay=0.01, momentum=0.9, lr=0.01, dampening=0.1,
                                                       nesterov=False, maximize=False, is_first_step=True)),
    "sgd_momentum": (torch._fused_sgd_, 3, dict(weight_decay=0.01, momentum=0.9, lr=0.01, dampening=0.1,
                                                 nesterov=False, maximize=True, is_first_step=False)),
    "sgd_nesterov": (torch._fused_sgd_, 3, dict(weight_decay=0.0, momentum=0.9, lr=0.01, dampening=0.0,
                                                 nesterov=True, maximize=False, is_first_step=False)),
    "adagrad": (torch._fused_adagrad_, 3, dict(lr=0.05, lr_decay=0.1, weight_decay=0.01, eps=1e-10,
                                                maximize=True)),
}


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("name", ["Adam", "AdamW", "Adamax", "Adadelta", "ASGD"])
def test_foreach_optimizer_on_half_params_matches_cpu(name, dtype):
    # torch.optim's default on tpu, the list path, for float16/bfloat16
    # parameters: parameters and state as the CPU's list path leaves them, bit
    # for bit (its in-place _foreach_mul_ reads the number rounded to the
    # dtype: Adam's exp_avg_sq, Adamax's exp_inf, Adadelta's square_avg were
    # an ulp off; ASGD's ax, whose _foreach_addcmul_ by its float32 mus did not
    # round them to the list's dtype).  64 elements: no scalar tail in the CPU's kernels.
    g = torch.Generator().manual_seed(0)
    start = [torch.rand(64, generator=g).to(dtype) for _ in range(2)]
    grads = [[torch.rand(64, generator=g).to(dtype) for _ in range(2)] for _ in range(4)]

    def run(device):
        params = [p.clone().to(device).requires_grad_() for p in start]
        opt = getattr(torch.optim, name)(params, foreach=True)
        for step in grads:
            for p, grad in zip(params, step):
                p.grad = grad.to(device)
            opt.step()
        return [p.detach().cpu() for p in params], [{k: v.cpu() for k, v in opt.state[p].items()} for p in params]
    cpu_params, cpu_state = run("cpu")
    tpu_params, tpu_state = run("tpu")
    for t, c in zip(tpu_params + tpu_state, cpu_params + cpu_state):
        torch.testing.assert_close(t, c, rtol=0, atol=0)


@pytest.mark.parametrize("scaled", [False, True, "overflow"], ids=["plain", "grad_scale", "overflow"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("case", list(_FUSED_STEPS))
def test_fused_optimizer_steps_match_cpu(case, dtype, scaled):
    # torch.optim.SGD/Adagrad(fused=True): params, grads (unscaled in place
    # under a GradScaler) and state as the CPU kernels leave them; with
    # found_inf set, all of them as they were
    op, lists, kwargs = _FUSED_STEPS[case]
    g = torch.Generator().manual_seed(0)
    tensors = [[torch.randn(n, generator=g, dtype=dtype) for n in (7, 33, 64)] for _ in range(lists)]
    if op is torch._fused_adagrad_:
        tensors = [tensors[0], tensors[1], [s.abs() for s in tensors[2]], [torch.tensor(3.0)] * 3]
    elif lists == 2:
        tensors.append([])  # no momentum buffers without momentum
    extra = dict(grad_scale=torch.tensor(4.0), found_inf=torch.tensor(float(scaled == "overflow"))) if scaled else {}
    on_cpu = [[t.clone() for t in ts] for ts in tensors]
    on_tpu = [[t.to("tpu") for t in ts] for ts in tensors]
    op(*on_cpu, **kwargs, **extra)
    op(*on_tpu, **kwargs, **{k: v.to("tpu") for k, v in extra.items()})
    # the CPU's SGD kernel is compiled with FMA contraction: a momentum or
    # weight-decay update (a * b + c * d) may differ by an ulp there
    exact = dict(rtol=0, atol=0) if case in ("sgd", "adagrad") else {}
    for cpu_list, tpu_list in zip(on_cpu, on_tpu):
        for c, t in zip(cpu_list, tpu_list):
            torch.testing.assert_close(t.cpu(), c, **exact)


@pytest.mark.parametrize("name", ["AdamW", "SGD", "Adagrad"])
def test_fused_optimizer_skips_an_overflowing_step_without_a_host_read(name, monkeypatch):
    # GradScaler with a fused optimizer: whether the gradients overflowed is
    # decided on the device, inside the optimizer's program (as CUDA's kernels
    # decide it), so its step reads nothing back to the host; an overflowing
    # step still leaves parameters and state as they were, as on the CPU
    from torch_tpu.ops import core
    reads = []
    read_for_host = core._read_for_host
    monkeypatch.setattr(core, "_read_for_host", lambda t, what: reads.append(what) or read_for_host(t, what))

    def run(device):
        torch.manual_seed(0)
        model = nn.Linear(4, 4).to(device)
        opt = getattr(torch.optim, name)(model.parameters(), lr=0.1, fused=True)
        scaler = torch.amp.GradScaler(device, init_scale=2.0 ** 4, growth_interval=2)
        stepped = []
        for i in range(4):
            x = torch.full((2, 4), 1e30 if i == 2 else 1.0, device=device)  # step 2 overflows
            scaler.scale(model(x).pow(2).mean()).backward()
            reads.clear()
            scaler.step(opt)
            stepped.append(reads[:])
            scaler.update()
            opt.zero_grad()
        state = [v.cpu() for p in model.parameters() for v in opt.state[p].values()]
        return [p.detach().cpu() for p in model.parameters()] + state, scaler.get_scale(), stepped
    cpu_values, cpu_scale, _ = run("cpu")
    tpu_values, tpu_scale, stepped = run("tpu")
    assert tpu_scale == cpu_scale
    for t, c in zip(tpu_values, cpu_values, strict=True):
        torch.testing.assert_close(t, c)
    assert stepped == [[]] * 4


def test_fused_adamw_updates_in_place_unless_a_buffer_is_held():
    # In strict mode a fused optimizer donates its parameters' and state's
    # buffers to its program when nothing else holds them: the update happens
    # in place, as on a GPU, with no second copy of parameters and state at
    # the step's peak.  A buffer someone holds (torch_tpu.pallas.to_jax's
    # array) is kept, with its values.
    import numpy as np

    from torch_tpu.eager import access
    from torch_tpu.pallas import to_jax
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2)).to("tpu")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, fused=True)
    x = torch.randn(5, 4).to("tpu")

    def step():
        opt.zero_grad()
        model(x).square().mean().backward()
        opt.step()
    step()
    before = access.donations
    step()
    step()
    assert access.donations == before + 4  # (a step: the fused op, and _foreach_add_ of the step counts)
    held = to_jax(model[0].weight)
    values = np.asarray(held).copy()
    before = access.donations
    step()
    assert access.donations == before + 1 and not held.is_deleted()  # (the step counts' only)
    np.testing.assert_array_equal(np.asarray(held), values)
    assert not np.array_equal(np.asarray(to_jax(model[0].weight)), values)


_GROUPED = {
    "adamw": lambda groups: torch.optim.AdamW(groups, lr=1e-2, fused=True),
    "sgd": lambda groups: torch.optim.SGD(groups, lr=0.1, momentum=0.9, fused=True),
    "adagrad": lambda groups: torch.optim.Adagrad(groups, lr=0.1, fused=True),
}


@pytest.mark.parametrize("mode", ["strict", "fused"])
@pytest.mark.parametrize("name", list(_GROUPED))
def test_fused_optimizer_lists_read_in_one_pass_match_cpu(name, mode, monkeypatch):
    # After the first steps a fused optimizer's lists are read and written in
    # one pass (ops/tensor_lists.py): two parameter groups of one length (two
    # layouts for one key), bias gradients in (1, n) buffers (their sums,
    # reshaped inside the program), five steps; the values stay the CPU's, and
    # no layout is worked out again in the last steps.
    from torch_tpu.ops import tensor_lists
    built = []
    layout = tensor_lists._layout
    monkeypatch.setattr(tensor_lists, "_layout", lambda tensors: built.append(1) or layout(tensors))

    def run(device):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2)).to(device)
        opt = _GROUPED[name]([{"params": model[0].parameters()},
                              {"params": model[2].parameters(), "weight_decay": 0.1}])
        x = torch.randn(5, 4).to(device)
        with torch.tpu.set_eager_mode(mode if device == "tpu" else "strict"):
            for step in range(5):
                if step == 3:
                    built.clear()
                opt.zero_grad()
                model(x).square().mean().backward()
                opt.step()
        return [p.detach().cpu() for p in model.parameters()]
    cpu_params = run("cpu")
    tpu_params = run("tpu")
    for t, c in zip(tpu_params, cpu_params):
        torch.testing.assert_close(t, c)
    assert built == []


def test_fused_sgd_with_grad_scaler_skips_an_overflowing_step():
    def run(device):
        torch.manual_seed(0)
        model = nn.Linear(4, 4).to(device)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, fused=True)
        scaler = torch.amp.GradScaler(device, init_scale=2.0 ** 4, growth_interval=2)
        for i in range(4):
            x = torch.full((2, 4), 1e30 if i == 2 else 1.0, device=device)  # step 2 overflows
            scaler.scale(model(x).pow(2).mean()).backward()
            scaler.step(opt)
            scaler.update()
            opt.zero_grad()
        return model.weight.detach().cpu(), scaler.get_scale()
    before = dict(torch_tpu.fallback_ops())
    tpu_weight, tpu_scale = run("tpu")
    cpu_weight, cpu_scale = run("cpu")
    assert tpu_scale == cpu_scale
    torch.testing.assert_close(tpu_weight, cpu_weight)
    assert torch_tpu.fallback_ops() == before, "the fused step ran on the CPU"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("op,weight_decay", [(torch._fused_adam_, 0.1), (torch._fused_adamw_, 0.0)],
                         ids=["adam", "adamw"])
def test_fused_adam_unscales_grads_in_place_and_matches_cpu(op, weight_decay, dtype):
    # torch.optim.Adam(W)(fused=True) under a GradScaler: the CPU kernel divides
    # each gradient by the scale and stores it back (tpu left the gradients
    # scaled, and multiplied by 1/scale: an ulp off), then computes as its
    # vectorized loop: coefficients from double, exp_avg by a fused
    # multiply-add.  Bit for bit over 64 elements (no scalar tail).
    g = torch.Generator().manual_seed(0)
    start = [torch.randn(64, generator=g).to(dtype) for _ in range(2)]
    grads = [[torch.randn(64, generator=g).to(dtype) for _ in range(2)] for _ in range(3)]

    def run(device):
        params = [p.clone().to(device) for p in start]
        m, v, vmax = ([torch.zeros_like(p) for p in params] for _ in range(3))
        steps = [torch.tensor(0.0, device=device) for _ in params]
        seen = []
        for step_grads in grads:
            for s in steps:
                s += 1
            gs = [x.clone().to(device) for x in step_grads]
            op(params, gs, m, v, vmax, steps, lr=0.1, beta1=0.9, beta2=0.999, weight_decay=weight_decay,
               eps=1e-8, amsgrad=True, maximize=False, grad_scale=torch.tensor(3.0, device=device),
               found_inf=torch.tensor(0.0, device=device))
            seen += [x.cpu() for x in gs]
        return [x.cpu() for x in params + m + v + vmax] + seen
    for t, c in zip(run("tpu"), run("cpu")):
        torch.testing.assert_close(t, c, rtol=0, atol=0)


def test_fused_adam_traced_for_a_tpu_keeps_its_tensors_in_float32():
    # the CPU kernel's fused multiply-adds are computed through float64 on the
    # CPU platform only: a TPU emulates float64 (~10x slower), and its XLA
    # contracts a*b+c into the hardware's own FMA
    import jax
    import numpy as np

    from torch_tpu import target
    from torch_tpu.ops import optim as tpu_optim
    n = 2
    args = ([np.zeros(8, np.float32)] * (4 * n) + [np.zeros((), np.float32)] * n
            + [np.float32(0.1), np.float32(0.9), np.float32(0.999), np.float32(0.01), np.float32(1e-8),
               np.float32(1.0)])

    def float64_arrays(platform):
        with target.kernels_for(platform):
            step = tpu_optim._adam_fn(False, False, False, True, True, target.kernel_platform() == "cpu")
            fn = tpu_optim._flat(step, (n, n, n, n, 0, n))
            jaxpr = jax.make_jaxpr(fn.__wrapped__)(*args)
        return sum(1 for eqn in jaxpr.jaxpr.eqns for v in eqn.outvars
                   if v.aval.dtype == np.float64 and v.aval.shape == (8,))
    assert float64_arrays("cpu") > 0
    assert float64_arrays("tpu") == 0


@pytest.mark.parametrize("amsgrad", [False, True], ids=["adamw", "amsgrad"])
@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_fused_adamw_matches_cpu_and_is_recorded_in_fused_mode(mode, amsgrad):
    # torch.optim.AdamW(fused=True), the Trainer's default: one kernel for the
    # whole list; in fused mode it is recorded into the step's chain (its
    # inputs, the step's pending gradients, are not computed first)
    from torch_tpu.eager import fusion
    from torch_tpu.storage import buffers

    def run(device):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2)).to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2, amsgrad=amsgrad, fused=True)
        x = torch.randn(5, 4).to(device)
        pending = []
        with torch.tpu.set_eager_mode(mode if device == "tpu" else "strict"):
            for _ in range(3):
                opt.zero_grad()
                model(x).square().mean().backward()
                opt.step()
                if device == "tpu":
                    pending.append(type(buffers.get_buffer(model[0].weight.untyped_storage())) is fusion.LazyBuffer)
        return [p.detach().cpu() for p in model.parameters()], pending
    cpu_params, _ = run("cpu")
    tpu_params, pending = run("tpu")
    for t, c in zip(tpu_params, cpu_params):
        torch.testing.assert_close(t, c)
    assert pending == [mode == "fused"] * 3


def test_factory_results_are_committed_and_the_second_step_compiles_nothing():
    # A program with no committed input (a factory, a fill of a Python
    # number) gave uncommitted arrays; AdamW's first foreach updates read them (fresh
    # states) next to committed ones, and the second step's, reading their
    # own results, was another jit signature: compiled again (~40-80 ms).
    import logging

    import jax

    from torch_tpu.storage import buffers
    made = {"zeros": torch.zeros(5, 3, device="tpu"), "ones": torch.ones(7, device="tpu"),
            "full": torch.full((2, 3), 1.5, device="tpu"), "arange": torch.arange(6, device="tpu"),
            "linspace": torch.linspace(0, 1, 5, device="tpu"), "eye": torch.eye(3, device="tpu"),
            "randn": torch.randn(4, 4, device="tpu"), "zeros_like": torch.zeros_like(torch.ones(3, 2, device="tpu")),
            # a kernel whose only input is a Python number it has not seen
            "fill_": torch.empty(3, device="tpu").fill_(2.6875)}
    assert [name for name, t in made.items() if not buffers.get_buffer(t.untyped_storage()).committed] == []

    model = nn.Sequential(nn.Linear(6, 5), nn.LayerNorm(5), nn.Linear(5, 3)).to("tpu")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    x = torch.randn(4, 6, device="tpu")

    def step():
        opt.zero_grad()
        model(x).square().mean().backward()
        opt.step()
    step()
    compiled = []

    class Compiles(logging.Handler):
        def emit(self, record):
            if record.getMessage().startswith("Compiling "):
                compiled.append(record.getMessage()[:80])
    handler, logger = Compiles(), logging.getLogger("jax")
    logger.addHandler(handler)
    jax.config.update("jax_log_compiles", True)
    try:
        step()
        torch.tpu.synchronize()
    finally:
        jax.config.update("jax_log_compiles", False)
        logger.removeHandler(handler)
    assert compiled == []


@pytest.mark.parametrize("path", ["native", "kernel"])
def test_foreach_adamw_updates_in_place_unless_a_buffer_is_held(path):
    # torch.optim's default AdamW on tpu is the foreach one: eight in-place
    # _foreach_* calls a step, each over every parameter (or state) tensor.
    # In strict mode each donates its list's buffers when nothing else holds
    # them, so a step never holds a second copy of the parameters or of a
    # state, on the native entry's path as on the Kernel's.
    import numpy as np

    from torch_tpu.eager import access
    from torch_tpu.ops import registry
    from torch_tpu.pallas import to_jax
    in_place = ("_foreach_lerp_.Scalar", "_foreach_mul_.Scalar", "_foreach_addcmul_.Scalar",
                "_foreach_div_.ScalarList", "_foreach_add_.Scalar", "_foreach_addcdiv_.ScalarList")
    if path == "kernel":  # each of the step's in-place calls through Kernel.__call__
        for op in in_place:
            registry._register(registry.resolve(op), registry.KERNELS[registry.resolve(op)])
    try:
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
        cpu_model = copy.deepcopy(model)
        model.to("tpu")
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        cpu_opt = torch.optim.AdamW(cpu_model.parameters(), lr=1e-2, foreach=True)
        x = torch.randn(5, 4)

        def step(m, o, batch):
            o.zero_grad()
            m(batch).square().mean().backward()
            o.step()
        for _ in range(2):
            step(model, opt, x.to("tpu"))
            step(cpu_model, cpu_opt, x)
        before = access.donations
        step(model, opt, x.to("tpu"))
        step(cpu_model, cpu_opt, x)
        assert access.donations - before >= 6, access.donations - before  # (lerp_, mul_, addcmul_, ..., addcdiv_)
        held = to_jax(model[0].weight)
        values = np.asarray(held).copy()
        step(model, opt, x.to("tpu"))
        step(cpu_model, cpu_opt, x)
        assert not held.is_deleted()
        np.testing.assert_array_equal(np.asarray(held), values)
        for p, q in zip(model.parameters(), cpu_model.parameters()):
            torch.testing.assert_close(p.detach().cpu(), q.detach())
    finally:
        if path == "kernel":
            for op in in_place:
                registry._register(registry.resolve(op), registry.entry_of(registry.KERNELS[registry.resolve(op)]))
