"""Neural-network ops on tpu against PyTorch's CPU kernels: values and gradients."""
import copy
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_tpu
from helpers import assert_same, raises_at_sync

warnings.filterwarnings("ignore", message="torch_tpu: .* has no tpu kernel")

# Ops this module implements: none of them may fall back to the CPU.
OWN_PREFIXES = ("convolution", "max_pool", "avg_pool", "adaptive_", "_adaptive_", "native_batch_norm",
                "_native_batch_norm", "native_layer_norm", "native_group_norm", "embedding", "nll_loss",
                "mse_loss", "smooth_l1_loss", "huber_loss", "binary_cross_entropy", "native_dropout",
                "upsample_", "constant_pad_nd", "reflection_pad", "replication_pad", "im2col", "col2im",
                "pixel_shuffle", "pixel_unshuffle", "mm", "bmm", "addmm", "_addmm_activation",
                "_weight_norm", "_embedding_bag", "max_unpool", "multi_margin_loss", "multilabel_margin_loss",
                "grid_sampler", "unfold_backward", "_upsample_", "_ctc_loss", "rrelu")


def own_fallbacks():
    names = (n.split("::")[-1].split(".")[0] for n in torch_tpu.fallback_ops())
    return sorted(n for n in names if n.startswith(OWN_PREFIXES))


@pytest.fixture(autouse=True)
def no_own_fallback():
    yield
    assert own_fallbacks() == []


def _tpu(x):
    if isinstance(x, torch.Tensor):
        return x.detach().to("tpu").requires_grad_(x.requires_grad)
    return x


def check(fn, *inputs, atol=1e-5, rtol=1.3e-6, grad=True, seed=0):
    """fn on CPU and tpu copies of ``inputs``: same outputs and same input gradients."""
    cpu_in = [x.detach().clone().requires_grad_(x.requires_grad) if isinstance(x, torch.Tensor) else x
              for x in inputs]
    tpu_in = [_tpu(x) for x in cpu_in]
    cpu_out, tpu_out = fn(*cpu_in), fn(*tpu_in)
    assert_same(tpu_out, cpu_out, atol=atol, rtol=rtol)
    if not grad:
        return tpu_out
    cpu_outs = cpu_out if isinstance(cpu_out, (tuple, list)) else (cpu_out,)
    tpu_outs = tpu_out if isinstance(tpu_out, (tuple, list)) else (tpu_out,)
    gen = torch.Generator().manual_seed(seed)
    pairs = [(c, t) for c, t in zip(cpu_outs, tpu_outs) if c.requires_grad]
    ups = [torch.randn(c.shape, generator=gen).to(c.dtype) for c, _ in pairs]
    torch.autograd.backward([c for c, _ in pairs], ups)
    torch.autograd.backward([t for _, t in pairs], [u.to("tpu") for u in ups])
    for c, t in zip(cpu_in, tpu_in):
        if isinstance(c, torch.Tensor) and c.requires_grad:
            assert_same(t.grad, c.grad, atol=atol, rtol=rtol)
    return tpu_out


def r(*shape, dtype=torch.float32, grad=True, seed=None):
    g = torch.Generator().manual_seed(seed if seed is not None else hash(shape) % 1000)
    return torch.randn(shape, generator=g).to(dtype).requires_grad_(grad)


# ---- convolution ---------------------------------------------------------------

@pytest.mark.parametrize("kw", [
    dict(), dict(stride=2, padding=1), dict(dilation=2, padding=2), dict(padding="same"),
])
def test_conv2d(kw):
    check(lambda x, w, b: F.conv2d(x, w, b, **kw), r(2, 4, 7, 6), r(3, 4, 3, 3), r(3))


def test_channels_last_network_keeps_cpu_layouts():
    # conv, batch norm, pooling and activations give channels_last results for
    # channels_last inputs, layer by layer as on the CPU; so do the gradients
    cl = torch.channels_last
    torch.manual_seed(0)
    cpu = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                        nn.Conv2d(8, 4, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 2))
    cpu = cpu.to(memory_format=cl)
    tpu = copy.deepcopy(cpu).to("tpu")
    x = torch.randn(2, 3, 16, 16).to(memory_format=cl).requires_grad_()
    xt = x.detach().to("tpu").requires_grad_()
    inputs = x, xt
    for cpu_layer, tpu_layer in zip(cpu, tpu):
        x, xt = cpu_layer(x), tpu_layer(xt)
        assert xt.stride() == x.stride(), (type(cpu_layer).__name__, xt.stride(), x.stride())
        assert_same(xt, x.detach(), atol=1e-5, rtol=1e-5)
    x.sum().backward()
    xt.sum().backward()
    for p, q in [inputs, *zip(cpu.parameters(), tpu.parameters())]:
        assert q.grad.stride() == p.grad.stride()
        assert_same(q.grad, p.grad, atol=1e-5, rtol=1e-5)


def test_conv2d_groups_no_bias():
    check(lambda x, w: F.conv2d(x, w, groups=2, stride=(1, 2)), r(2, 4, 6, 6), r(6, 2, 3, 2))


def test_conv1d_conv3d():
    check(lambda x, w, b: F.conv1d(x, w, b, stride=2, padding=1), r(2, 3, 9), r(4, 3, 3), r(4))
    check(lambda x, w, b: F.conv3d(x, w, b, padding=1), r(1, 2, 4, 4, 4), r(3, 2, 3, 3, 3), r(3))


@pytest.mark.parametrize("kw", [
    dict(), dict(stride=2, output_padding=1), dict(stride=2, padding=1, dilation=2),
    dict(groups=2, stride=3, padding=2, output_padding=2),
])
def test_conv_transpose2d(kw):
    cout = 6 if kw.get("groups") else 3
    check(lambda x, w, b: F.conv_transpose2d(x, w, b, **kw), r(2, 4, 5, 4), r(4, 3, 3, 3), r(cout))


def test_conv_transpose1d_3d():
    check(lambda x, w: F.conv_transpose1d(x, w, stride=2, padding=1), r(2, 3, 5), r(3, 2, 4))
    check(lambda x, w, b: F.conv_transpose3d(x, w, b, stride=2), r(1, 2, 3, 3, 3), r(2, 2, 2, 2, 2), r(2))


def test_conv_of_an_input_without_channels_is_the_cpus_empty_result():
    # the CPU gives (N, 0, *spatial), no bias, and zero gradients (not the meta
    # kernel's (N, C_out, *spatial) of bias values)
    for x, w, b in [(r(3, 0, 8), r(5, 0, 3), r(5)), (r(2, 0, 6, 5), r(4, 0, 3, 2), r(4))]:
        conv = F.conv1d if x.dim() == 3 else F.conv2d
        out = check(lambda v, wt, bias: conv(v, wt, bias, stride=2), x, w, b)
        assert out.shape == (x.shape[0], 0, *conv(x, w, b, stride=2).shape[2:])


def test_conv_input_grad_only():
    w = r(3, 2, 3, 3, grad=False)
    check(lambda x: F.conv2d(x, w.to(x.device)), r(1, 2, 5, 5))
    x = r(1, 2, 5, 5, grad=False)
    check(lambda wt: F.conv2d(x.to(wt.device), wt), w.clone().requires_grad_())


def test_conv2d_bf16():
    check(lambda x, w, b: F.conv2d(x, w, b, padding=1), r(2, 4, 6, 6, dtype=torch.bfloat16),
          r(3, 4, 3, 3, dtype=torch.bfloat16), r(3, dtype=torch.bfloat16), atol=5e-2, rtol=5e-2)


def test_conv_module_training_step():
    torch.manual_seed(0)
    cpu = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                        nn.Linear(16, 5))
    tpu = __import__("copy").deepcopy(cpu).to("tpu")
    x, y = torch.randn(2, 3, 4, 4), torch.tensor([1, 3])
    for model, dev in ((cpu, "cpu"), (tpu, "tpu")):
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(2):
            opt.zero_grad()
            F.cross_entropy(model(x.to(dev)), y.to(dev)).backward()
            opt.step()
    for pc, pt in zip(cpu.parameters(), tpu.parameters()):
        assert_same(pt, pc.detach(), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("make", [lambda: nn.LazyConv2d(4, 2), lambda: nn.LazyLinear(3),
                                  lambda: nn.LazyBatchNorm1d()])
def test_lazy_module_moved_before_its_first_forward(make):
    # .to("tpu") moves the UninitializedParameters/Buffers (whose .shape raises) as on the CPU
    x = torch.randn(2, 3, 4, 4) if isinstance(make(), nn.LazyConv2d) else torch.randn(5, 3)
    cpu = make().to(torch.float64)
    tpu = make().to("tpu").to(torch.float64)
    assert [type(p) for p in tpu.parameters()] == [type(p) for p in cpu.parameters()]
    assert all(t.device.type == "tpu" for t in list(tpu.parameters()) + list(tpu.buffers()))
    cpu(x.double())
    tpu(x.double().to("tpu"))
    tpu.load_state_dict(cpu.state_dict())
    for p in tpu.parameters():
        assert p.device.type == "tpu" and p.dtype == torch.float64 and type(p) is nn.Parameter
    assert_same(tpu(x.double().to("tpu")), cpu(x.double()))


# ---- pooling -------------------------------------------------------------------

@pytest.mark.parametrize("kw", [
    dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1), dict(kernel_size=2, ceil_mode=True),
    dict(kernel_size=(3, 2), stride=(2, 1), dilation=(1, 2)), dict(kernel_size=3, stride=2, ceil_mode=True, padding=1),
])
def test_max_pool2d(kw):
    check(lambda x: F.max_pool2d(x, return_indices=True, **kw), r(2, 3, 7, 6))


def test_max_pool_ties_and_unbatched():
    x = torch.zeros(1, 4, 4).requires_grad_()  # all ties: the first element of each window wins
    check(lambda v: F.max_pool2d(v, 2, return_indices=True), x)
    check(lambda v: F.max_pool1d(v, 3, stride=2, return_indices=True), r(2, 3, 9))


def test_max_pool3d():
    check(lambda x: F.max_pool3d(x, 2, stride=2, padding=1, return_indices=True), r(1, 2, 5, 4, 4))


@pytest.mark.parametrize("kw", [
    dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1),
    dict(kernel_size=3, stride=2, padding=1, count_include_pad=False),
    dict(kernel_size=3, stride=2, padding=1, ceil_mode=True),
    dict(kernel_size=3, stride=2, padding=1, ceil_mode=True, count_include_pad=False),
    dict(kernel_size=2, divisor_override=3),
])
def test_avg_pool2d(kw):
    check(lambda x: F.avg_pool2d(x, **kw), r(2, 3, 7, 6))


def test_avg_pools_and_bag_means_are_the_cpus_bits():
    # the window summed in the CPU's order, and a true division by the count
    # (XLA turns a division by a broadcast table into a product with its reciprocal)
    for dtype in (torch.float64, torch.float32):
        x = r(2, 3, 7, 6, dtype=dtype, grad=False)
        for kw in (dict(kernel_size=3), dict(kernel_size=3, stride=2, padding=1, count_include_pad=False),
                   dict(kernel_size=(2, 3), stride=1)):
            assert torch.equal(F.avg_pool2d(x.to("tpu"), **kw).cpu(), F.avg_pool2d(x, **kw))
        z = r(1, 2, 5, 6, 4, dtype=dtype, grad=False)
        assert torch.equal(F.avg_pool3d(z.to("tpu"), 3, stride=2, padding=1).cpu(), F.avg_pool3d(z, 3, stride=2, padding=1))
        w = r(21, 3, dtype=dtype, grad=False)
        idx = torch.tensor([3, 7, 7, 1, 20, 5, 9, 9, 9, 2, 0, 14, 3])
        offsets = torch.tensor([0, 3, 3, 8])
        bag = F.embedding_bag(idx.to("tpu"), w.to("tpu"), offsets.to("tpu"), mode="mean").cpu()
        assert torch.equal(bag, F.embedding_bag(idx, w, offsets, mode="mean"))


def test_avg_pool3d():
    check(lambda x: F.avg_pool3d(x, 2, padding=1, count_include_pad=False), r(1, 2, 4, 5, 4))


@pytest.mark.parametrize("size", [(3, 3), (4, 5), (1, 1), (7, 6)])
def test_adaptive_avg_pool2d(size):
    check(lambda x: F.adaptive_avg_pool2d(x, size), r(2, 3, 7, 6))


def test_adaptive_avg_pool3d():
    check(lambda x: F.adaptive_avg_pool3d(x, (2, 3, 2)), r(1, 2, 5, 4, 3))


@pytest.mark.parametrize("size", [(3, 3), (4, 5), (2, 1)])
def test_adaptive_max_pool2d(size):
    check(lambda x: F.adaptive_max_pool2d(x, size, return_indices=True), r(2, 3, 7, 6))


@pytest.mark.parametrize("fn", [
    lambda v: F.max_pool1d(v[..., 0], 2, return_indices=True),
    lambda v: F.max_pool2d(v, 3, stride=2, return_indices=True),
    lambda v: F.adaptive_max_pool2d(v, (2, 3), return_indices=True),
    lambda v: F.max_pool3d(v.unsqueeze(-1), (2, 2, 1), return_indices=True),
    lambda v: F.adaptive_max_pool3d(v.unsqueeze(-1), 2, return_indices=True),
])
def test_max_pools_of_an_empty_batch(fn):
    # nothing to pool: empty values and indices, and an empty gradient
    check(fn, r(0, 3, 5, 4))


def test_a_large_3d_window_is_sliced_per_dim():
    # one output of a 9x9x9 window: same values and gradient, from a program of
    # 9+9+9 slices (one per window position took minutes to compile at 11 per side)
    import jax
    import numpy as np

    from torch_tpu.ops import nn as tpu_nn
    x = r(2, 3, 9, 9, 9)
    check(lambda v: F.adaptive_max_pool3d(v, 1, return_indices=True), x)
    check(lambda v: F.max_pool3d(v, 9, return_indices=True), x)
    check(lambda v: F.avg_pool3d(v, (9, 9, 8)), x)
    positions = tpu_nn._sliding((9, 9, 9), (9, 9, 9), (9, 9, 9), (0, 0, 0), (1, 1, 1), False)
    jaxpr = jax.make_jaxpr(lambda v: tpu_nn._sliced_patches(v, positions))(np.zeros((2, 3, 9, 9, 9), np.float32))
    assert sum(e.primitive.name == "slice" for e in jaxpr.jaxpr.eqns) == 27


@pytest.mark.parametrize("order", [(3, 0, 1, 2), (0, 1, 2, 3), (2, 0, 1, 3)])
def test_max_pool3d_of_an_unbatched_input_keeps_the_cpus_layout(order):
    # (C, D, H, W) stored with C innermost: the CPU lays the values and indices
    # out as for a batch of one in channels_last_3d
    x = r(7, 5, 6, 4).permute(*order).detach().requires_grad_()
    cpu = F.max_pool3d(x, 2, return_indices=True)
    tpu = check(lambda v: F.max_pool3d(v, 2, return_indices=True), x)
    assert [t.stride() for t in tpu] == [t.stride() for t in cpu]


def test_adaptive_pools_to_an_empty_size_refuse_the_backward_as_the_cpu():
    for fn in (F.adaptive_avg_pool2d, F.adaptive_max_pool2d, F.adaptive_max_pool1d):
        errors = []
        for dev in ("cpu", "tpu"):
            x = r(1, 16, 6, 5).to(dev)
            x = x[:, :, 0] if fn is F.adaptive_max_pool1d else x
            with pytest.raises(RuntimeError) as e:
                fn(x, 0).sum().backward()
            errors.append(str(e.value))
        assert errors[1] == errors[0]


# ---- normalization -------------------------------------------------------------

def _bn_train_steps(module, dev, steps=3):
    g = torch.Generator().manual_seed(1)
    outs = []
    for _ in range(steps):
        x = torch.randn(4, 3, 5, 5, generator=g).to(dev).requires_grad_()
        y = module(x)
        (y * torch.arange(y.numel(), device=dev).reshape(y.shape).float()).sum().backward()
        outs.append((y, x.grad))
    return outs


@pytest.mark.parametrize("affine", [True, False])
def test_batch_norm_train_updates_running_stats(affine):
    torch.manual_seed(0)
    cpu = nn.BatchNorm2d(3, momentum=0.3, eps=1e-3, affine=affine)
    tpu = __import__("copy").deepcopy(cpu).to("tpu")
    for (yc, gc), (yt, gt) in zip(_bn_train_steps(cpu, "cpu"), _bn_train_steps(tpu, "tpu")):
        assert_same(yt, yc.detach(), atol=1e-5, rtol=1e-5)
        assert_same(gt, gc, atol=1e-4, rtol=1e-4)
    assert_same(tpu.running_mean, cpu.running_mean, atol=1e-6, rtol=1e-5)
    assert_same(tpu.running_var, cpu.running_var, atol=1e-6, rtol=1e-5)
    assert_same(tpu.num_batches_tracked, cpu.num_batches_tracked, exact=True)
    if affine:
        assert_same(tpu.weight.grad, cpu.weight.grad, atol=1e-3, rtol=1e-5)
        assert_same(tpu.bias.grad, cpu.bias.grad, atol=1e-3, rtol=1e-5)
    # eval uses the running statistics, gradients included
    cpu.eval(), tpu.eval()
    check(lambda x: cpu(x) if x.device.type == "cpu" else tpu(x), r(2, 3, 4, 4))


def test_batch_norm_functional_forms():
    x, rm, rv, w, b = r(4, 3, 6), torch.randn(3), torch.rand(3) + 0.5, r(3), r(3)
    check(lambda x, w, b: F.batch_norm(x, rm.to(x.device), rv.to(x.device), w, b, training=False), x, w, b)
    check(lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True), x, w, b)
    # the ops themselves, with statistics
    check(lambda x: torch.ops.aten.native_batch_norm(x, None, None, None, None, True, 0.1, 1e-5), r(3, 2, 4),
          grad=False)
    check(lambda x, m, v: torch.ops.aten._native_batch_norm_legit_functional(x, None, None, m, v, True, 0.2, 1e-5),
          r(3, 2, 4), torch.randn(2, requires_grad=False), torch.rand(2, requires_grad=False), grad=False)


def test_batch_norm_running_stats_in_place_aten():
    x, rm, rv = r(4, 3, 2, grad=False), torch.zeros(3), torch.ones(3)
    trm, trv = rm.to("tpu"), rv.to("tpu")
    out_c = torch.ops.aten._native_batch_norm_legit(x, None, None, rm, rv, True, 0.1, 1e-5)
    out_t = torch.ops.aten._native_batch_norm_legit(x.to("tpu"), None, None, trm, trv, True, 0.1, 1e-5)
    assert_same(out_t, out_c, atol=1e-5, rtol=1e-5)
    assert_same(trm, rm, atol=1e-6, rtol=1e-6)
    assert_same(trv, rv, atol=1e-6, rtol=1e-6)


def test_batch_norm_bf16_input_f32_params():
    x = r(4, 3, 5, dtype=torch.bfloat16)
    check(lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True), x, r(3), r(3),
          atol=5e-2, rtol=5e-2)


@pytest.mark.parametrize("shape,norm", [((4, 6), (6,)), ((2, 3, 4, 5), (4, 5))])
def test_layer_norm(shape, norm):
    check(lambda x, w, b: F.layer_norm(x, norm, w, b, eps=1e-4), r(*shape), r(*norm), r(*norm), atol=1e-5, rtol=1e-5)
    check(lambda x: F.layer_norm(x, norm), r(*shape), atol=1e-5, rtol=1e-5)


def test_layer_norm_ops_and_bf16():
    check(lambda x, w, b: torch.ops.aten.native_layer_norm(x, [5], w, b, 1e-5), r(3, 5), r(5), r(5),
          atol=1e-5, rtol=1e-5)
    check(lambda x, w, b: F.layer_norm(x, (8,), w, b), r(4, 8, dtype=torch.bfloat16),
          r(8, dtype=torch.bfloat16), r(8, dtype=torch.bfloat16), atol=5e-2, rtol=5e-2)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("params", ["same", "float32", "none"])
def test_half_norms_save_statistics_in_the_cpu_dtype(dtype, params):
    """The CPU saves mean/rstd in the input's half dtype, or in float32 when the
    weights are float32 ("mixed type"); PyTorch's meta kernels disagree with it."""
    x = torch.randn(2, 4, 6).to(dtype)
    pdt = {"same": dtype, "float32": torch.float32, "none": None}[params]
    w6, w4 = (None, None) if pdt is None else (torch.randn(6).to(pdt), torch.randn(4).to(pdt))
    ops = [lambda x, w6, w4: torch.ops.aten.native_layer_norm(x, [6], w6, w6, 1e-5),
           lambda x, w6, w4: torch.ops.aten.native_group_norm(x, w4, w4, 2, 4, 6, 2, 1e-5)]
    for op in ops:
        want = op(x, w6, w4)
        got = op(*(None if t is None else t.to("tpu") for t in (x, w6, w4)))
        assert [t.dtype for t in got] == [t.dtype for t in want]
        for g, w in zip(got, want):
            torch.testing.assert_close(g.cpu(), w, atol=2e-2, rtol=2e-2)


def test_layer_norm_weight_only_grad():
    x = r(3, 4, grad=False)
    check(lambda w, b: F.layer_norm(x.to(w.device), (4,), w, b), r(4), r(4, grad=False))


@pytest.mark.parametrize("groups", [1, 2, 4])
def test_group_norm(groups):
    check(lambda x, w, b: F.group_norm(x, groups, w, b, eps=1e-3), r(2, 4, 3, 5), r(4), r(4),
          atol=1e-5, rtol=1e-5)
    check(lambda x: F.group_norm(x, groups), r(3, 4, 6), atol=1e-5, rtol=1e-5)


def test_group_norm_backward_keeps_the_input_layout():
    # native_group_norm_backward called directly: the input's gradient channels_last like the input,
    # as on the CPU (autograd itself hands every device but the CPU row-major operands; the CPU's
    # kernel reads the gradient in the input's layout: given both, as autograd does)
    x = r(2, 4, 3, 3).detach().to(memory_format=torch.channels_last)
    outs = []
    for dev in ("cpu", "tpu"):
        xd, w = x.to(dev), torch.ones(4, device=dev)
        _, mean, rstd = torch.ops.aten.native_group_norm(xd, w, None, 2, 4, 9, 2, 1e-5)
        outs.append(torch.ops.aten.native_group_norm_backward(xd * 0.5 + 1, xd, mean, rstd, w, 2, 4, 9, 2,
                                                              [True, True, False]))
    for (gx, gw, _), (tx, tw, _) in zip(outs[:1], outs[1:]):
        assert tx.stride() == gx.stride() == (36, 1, 12, 4)
        assert_same(tx, gx, atol=1e-5, rtol=1e-5)
        assert_same(tw, gw, atol=1e-5, rtol=1e-5)


def test_rms_norm():
    check(lambda x, w: F.rms_norm(x, (6,), w, eps=1e-5), r(3, 6), r(6), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("dim", [0, 2])
def test_weight_norm(dim):
    # what nn.utils.parametrizations.weight_norm runs for the first or last dim
    g_shape = (4, 1, 1) if dim == 0 else (1, 1, 5)
    check(lambda v, g: torch._weight_norm(v, g, dim), r(4, 3, 5), r(*g_shape).abs(),
          atol=1e-5, rtol=1e-5)
    check(lambda v, g: torch._weight_norm(v, g, dim), r(4, 3, 5, dtype=torch.bfloat16),
          r(*g_shape, dtype=torch.bfloat16), atol=1e-2, rtol=1e-2)


# ---- embedding -----------------------------------------------------------------

@pytest.mark.parametrize("kw", [dict(), dict(padding_idx=1), dict(scale_grad_by_freq=True),
                                dict(padding_idx=-2, scale_grad_by_freq=True)])
def test_embedding(kw):
    idx = torch.tensor([[1, 2, 1], [4, 3, 1]])
    check(lambda w, i: F.embedding(i, w, **kw), r(6, 3), idx)


@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.5])
def test_embedding_max_norm_renormalizes_used_rows_in_place(norm_type):
    w = torch.randn(10, 4, generator=torch.Generator().manual_seed(0)) * 3
    idx = torch.tensor([[1, 3, 3], [7, 0, 1]])
    wt = w.to("tpu")
    want = F.embedding(idx, w, max_norm=1.5, norm_type=norm_type)
    got = F.embedding(idx.to("tpu"), wt, max_norm=1.5, norm_type=norm_type)
    torch.testing.assert_close(got.cpu(), want)
    torch.testing.assert_close(wt.cpu(), w)  # the weight's used rows were rescaled, the rest kept


_BAG_INDICES = torch.tensor([0, 2, 2, 5, 1, 2, 4, 3])


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("kw", [dict(), dict(padding_idx=2), dict(include_last_offset=True)])
def test_embedding_bag(mode, kw):
    offsets = torch.tensor([0, 3, 3, 6, 8] if kw.get("include_last_offset") else [0, 3, 3, 6])
    check(lambda w, i, o: F.embedding_bag(i, w, o, mode=mode, **kw), r(6, 3), _BAG_INDICES, offsets)
    if mode == "sum":
        check(lambda w, i, o, p: F.embedding_bag(i, w, o, mode="sum", per_sample_weights=p, **kw),
              r(6, 3), _BAG_INDICES, offsets, r(8))
    # all four outputs where the CPU fills them, bit for bit but the mean's division
    # (XLA multiplies by the reciprocal), with a NaN and a tie in the max bags
    w = torch.tensor([[1., 5.], [2., 2.], [3., 5.], [0., 9.], [float("nan"), 9.], [-1., -1.]])
    mode_num = ["sum", "mean", "max"].index(mode)

    def bag(w, i, o):
        return torch.ops.aten._embedding_bag(w, i, o, False, mode_num, False, None,
                                             kw.get("include_last_offset", False), kw.get("padding_idx", -1))
    cpu, tpu = bag(w, _BAG_INDICES, offsets), bag(w.to("tpu"), _BAG_INDICES.to("tpu"), offsets.to("tpu"))
    assert_same(tpu[0], cpu[0], exact=mode != "mean")
    if mode != "sum":
        assert_same(tpu[1], cpu[1], exact=True)
        assert torch.equal(tpu[2].cpu()[:cpu[2].shape[0]], cpu[2])
    if mode == "max":
        assert_same(tpu[3], cpu[3], exact=True)


def test_embedding_of_a_table_that_is_not_2d_is_refused_as_on_the_cpu():
    for weight in (torch.tensor(2.0), torch.ones(3, 2, 1)):
        for indices in (torch.tensor([[0, 1]]), torch.tensor([0.5])):
            errors = []
            for dev in ("cpu", "tpu"):
                with pytest.raises(RuntimeError) as e:
                    F.embedding(indices.to(dev), weight.to(dev))
                errors.append(str(e.value))
            assert errors[1] == errors[0] == "'weight' must be 2-D"


def test_embedding_bag_refuses_tensors_of_the_wrong_rank_as_the_cpu():
    w, idx, off = torch.zeros(4, 2, dtype=torch.float64), torch.tensor([1, 3]), torch.tensor([0, 1])
    for args in ((w, idx, off.view(2, 1)), (w.view(4, 2, 1), idx, off), (w, idx.view(1, 1, 2), off)):
        errors = []
        for dev in ("cpu", "tpu"):
            with pytest.raises(RuntimeError) as e:
                torch.embedding_bag(*(a.to(dev) for a in args))
            errors.append(str(e.value))
        assert errors[1] == errors[0]


def test_embedding_bag_index_errors_in_the_cpus_words():
    # the CPU words an index out of range by its path: its fast float path
    # (sum/mean, no padding_idx) names the position, the others the value
    for dtype in (torch.float32, torch.float64):
        for mode, pad in (("sum", None), ("mean", 0), ("max", None)):
            w = r(6, 2, dtype=dtype, grad=False)
            errors = []
            for dev in ("cpu", "tpu"):
                with pytest.raises(RuntimeError) as e:
                    F.embedding_bag(torch.tensor([[2, 7]], device=dev), w.to(dev), mode=mode, padding_idx=pad)
                errors.append(str(e.value))
            assert errors[1] == errors[0]


def test_embedding_bag_2d_input_frequency_scaling_and_errors():
    # every index twice: torch 2.13's CPU divides by another index's count when counts differ
    idx = torch.tensor([[0, 2, 2, 0], [5, 5, 3, 3]])
    check(lambda w, i: F.embedding_bag(i, w, mode="mean", scale_grad_by_freq=True), r(6, 3), idx)
    w = torch.randn(4, 2)
    for i, o in [(torch.tensor([0, 4]), torch.tensor([0])), (torch.tensor([0, 1]), torch.tensor([1]))]:
        with pytest.raises(RuntimeError) as cpu_error:
            F.embedding_bag(i, w, o)
        with pytest.raises(RuntimeError) as tpu_error:
            F.embedding_bag(i.to("tpu"), w.to("tpu"), o.to("tpu"))
        assert str(tpu_error.value) == str(cpu_error.value).splitlines()[0]


# ---- losses --------------------------------------------------------------------

@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("weighted", [False, True])
def test_nll_and_cross_entropy(reduction, weighted):
    w = torch.rand(5) + 0.5 if weighted else None
    t = torch.tensor([1, 0, 4, 2, 2, 3])
    wt = (lambda d: w.to(d)) if weighted else (lambda d: None)
    check(lambda x, t: F.nll_loss(x, t, weight=wt(x.device), reduction=reduction), r(6, 5), t)
    check(lambda x, t: F.cross_entropy(x, t, weight=wt(x.device), reduction=reduction, ignore_index=2),
          r(6, 5), t)


def test_nll_loss_unbatched_and_2d():
    check(lambda x, t: F.nll_loss(x, t), r(5), torch.tensor(3))
    t = torch.tensor([[[0, 1], [2, 2]], [[1, 1], [0, 2]]])
    for reduction in ("mean", "none", "sum"):
        check(lambda x, t: F.nll_loss(x, t, reduction=reduction, ignore_index=1), r(2, 3, 2, 2), t)
    check(lambda x, t: F.cross_entropy(x, t, label_smoothing=0.1), r(2, 3, 2, 2), t)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_regression_losses(reduction):
    x, y = r(4, 5), r(4, 5, seed=7)
    check(lambda a, b: F.mse_loss(a, b, reduction=reduction), x, y)
    check(lambda a, b: F.l1_loss(a, b, reduction=reduction), x, y)
    check(lambda a, b: F.smooth_l1_loss(a, b, reduction=reduction, beta=0.5), x, y)
    check(lambda a, b: F.huber_loss(a, b, reduction=reduction, delta=0.7), x, y)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_binary_cross_entropy(reduction):
    g = torch.Generator().manual_seed(3)
    p = (torch.rand(4, 3, generator=g) * 0.9 + 0.05).requires_grad_()
    t = torch.rand(4, 3, generator=g)
    w = torch.rand(3, generator=g)
    check(lambda p, t: F.binary_cross_entropy(p, t, reduction=reduction), p, t)
    check(lambda p, t, w: F.binary_cross_entropy(p, t, weight=w, reduction=reduction), p, t, w)
    check(lambda x, t, w: F.binary_cross_entropy_with_logits(x, t, weight=w, reduction=reduction), r(4, 3), t, w)
    check(lambda x, t, pw: F.binary_cross_entropy_with_logits(x, t, pos_weight=pw, reduction=reduction),
          r(4, 3), t, w + 0.5)


def test_bce_saturated_probabilities():
    p = torch.tensor([0.0, 1.0, 0.5, 1e-30])
    t = torch.tensor([1.0, 0.0, 1.0, 0.0])
    check(lambda p, t: F.binary_cross_entropy(p, t, reduction="none"), p, t, grad=False)


def test_kl_div():
    check(lambda a, b: F.kl_div(a, b, reduction="batchmean"), r(3, 4), torch.rand(3, 4))


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_multi_margin_loss(reduction):
    t = torch.tensor([1, 0, 4, 2])
    check(lambda x, t: F.multi_margin_loss(x, t, reduction=reduction), r(4, 5), t)
    check(lambda x, t, w: F.multi_margin_loss(x, t, p=2, margin=0.7, weight=w, reduction=reduction),
          r(4, 5), t, torch.rand(5) + 0.5)
    check(lambda x, t: F.multi_margin_loss(x, t, reduction=reduction), r(5), torch.tensor(3))


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_multilabel_margin_loss(reduction):
    t = torch.tensor([[3, 0, -1, 1, 2], [1, 2, 3, 4, 0], [-1, 1, 1, 1, 1], [2, 2, -1, 0, 0]])
    check(lambda x, t: F.multilabel_margin_loss(x, t, reduction=reduction), r(4, 5), t)
    check(lambda x, t: F.multilabel_margin_loss(x, t, reduction=reduction), r(5), t[0])


def test_margin_loss_target_errors():
    x = torch.randn(2, 3)
    for fn, t in [(F.multi_margin_loss, torch.tensor([0, 3])),
                  (F.multilabel_margin_loss, torch.tensor([[0, 3, -1], [0, -1, 5]]))]:
        with pytest.raises(RuntimeError) as cpu_error:
            fn(x, t)
        with pytest.raises(RuntimeError) as tpu_error:
            fn(x.to("tpu"), t.to("tpu"))
        assert str(tpu_error.value) == str(cpu_error.value)


@pytest.mark.parametrize("in_place", [
    lambda a: F.elu_(a, alpha=-1.5), lambda a: F.celu_(a, alpha=-0.5),
    lambda a: F.leaky_relu_(a, -0.3), lambda a: F.rrelu_(a, -3.0, 1.0),
])
def test_in_place_activation_with_negative_slope_refuses_its_backward(in_place):
    # from the result alone the backward cannot tell the input's sign: the CPU raises
    errors = []
    for device in ("cpu", "tpu"):
        a = torch.tensor([-2.0, 0.5, 3.0], device=device, requires_grad=True)
        b = in_place(a.clone())
        with pytest.raises(RuntimeError) as error:
            b.backward(torch.ones(3, device=device))
        errors.append(str(error.value))
    assert errors[1] == errors[0] and "call out-of-place version" in errors[0]


@pytest.mark.parametrize("shape", [(0,), (3, 2, 4)])
def test_multi_margin_loss_shape_error_comes_before_the_target_range(shape):
    # an empty or 3-d input is refused for its shape, whatever the targets hold
    x, t = torch.randn(shape), torch.tensor([1, 2, 3])
    with pytest.raises(RuntimeError) as cpu_error:
        F.multi_margin_loss(x, t)
    with pytest.raises(RuntimeError) as tpu_error:
        F.multi_margin_loss(x.to("tpu"), t.to("tpu"))
    assert "Expected non-empty vector or matrix" in str(cpu_error.value)
    assert "Expected non-empty vector or matrix" in str(tpu_error.value)


@pytest.mark.parametrize("table_on", ["tpu", "cpu"])
def test_embedding_float_indices_raise_the_dtype_error_first(table_on):
    # PyTorch checks the indices' dtype before anything else: also with the table on the CPU
    w, idx = torch.randn(6, 3), torch.tensor([0.5, 2.0])
    with pytest.raises(RuntimeError) as cpu_error:
        F.embedding(idx, w)
    with pytest.raises(RuntimeError) as tpu_error:
        F.embedding(idx.to("tpu"), w.to(table_on))
    assert str(tpu_error.value) == str(cpu_error.value).replace("torch.FloatTensor", "torch.tpu.FloatTensor")


@pytest.mark.parametrize("shape", [(4, 3), (0, 0), (2, 3, 2, 2)])
@pytest.mark.parametrize("weight_dtype", [torch.float16, torch.float64])
def test_nll_loss_weight_of_another_dtype_raises_like_cpu(shape, weight_dtype):
    # not a loss computed anyway: the CPU reads the class weights as the input's dtype
    x = torch.randn(shape)
    t = torch.zeros((shape[0],) + shape[2:], dtype=torch.long)
    w = torch.ones(shape[1], dtype=weight_dtype)
    with pytest.raises(RuntimeError) as cpu_error:
        F.nll_loss(x, t, weight=w)
    for weight_on in ("tpu", "cpu"):
        with pytest.raises(RuntimeError) as tpu_error:
            F.nll_loss(x.to("tpu"), t.to("tpu"), weight=w.to(weight_on))
        assert str(tpu_error.value) == str(cpu_error.value)


@pytest.mark.parametrize("case", ["embedding", "cross_entropy", "negative_target", "nll_loss2d", "ignored_ok"])
def test_indices_outside_the_table_raise_like_cpu(case):
    # not a silent NaN: the same error type and message as the CPU
    x, table = torch.randn(2, 3), torch.randn(3, 4)
    calls = {
        "embedding": (F.embedding, torch.tensor([1, 3]), table),
        "cross_entropy": (F.cross_entropy, x, torch.tensor([0, 5])),
        "negative_target": (F.cross_entropy, x, torch.tensor([-2, 1])),
        "nll_loss2d": (F.nll_loss, torch.randn(1, 3, 2, 2), torch.tensor([[[0, 1], [7, 2]]])),
        "ignored_ok": (lambda a, b: F.cross_entropy(a, b, ignore_index=9), x, torch.tensor([9, 2])),
    }
    fn, *args = calls[case]
    if case == "ignored_ok":
        assert_same(fn(*[a.to("tpu") for a in args]), fn(*args))
        return
    with pytest.raises(IndexError) as cpu_error:
        fn(*args)
    with raises_at_sync(IndexError) as tpu_error:
        fn(*[a.to("tpu") for a in args])
    assert str(tpu_error.value) == str(cpu_error.value)


# ---- dropout -------------------------------------------------------------------

def test_dropout_statistics_and_backward():
    x = torch.ones(64, 64, device="tpu", requires_grad=True)
    y = F.dropout(x, 0.25)
    kept = y.detach().cpu() != 0
    assert 0.65 < kept.float().mean().item() < 0.85
    assert torch.allclose(y.detach().cpu()[kept], torch.tensor(1 / 0.75))
    y.sum().backward()
    assert torch.equal(x.grad.cpu(), kept.float() / 0.75)
    # same seed, same mask
    torch.manual_seed(5)
    a = F.dropout(x, 0.5).cpu()
    torch.manual_seed(5)
    assert torch.equal(F.dropout(x, 0.5).cpu(), a)


def test_dropout_edge_cases():
    x = torch.randn(3, 4)
    assert_same(F.dropout(x.to("tpu"), 0.5, training=False), x, exact=True)
    assert_same(F.dropout(x.to("tpu"), 1.0), torch.zeros(3, 4), exact=True)
    out, mask = torch.ops.aten.native_dropout(x.to("tpu"), 0.3, False)
    assert_same(out, x, exact=True)
    assert_same(mask, torch.ones(3, 4, dtype=torch.bool), exact=True)
    g, m = torch.randn(3, 4), torch.rand(3, 4) > 0.5
    assert_same(torch.ops.aten.native_dropout_backward(g.to("tpu"), m.to("tpu"), 2.0),
                torch.ops.aten.native_dropout_backward(g, m, 2.0), exact=True)


# ---- upsampling ----------------------------------------------------------------

@pytest.mark.parametrize("kw", [dict(scale_factor=2), dict(size=(5, 7)), dict(scale_factor=1.7),
                                dict(size=(2, 3))])
def test_upsample_nearest(kw):
    check(lambda x: F.interpolate(x, mode="nearest", **kw), r(2, 3, 4, 5))


@pytest.mark.parametrize("align", [False, True])
@pytest.mark.parametrize("kw", [dict(scale_factor=2), dict(size=(5, 7)), dict(scale_factor=0.6),
                                dict(size=(1, 1))])
def test_upsample_bilinear(align, kw):
    check(lambda x: F.interpolate(x, mode="bilinear", align_corners=align, **kw), r(2, 3, 4, 5))


@pytest.mark.parametrize("align", [False, True])
@pytest.mark.parametrize("kw", [dict(scale_factor=2), dict(size=(5, 9)), dict(scale_factor=0.6),
                                dict(size=(1, 1))])
def test_upsample_bicubic(align, kw):
    # float64: the weights are computed in double, as on the CPU; float32 values and gradients too
    check(lambda x: F.interpolate(x, mode="bicubic", align_corners=align, **kw),
          r(2, 3, 4, 5).double().detach().requires_grad_(), atol=1e-12, rtol=1e-12)
    check(lambda x: F.interpolate(x, mode="bicubic", align_corners=align, **kw), r(2, 3, 4, 5))


@pytest.mark.parametrize("kw", [dict(scale_factor=2), dict(size=(5, 7)), dict(scale_factor=0.6)])
def test_upsample_nearest_exact(kw):
    check(lambda x: F.interpolate(x, mode="nearest-exact", **kw), r(2, 3, 4, 5))
    check(lambda x: F.interpolate(x, mode="nearest-exact", **{k: v if not isinstance(v, tuple) else v[0]
                                                             for k, v in kw.items()}), r(2, 3, 4))


def test_upsample_1d_3d():
    check(lambda x: F.interpolate(x, scale_factor=3, mode="nearest"), r(1, 2, 4))
    check(lambda x: F.interpolate(x, size=7, mode="linear"), r(1, 2, 4))
    check(lambda x: F.interpolate(x, size=(3, 5, 2), mode="nearest"), r(1, 2, 2, 3, 4))


@pytest.mark.parametrize("align", [False, True])
def test_upsample_trilinear(align):
    check(lambda x: F.interpolate(x, size=(3, 5, 2), mode="trilinear", align_corners=align), r(1, 2, 2, 3, 4))
    check(lambda x: F.interpolate(x, scale_factor=(1.5, 0.6, 2), mode="trilinear", align_corners=align),
          r(2, 1, 4, 5, 3))


@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
def test_grid_sample(mode, padding_mode):
    align = padding_mode != "border"
    grid = r(2, 4, 5, 2, grad=False).mul(0.9).requires_grad_()  # some points fall outside [-1, 1]
    check(lambda x, g: F.grid_sample(x, g, mode=mode, padding_mode=padding_mode, align_corners=align),
          r(2, 3, 6, 7), grid, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
def test_grid_sample_3d(mode, padding_mode):
    grid = r(2, 3, 4, 2, 3, grad=False).mul(0.9).requires_grad_()
    check(lambda x, g: F.grid_sample(x, g, mode=mode, padding_mode=padding_mode,
                                     align_corners=padding_mode == "zeros"),
          r(2, 3, 4, 5, 6), grid, atol=1e-5, rtol=1e-5)


def test_grid_sample_3d_bicubic_error():
    x, g = torch.randn(1, 1, 2, 2, 2), torch.zeros(1, 1, 1, 1, 3)
    with pytest.raises(RuntimeError, match="bicubic interpolation only supports 4D input"):
        F.grid_sample(x.to("tpu"), g.to("tpu"), mode="bicubic", align_corners=False)


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
@pytest.mark.parametrize("kw", [dict(size=(3, 4)), dict(size=(7, 13)), dict(scale_factor=0.37),
                                dict(scale_factor=(1.5, 0.5), align_corners=True), dict(size=(1, 1))])
def test_upsample_antialias(mode, kw):
    def fn(x):
        return F.interpolate(x, mode=mode, antialias=True, **kw)
    # float64: the weights are computed in double, as on the CPU
    check(fn, r(2, 3, 9, 11).double().detach().requires_grad_(), atol=1e-12, rtol=1e-12)
    check(fn, r(2, 3, 9, 11))
    # uint8 images: the CPU's fixed-point weights and rounding, bit for bit
    img = torch.randint(0, 256, (1, 5, 9, 11), dtype=torch.uint8)
    check(fn, img, grad=False, atol=0, rtol=0)


def test_upsample_antialias_dtype_error():
    x = torch.ones(1, 1, 6, 6, dtype=torch.int32)
    with pytest.raises(NotImplementedError) as cpu_error:
        F.interpolate(x, size=(3, 3), mode="bilinear", antialias=True)
    with pytest.raises(NotImplementedError) as tpu_error:
        F.interpolate(x.to("tpu"), size=(3, 3), mode="bilinear", antialias=True)
    assert str(tpu_error.value) == str(cpu_error.value)


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
@pytest.mark.parametrize("align", [False, True])
def test_upsample_uint8_images_bit_exact(mode, align):
    # uint8 images resize in the CPU's fixed-point arithmetic, bit for bit
    for channels, size in ((3, (8, 4)), (5, (31, 2)), (3, (16, 9))):
        x = torch.randint(0, 256, (2, channels, 16, 9), dtype=torch.uint8,
                          generator=torch.Generator().manual_seed(channels))
        expected = F.interpolate(x, size=size, mode=mode, align_corners=align)
        assert torch.equal(F.interpolate(x.to("tpu"), size=size, mode=mode, align_corners=align).cpu(), expected)


@pytest.mark.parametrize("mode, shape", [("linear", (1, 2, 7)), ("bilinear", (1, 2, 5, 7)),
                                         ("bicubic", (1, 2, 5, 7)), ("trilinear", (1, 2, 4, 5, 6))])
def test_upsample_integer_dtype_errors(mode, shape):
    x = torch.zeros(shape, dtype=torch.int32)
    size = tuple(2 * n for n in shape[2:])
    with pytest.raises(NotImplementedError) as cpu_error:
        F.interpolate(x, size=size, mode=mode)
    with pytest.raises(NotImplementedError) as tpu_error:
        F.interpolate(x.to("tpu"), size=size, mode=mode)
    assert str(tpu_error.value) == str(cpu_error.value)


# ---- CTC loss ----------------------------------------------------------------------

def _ctc_inputs(dtype=torch.float32):
    g = torch.Generator().manual_seed(3)
    log_probs = torch.randn(12, 4, 6, generator=g, dtype=dtype).log_softmax(2).requires_grad_()
    targets = torch.randint(1, 6, (4, 5), generator=g)
    targets[0, 1] = targets[0, 0]  # a repeated label needs a blank between
    # sample 2's target does not fit its input (infinite loss), sample 3 has no input
    return log_probs, targets, [12, 10, 3, 0], [5, 0, 4, 2]


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("zero_infinity", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_ctc_loss(reduction, zero_infinity, dtype):
    lp, tg, il, tl = _ctc_inputs(dtype)
    check(lambda lp, tg: F.ctc_loss(lp, tg, il, tl, reduction=reduction, zero_infinity=zero_infinity), lp, tg)
    # concatenated targets and lengths as tensors (wav2vec2's form), a different blank
    flat = torch.cat([tg[i, :n] for i, n in enumerate(tl)])
    check(lambda lp, tg, a, b: F.ctc_loss(lp, tg, a, b, blank=5, reduction=reduction, zero_infinity=zero_infinity),
          lp, flat - 1, torch.tensor(il), torch.tensor(tl))


def test_ctc_loss_unbatched_and_log_alpha():
    lp, tg, il, tl = _ctc_inputs()
    check(lambda lp, tg: F.ctc_loss(lp, tg, [12], [5], reduction="none"), lp[:, 0], tg[0])
    cpu = torch.ops.aten._ctc_loss(lp.detach()[:, :2], tg[:2], il[:2], tl[:2])
    tpu = torch.ops.aten._ctc_loss(lp.detach()[:, :2].to("tpu"), tg[:2].to("tpu"), il[:2], tl[:2])
    assert_same(tpu[0], cpu[0])
    # log_alpha where the CPU defines it (it leaves the rest uninitialized)
    for b in range(2):
        assert_same(tpu[1][b, :il[b], :2 * tl[b] + 1], cpu[1][b, :il[b], :2 * tl[b] + 1])


@pytest.mark.parametrize("call", [
    lambda lp, tg: F.ctc_loss(lp, tg, [13, 10, 3, 0], [5, 0, 4, 2]),       # an input longer than log_probs
    lambda lp, tg: F.ctc_loss(lp, tg, [12, 10, 3, 0], [6, 0, 4, 2]),       # a target longer than targets
    lambda lp, tg: F.ctc_loss(lp, tg, [12, 10, 3], [5, 0, 4]),             # lengths of the wrong size
    lambda lp, tg: F.ctc_loss(lp, tg, [12, 10, 3, 0], [5, 0, 4, 2], blank=6),
    lambda lp, tg: F.ctc_loss(lp, tg, [12, 10, 3, 0], [5, 0, 4, 2], reduction="avg"),
    lambda lp, tg: F.ctc_loss(lp, tg, torch.tensor([12., 10, 3, 0]), torch.tensor([5, 0, 4, 2])),
])
def test_ctc_loss_errors(call):
    lp, tg, _, _ = _ctc_inputs()
    with pytest.raises(Exception) as cpu_error:
        call(lp, tg)
    with pytest.raises(Exception) as tpu_error:
        call(lp.detach().to("tpu"), tg.to("tpu"))
    assert type(tpu_error.value) is type(cpu_error.value)
    assert str(tpu_error.value) == str(cpu_error.value)


# ---- pooling's inverse ------------------------------------------------------------

def test_max_unpool():
    for pool, unpool, shape in [(F.max_pool1d, F.max_unpool1d, (2, 3, 8)),
                                (F.max_pool2d, F.max_unpool2d, (2, 3, 6, 8)),
                                (F.max_pool3d, F.max_unpool3d, (1, 2, 4, 4, 6))]:
        out, idx = pool(r(*shape, grad=False), 2, return_indices=True)
        check(lambda v, i: unpool(v, i, 2, output_size=shape[2:]), out.clone().requires_grad_(), idx)
    # any positions, not only a pooling's (two values for one position are
    # nondeterministic on the CPU; the later one stays here)
    v, i = torch.tensor([[[1., 2., 3.]]]), torch.tensor([[[5, 0, 3]]])
    check(lambda v, i: F.max_unpool1d(v, i, 2, output_size=[6]), v, i, grad=False)
    with pytest.raises(RuntimeError, match="Found an invalid max index: 6"):
        F.max_unpool1d(v.to("tpu"), torch.tensor([[[0, 6, 1]]], device="tpu"), 2, output_size=[6])


def test_max_unpool2d_of_a_channels_last_input_is_channels_last():
    """As the CPU's: the result follows a channels_last input (the 3d op's stays row-major)."""
    out, idx = F.max_pool2d(r(1, 2, 4, 6, grad=False).contiguous(memory_format=torch.channels_last), 2,
                            return_indices=True)
    cpu = F.max_unpool2d(out, idx, 2)
    tpu = F.max_unpool2d(out.to("tpu"), idx.to("tpu"), 2)
    assert tpu.stride() == cpu.stride() == (48, 1, 12, 2)
    assert torch.equal(tpu.cpu(), cpu)


# ---- padding, im2col, pixel shuffle --------------------------------------------

@pytest.mark.parametrize("pad", [(1, 2), (1, 1, 2, 0), (2, 1, 0, 1, 1, 1), (-1, 2, 1, -1)])
def test_constant_pad(pad):
    check(lambda x: F.pad(x, pad, value=1.5), r(2, 3, 4, 5))


def test_constant_pad_int():
    x = torch.arange(6).reshape(2, 3)
    check(lambda x: F.pad(x, (1, 1), value=7), x, grad=False)


@pytest.mark.parametrize("mode", ["reflect", "replicate"])
def test_mode_pads(mode):
    check(lambda x: F.pad(x, (2, 1), mode=mode), r(2, 3, 5))
    check(lambda x: F.pad(x, (1, 2, 2, 1), mode=mode), r(2, 3, 4, 5))
    check(lambda x: F.pad(x, (1, 0, 1, 2, 0, 1), mode=mode), r(1, 2, 3, 4, 5))


@pytest.mark.parametrize("mode", ["reflect", "replicate"])
@pytest.mark.parametrize("shape, fmt", [((2, 3, 4, 5), torch.channels_last), ((1, 2, 3, 4, 5), torch.channels_last_3d)])
def test_mode_pads_keep_the_input_layout(mode, shape, fmt):
    # the CPU lays out the padded result and the input's gradient as the input (a row-major
    # gradient flowing back too), not row-major
    pad = (1, 2, 2, 1, 1, 0)[:2 * (len(shape) - 2)]
    x = r(*shape).detach().to(memory_format=fmt)
    results = []
    for dev in ("cpu", "tpu"):
        xd = x.to(dev).requires_grad_()
        y = F.pad(xd, pad, mode=mode)
        g, = torch.autograd.grad(y, xd, torch.ones(y.shape, device=dev))
        results.append((y, g))
    (y, g), (yt, gt) = results
    assert y.stride() != torch.empty(y.shape).stride()  # (the CPU's layout is the input's)
    assert (yt.stride(), gt.stride()) == (y.stride(), g.stride())
    assert_same(yt, y)
    assert_same(gt, g)


def test_replicate_pad_negative():
    check(lambda x: F.pad(x, (-1, 2, 1, -2), mode="replicate"), r(2, 3, 4, 5))
    check(lambda x: F.pad(x, (-2, -1), mode="replicate"), r(2, 3, 5))


def test_reflect_pad_negative():
    # a negative side crops before (or instead of) the mirror, as ATen's index formula
    check(lambda x: F.pad(x, (0, 0, -1, -1), mode="reflect"), r(2, 3, 4, 5))
    check(lambda x: F.pad(x, (-1, 2, 1, -2), mode="reflect"), r(2, 3, 4, 5))
    check(lambda x: F.pad(x, (4, -6), mode="reflect"), r(2, 3, 7))
    check(lambda x: F.pad(x, (-1, 2, 0, -3, 2, -1), mode="reflect"), r(1, 2, 4, 5, 6))


@pytest.mark.parametrize("size, step", [(3, 1), (2, 2), (2, 3)])
def test_tensor_unfold_backward(size, step):
    check(lambda x: x.unfold(1, size, step), r(2, 7, 3))
    check(lambda x: x.unfold(-1, size, step), r(3, 8))


def test_unfold_fold():
    check(lambda x: F.unfold(x, (2, 3), dilation=(1, 2), padding=1, stride=(2, 1)), r(2, 3, 5, 6))
    check(lambda c: F.fold(c, (5, 6), (2, 3), dilation=(1, 2), padding=1, stride=(2, 1)), r(2, 18, 12))


def test_pixel_shuffle():
    check(lambda x: F.pixel_shuffle(x, 2), r(2, 8, 3, 4))
    check(lambda x: F.pixel_unshuffle(x, 2), r(2, 2, 4, 6))


# ---- attention -----------------------------------------------------------------

def _attention_case(kind):
    q, k, v = r(2, 4, 5, 8), r(2, 4, 6, 8, seed=1), r(2, 4, 6, 8, seed=2)
    kw = {}
    if kind == "causal":
        kw = dict(is_causal=True)
    elif kind == "bool_mask":
        mask = torch.rand(5, 6, generator=torch.Generator().manual_seed(0)) > 0.3
        mask[:, 0] = True  # every query sees at least one key
        kw = dict(attn_mask=mask)
    elif kind == "masked_row":  # a query that sees no key: zeros, as PyTorch's math path
        mask = torch.ones(5, 6, dtype=torch.bool)
        mask[2] = False
        kw = dict(attn_mask=mask)
    elif kind == "float_mask":
        kw = dict(attn_mask=torch.randn(1, 4, 5, 6))
    elif kind == "gqa":
        k, v = r(2, 2, 6, 8, seed=1), r(2, 2, 6, 8, seed=2)
        kw = dict(enable_gqa=True)
    elif kind == "scale":
        kw = dict(scale=0.2)
    elif kind == "negative_scale":  # the query's factor negative, as PyTorch's math path splits it
        kw = dict(scale=-0.3, attn_mask=torch.randn(5, 6, generator=torch.Generator().manual_seed(3)))
    elif kind == "no_keys":  # zero keys: zeros, as PyTorch's math path (a max of nothing raised)
        q, k, v = r(2, 4, 5, 8), r(2, 4, 0, 8, seed=1), r(2, 4, 0, 8, seed=2)
    elif kind == "three_d_value_dim":
        q, k, v = r(4, 5, 8), r(4, 6, 8, seed=1), r(4, 6, 3, seed=2)
    elif kind == "dropout_zero_composite":  # outside the fused op's cover: the composite
        q, k, v = r(2, 3, 4, 5, 8), r(2, 3, 4, 6, 8, seed=1), r(2, 3, 4, 6, 8, seed=2)
    return q, k, v, kw


ATTENTION_KINDS = ["plain", "causal", "bool_mask", "masked_row", "float_mask", "gqa", "scale",
                   "negative_scale", "no_keys", "three_d_value_dim", "dropout_zero_composite"]


@pytest.mark.parametrize("kind", ATTENTION_KINDS)
def test_scaled_dot_product_attention(kind):
    q, k, v, kw = _attention_case(kind)

    def fn(q, k, v):
        extra = {n: (m.to(q.device) if isinstance(m, torch.Tensor) else m) for n, m in kw.items()}
        return F.scaled_dot_product_attention(q, k, v, **extra)
    check(fn, q, k, v, atol=1e-5, rtol=1e-5)


def _dispatched_ops(fn):
    from torch.utils._python_dispatch import TorchDispatchMode

    class Record(TorchDispatchMode):
        ops = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.append(func.__name__)
            return func(*args, **(kwargs or {}))
    with Record() as mode:
        fn()
    return mode.ops


@pytest.mark.parametrize("kind", ATTENTION_KINDS)
def test_attention_runs_as_one_fused_op_where_it_can(kind):
    q, k, v, kw = _attention_case(kind)
    q, k, v = (_tpu(x) for x in (q, k, v))
    kw = {n: (m.to("tpu") if isinstance(m, torch.Tensor) else m) for n, m in kw.items()}
    ops = _dispatched_ops(lambda: F.scaled_dot_product_attention(q, k, v, **kw))
    fused = "_scaled_dot_product_fused_attention_overrideable.default"
    if kind == "dropout_zero_composite":  # 5-D inputs: PyTorch's matmul + softmax composite
        assert fused not in ops and "bmm.default" in ops
    else:
        assert ops.count(fused) == 1 and "bmm.default" not in ops


def _attention_leaves(layout, device, kv_heads=2):
    """(leaves, q, k, v) with 2 query heads: laid out (batch, heads, seq, dim)
    row-major ("bhsd"), transposed from (batch, seq, heads, dim) ("bshd"), keys
    and values row-major under such a query ("bshd_q", with ``kv_heads``), or
    split from one (batch, seq, 3 * heads * dim) projection as a GPT block
    makes them ("split")."""
    g = torch.Generator().manual_seed(0)

    def make(heads, order):
        shape = (2, heads, 5, 8) if order == "bhsd" else (2, 5, heads, 8)
        t = torch.randn(shape, generator=g).to(device).requires_grad_()
        return t, (t if order == "bhsd" else t.transpose(1, 2))
    if layout == "split":
        x = torch.randn(2, 5, 3 * 16, generator=g).to(device).requires_grad_()
        q, k, v = (t.view(2, 5, 2, 8).transpose(1, 2) for t in x.split(16, dim=2))
        return [x], q, k, v
    orders = {"bhsd": ("bhsd",) * 3, "bshd": ("bshd",) * 3, "bshd_q": ("bshd", "bhsd", "bhsd")}[layout]
    made = [make(heads, order) for heads, order in zip((2, kv_heads, kv_heads), orders)]
    return [t for t, _ in made], *(view for _, view in made)


def _attention_layouts(layout, device, kv_heads=2):
    """The strides of the attention, and of the gradients as the backward op returns them (before
    autograd lays out a leaf's gradient like the leaf)."""
    from torch.utils._python_dispatch import TorchDispatchMode
    grads = []

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if "scaled_dot_product" in str(func) and "backward" in str(func):
                grads.extend(tuple(t.stride()) for t in out[:3])
            return out
    leaves, q, k, v = _attention_leaves(layout, device, kv_heads)
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=kv_heads != 2)
    with Record():
        out.backward(torch.ones_like(out))
    return out, tuple(out.stride()), grads, [t.grad for t in leaves]


@pytest.mark.parametrize("layout,kv_heads", [("bhsd", 2), ("bshd", 2), ("bshd_q", 1), ("split", 2)])
def test_attention_lays_out_its_output_and_gradients_as_the_cpu(layout, kv_heads):
    """The attention like the query, the gradients (batch, seq, heads, dim)
    ordered whatever the inputs' layout: as the CPU's flash kernels."""
    cpu_out, cpu_layout, cpu_grad_layouts, cpu_grads = _attention_layouts(layout, "cpu", kv_heads)
    tpu_out, tpu_layout, tpu_grad_layouts, tpu_grads = _attention_layouts(layout, "tpu", kv_heads)
    assert len(cpu_grad_layouts) == 3  # (the CPU took its flash kernel)
    assert (tpu_layout, tpu_grad_layouts) == (cpu_layout, cpu_grad_layouts)
    torch.testing.assert_close(tpu_out.cpu(), cpu_out.detach(), atol=1e-5, rtol=1e-5)
    for cpu_grad, tpu_grad in zip(cpu_grads, tpu_grads, strict=True):
        assert tpu_grad.stride() == cpu_grad.stride()
        torch.testing.assert_close(tpu_grad.cpu(), cpu_grad, atol=1e-5, rtol=1e-5)


def test_attention_output_merges_its_heads_without_a_copy():
    """A GPT block's ``y.transpose(1, 2).reshape(b, t, c)`` after SDPA is a
    view on the CPU (the output is laid out like the query), and so here: no
    clone forward or backward (8 of the micro GPT's 316 ops a step were)."""
    leaves, q, k, v = _attention_leaves("split", "tpu")

    def step():
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y.transpose(1, 2).reshape(2, 5, 16).sum().backward()
    ops = _dispatched_ops(step)
    assert "_scaled_dot_product_fused_attention_overrideable_backward.default" in ops
    assert "clone.default" not in ops


def test_attention_mask_gradient():
    mask = torch.randn(2, 1, 5, 6, requires_grad=True)
    check(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
          r(2, 4, 5, 8), r(2, 4, 6, 8, seed=1), r(2, 4, 6, 8, seed=2), mask, atol=1e-5, rtol=1e-5)


def test_attention_errors_match_pytorch():
    q, k = torch.randn(2, 4, 5, 8), torch.randn(2, 3, 6, 8)
    for gqa in (False, True):  # 4 query heads over 3 key heads: wrong either way
        with pytest.raises(RuntimeError) as cpu_error:
            F.scaled_dot_product_attention(q, k, k, enable_gqa=gqa)
        with pytest.raises(RuntimeError) as tpu_error:
            F.scaled_dot_product_attention(q.to("tpu"), k.to("tpu"), k.to("tpu"), enable_gqa=gqa)
        assert type(tpu_error.value) is type(cpu_error.value)


def _causal_with_mask_case(case):
    """(q, k, v, mask, kwargs, backends): a mask with is_causal=True.  The CPU's flash kernel
    applies both; its math path (3-D inputs, dropout, a mask needing a gradient or of another
    rank, a strided head dimension, sdpa_kernel without flash...) raises."""
    from torch.nn.attention import SDPBackend
    q, k, v = r(2, 2, 5, 8), r(2, 2, 6, 8, seed=1), r(2, 2, 6, 8, seed=2)
    g = torch.Generator().manual_seed(4)
    mask = torch.rand(5, 6, generator=g) > 0.4
    kw, backends = {}, None
    if case == "float":
        mask = torch.randn(5, 6, generator=g)
    elif case == "mask_4d":
        mask = torch.rand(2, 1, 5, 6, generator=g) > 0.4
    elif case == "mask_row":
        mask = torch.rand(1, 6, generator=g) > 0.2
    elif case == "gqa_float64":
        q, k, v = (r(2, h, n, 8, dtype=torch.float64, seed=s) for h, n, s in ((4, 5, 0), (2, 6, 1), (2, 6, 2)))
        kw = dict(enable_gqa=True)
    elif case == "more_queries":  # queries past the last key: rows the mask may empty (zeros)
        q = r(2, 2, 9, 8)
        mask = torch.rand(9, 6, generator=g) > 0.4
    elif case == "three_d":
        q, k, v = r(4, 5, 8), r(4, 6, 8, seed=1), r(4, 6, 8, seed=2)
    elif case == "mask_3d":
        mask = mask[None]
    elif case == "mask_grad":
        mask = torch.randn(5, 6, generator=g, requires_grad=True)
    elif case == "strided_query":
        q = r(2, 2, 8, 5).transpose(-1, -2)
    elif case == "math_only":
        backends = [SDPBackend.MATH]
    return q, k, v, mask, kw, backends


@pytest.mark.parametrize("case", ["bool", "float", "mask_4d", "mask_row", "gqa_float64", "more_queries",
                                  "three_d", "mask_3d", "mask_grad", "strided_query", "math_only"])
def test_attention_mask_with_is_causal_as_the_cpu(case):
    import contextlib

    from torch.nn.attention import sdpa_kernel
    q, k, v, mask, kw, backends = _causal_with_mask_case(case)

    def fn(q, k, v, mask):
        with sdpa_kernel(backends) if backends else contextlib.nullcontext():
            return F.scaled_dot_product_attention(q, k, v, mask, is_causal=True, **kw)
    try:
        fn(q, k, v, mask)
    except RuntimeError:
        with pytest.raises(RuntimeError, match="Explicit attn_mask should not be set when is_causal=True"):
            fn(*(_tpu(x) for x in (q, k, v, mask)))
        return
    check(fn, q, k, v, mask, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("kind", ATTENTION_KINDS)
def test_fused_sdp_choice_names_the_path_taken(kind):
    """torch._fused_sdp_choice answers on tpu (it ran the CPU's choice, which names
    the CPU's flash kernel): the out-of-tree overload where SDPA runs it, else math."""
    from torch.nn.attention import SDPBackend
    q, k, v, kw = _attention_case(kind)
    q, k, v = (_tpu(x) for x in (q, k, v))
    kw = {n: (m.to("tpu") if isinstance(m, torch.Tensor) else m) for n, m in kw.items()}
    mask = kw.pop("attn_mask", None)
    fallbacks = dict(torch_tpu.fallback_ops())
    choice = torch._fused_sdp_choice(q, k, v, mask, **kw)
    assert dict(torch_tpu.fallback_ops()) == fallbacks
    ops = _dispatched_ops(lambda: F.scaled_dot_product_attention(q, k, v, mask, **kw))
    fused = "_scaled_dot_product_fused_attention_overrideable.default" in ops
    assert choice == (SDPBackend.OVERRIDEABLE if fused else SDPBackend.MATH).value


def test_attention_bf16():
    q, k, v = (r(1, 2, 4, 8, dtype=torch.bfloat16, seed=s) for s in range(3))
    check(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), q, k, v,
          atol=5e-2, rtol=5e-2)


# ---- rrelu (ops/random.py) ------------------------------------------------------------

def test_rrelu_eval_matches_cpu():
    x = torch.randn(5, 6, generator=torch.Generator().manual_seed(0), requires_grad=True)
    check(lambda a: F.rrelu(a, 0.1, 0.4, training=False), x)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_rrelu_eval_of_half_tensors_computes_in_float32_as_cpu(dtype):
    # leaky_relu by the mean slope: the product in float32, rounded once (it
    # was a half product: ~17% of the negative elements an ulp off)
    x = (torch.randn(64, 64, generator=torch.Generator().manual_seed(0)) * 4).to(dtype)
    got = F.rrelu(x.to("tpu"), 0.2236, 0.4474, training=False)
    torch.testing.assert_close(got.cpu(), F.rrelu(x, 0.2236, 0.4474, training=False), rtol=0, atol=0)


def test_rrelu_training_writes_noise_and_backward_uses_it():
    x = torch.randn(200, generator=torch.Generator().manual_seed(0)).to("tpu").requires_grad_()
    noise = torch.empty(200, device="tpu")
    out = torch.ops.aten.rrelu_with_noise(x, noise, 0.1, 0.4, True)
    xc, nc = x.detach().cpu(), noise.cpu()
    neg = xc <= 0
    assert ((nc[neg] >= 0.1) & (nc[neg] <= 0.4)).all() and (nc[~neg] == 1).all()
    assert nc[neg].unique().numel() > 1  # one slope per element
    assert_same(out, xc * nc)
    out.backward(torch.ones(200, device="tpu"))
    assert_same(x.grad, nc)
    y = x.detach().clone()
    F.rrelu_(y, 0.1, 0.4, training=True)  # in place: negatives scaled, positives kept
    yc = y.cpu()
    assert (yc[~neg] == xc[~neg]).all() and (yc[neg] <= 0.1 * xc[neg] + 1e-6).all()
