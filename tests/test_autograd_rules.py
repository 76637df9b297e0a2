"""Autograd on tpu tensors follows the CPU's rules: higher-order and
forward-mode gradients, batched gradients, the layout of accumulated
gradients, version counters and requires_grad checks.  PyTorch's engine runs
the graph; what is device-specific is every kernel it calls (backward
formulas, ``AccumulateGrad``'s empty_strided/copy_, ``resize_``), so each case
is compared with the CPU's own answer."""
import pytest
import torch
import torch.autograd.forward_ad as fwAD
from helpers import assert_same, sample, strict  # noqa: F401  (no CPU fallback)

import torch_tpu  # noqa: F401


def on(device, *shape, dtype=torch.float64):
    return sample(*shape, dtype=dtype).to(device).requires_grad_()


def second_derivative_through_a_view(device):
    x = on(device, 3, 4)
    y = x.clone()
    y[:, 1:3].mul_(x[:, :2].sin())  # in-place on a view, differentiated twice
    (g,) = torch.autograd.grad((y * y).sum(), x, create_graph=True)
    (gg,) = torch.autograd.grad(g.pow(2).sum(), x)
    return g.detach(), gg


def forward_mode_tangent(device):
    primal = sample(3, 4, dtype=torch.float64).to(device)
    tangent = torch.ones(3, 4, dtype=torch.float64, device=device)
    with fwAD.dual_level():
        out = (fwAD.make_dual(primal, tangent).exp() * primal).tanh().cumsum(1)
        return fwAD.unpack_dual(out).tangent


def batched_vector_jacobian(device):
    x = on(device, 4, 5)
    eye = torch.eye(5, dtype=torch.float64, device=device)
    (rows,) = torch.autograd.grad(x.sin()[1] * x[2], x, eye, is_grads_batched=True)
    jac = torch.func.vmap(torch.func.jacrev(lambda t: t.cos() * t.sum()))(x.detach())
    return rows, jac


def slicing_gradients(device):
    # slice_backward and select_backward (one padded launch on tpu): steps,
    # negative and out-of-range bounds, empty slices, negative indices, and
    # twice differentiated
    x = on(device, 4, 7, 3)
    parts = [x[:, 1:3], x[:, -3:], x[:, ::2], x[:, 5:2], x[:, 1::3], x[-100:100], x[:, 10:20],
             x[1], x[:, -1], x[..., 2], x[2:, :, 1:2]]
    y = sum((p.sin() * (k + 1)).sum() for k, p in enumerate(parts))
    (g,) = torch.autograd.grad(y, x, create_graph=True)
    (gg,) = torch.autograd.grad((g[:, 1::2] * g[:, ::3].cos().sum()).sum(), x)
    h = sample(6, 5, dtype=torch.bfloat16).to(device).requires_grad_()
    (hg,) = torch.autograd.grad(h[1:5:3, -2].float().sum() + h[:, 2:].float().pow(2).sum(), h)
    return g.detach(), gg, hg


@pytest.mark.parametrize("case", [second_derivative_through_a_view, forward_mode_tangent,
                                  batched_vector_jacobian, slicing_gradients], ids=lambda f: f.__name__)
def test_gradients_match_cpu(case):
    assert_same(case("tpu"), case("cpu"))


@pytest.mark.parametrize("layout", ["contiguous", "channels_last", "not_dense"])
def test_accumulated_grad_layout_follows_the_leaf(layout):
    """A dense leaf's .grad has the leaf's strides (first grad and accumulated
    ones); a leaf with gaps gets a row-major .grad, as on the CPU."""
    def grads(device):
        if layout == "not_dense":
            leaf = torch.empty_strided((2, 3), (6, 2), dtype=torch.float64, device=device)
            leaf.copy_(sample(2, 3, dtype=torch.float64))
        else:
            fmt = torch.channels_last if layout == "channels_last" else torch.contiguous_format
            leaf = sample(2, 3, 4, 5, dtype=torch.float64).to(device).contiguous(memory_format=fmt)
        leaf.requires_grad_()
        leaf.sum().backward()  # broadcast gradient: expanded, no strides of its own
        first = leaf.grad.stride()
        (leaf * leaf).sum().backward()  # accumulated into the existing .grad
        return first, leaf.grad.stride(), leaf.grad

    (tpu_first, tpu_then, tpu_grad), (cpu_first, cpu_then, cpu_grad) = grads("tpu"), grads("cpu")
    assert (tpu_first, tpu_then) == (cpu_first, cpu_then)
    assert_same(tpu_grad, cpu_grad)


def test_version_counter_and_in_place_after_save():
    for device in ("cpu", "tpu"):
        x = torch.rand(1, device=device)
        x.resize_((1, 2))
        x.resize_as_(torch.empty(3, device=device))
        x.resize_((3,))  # same size: no bump
        assert x._version == 2, device

        a = on(device, 3).clone()
        saved = a * a
        a.add_(1)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            saved.sum().backward()


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.bool])
def test_requires_grad_refused_for_non_float(dtype):
    t = torch.ones(2, dtype=dtype, device="tpu")
    with pytest.raises(RuntimeError, match="floating point"):
        t.requires_grad_()
    with pytest.raises(RuntimeError, match="floating point"):
        torch.ones(2, dtype=dtype, device="tpu", requires_grad=True)
