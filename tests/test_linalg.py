"""Matrix products on tpu against PyTorch's CPU results: values and gradients."""
import warnings

import pytest
import torch
import torch.nn.functional as F

import torch_tpu
from helpers import assert_same

warnings.filterwarnings("ignore", message="torch_tpu: .* has no tpu kernel")

OWN = {"mm", "bmm", "addmm", "addmm_", "addmv", "addmv_", "mv", "dot", "vdot", "baddbmm", "baddbmm_",
       "addbmm", "addbmm_", "addr", "addr_", "_addmm_activation"}


@pytest.fixture(autouse=True)
def no_own_fallback():
    yield
    fell = {n.split("::")[-1].split(".")[0] for n in torch_tpu.fallback_ops()}
    assert sorted(fell & OWN) == []


def r(*shape, dtype=torch.float32, grad=True, seed=0):
    g = torch.Generator().manual_seed(seed + 31 * len(shape) + sum(shape))
    if dtype.is_floating_point or dtype.is_complex:
        t = torch.randn(shape, generator=g, dtype=torch.float32 if not dtype.is_complex else dtype).to(dtype)
        return t.requires_grad_(grad)
    return torch.randint(-6, 7, shape, generator=g).to(dtype)


def check(fn, *inputs, atol=1e-5, rtol=1.3e-6, exact=False):
    cpu_in = [x.detach().clone().requires_grad_(x.requires_grad) for x in inputs]
    tpu_in = [x.detach().to("tpu").requires_grad_(x.requires_grad) for x in cpu_in]
    c, t = fn(*cpu_in), fn(*tpu_in)
    if exact:
        assert_same(t, c, exact=True)
    else:
        assert_same(t, c, atol=atol, rtol=rtol)
    if c.requires_grad:
        up = torch.randn(c.shape, generator=torch.Generator().manual_seed(1)).to(c.dtype)
        c.backward(up)
        t.backward(up.to("tpu"))
        for a, b in zip(cpu_in, tpu_in):
            if a.requires_grad:
                assert_same(b.grad, a.grad, atol=atol, rtol=rtol)


def test_mm_bmm_mv_dot():
    check(torch.mm, r(5, 7), r(7, 3))
    check(torch.bmm, r(4, 5, 7), r(4, 7, 3))
    check(torch.mv, r(5, 7), r(7))
    check(torch.dot, r(9), r(9, seed=1))
    check(torch.vdot, r(9), r(9, seed=1))


def test_matmul_broadcasting_and_linear():
    check(torch.matmul, r(2, 3, 5, 4), r(4, 6))
    check(torch.matmul, r(2, 1, 5, 4), r(3, 4, 2))
    check(torch.matmul, r(4), r(2, 4, 3))
    check(lambda x, w, b: F.linear(x, w, b), r(3, 4, 6), r(5, 6), r(5))
    check(lambda x, w: F.linear(x, w), r(4, 6), r(5, 6))


def test_transposed_operands():
    check(lambda a, b: a.t() @ b.t(), r(7, 5), r(3, 7))
    check(lambda a, b: a.transpose(1, 2) @ b, r(2, 7, 5), r(2, 7, 3))


@pytest.mark.parametrize("beta,alpha", [(1, 1), (0.5, 2.0), (0, 1.5)])
def test_addmm_family(beta, alpha):
    kw = dict(beta=beta, alpha=alpha)
    check(lambda s, a, b: torch.addmm(s, a, b, **kw), r(5, 3), r(5, 7), r(7, 3))
    check(lambda s, a, b: torch.addmm(s, a, b, **kw), r(3), r(5, 7), r(7, 3))  # broadcast self
    check(lambda s, a, v: torch.addmv(s, a, v, **kw), r(5), r(5, 7), r(7))
    check(lambda s, a, b: torch.baddbmm(s, a, b, **kw), r(2, 5, 3), r(2, 5, 7), r(2, 7, 3))
    check(lambda s, a, b: torch.addbmm(s, a, b, **kw), r(5, 3), r(4, 5, 2), r(4, 2, 3))
    check(lambda s, a, b: torch.addr(s, a, b, **kw), r(5, 3), r(5), r(3))


def test_beta_zero_ignores_nan():
    s = torch.full((3, 2), float("nan"))
    a, b = r(3, 4, grad=False), r(4, 2, grad=False)
    check(lambda s, a, b: torch.addmm(s, a, b, beta=0), s, a, b)
    check(lambda s, a, b: torch.baddbmm(s, a, b, beta=0), s.expand(2, 3, 2).contiguous(),
          a.expand(2, 3, 4).contiguous(), b.expand(2, 4, 2).contiguous())


def test_in_place_and_out_variants():
    s, a, b = r(5, 3, grad=False), r(5, 7, grad=False), r(7, 3, grad=False)
    ts = s.to("tpu")
    ts.addmm_(a.to("tpu"), b.to("tpu"), alpha=0.5)
    assert_same(ts, s.clone().addmm_(a, b, alpha=0.5), atol=1e-5, rtol=1e-6)
    out = torch.empty(5, 3, device="tpu")
    torch.mm(a.to("tpu"), b.to("tpu"), out=out)
    assert_same(out, a @ b, atol=1e-5, rtol=1e-6)


def test_float32_uses_full_precision():
    # near-cancelling sums expose bf16-rounded operands (relative error ~1e-3)
    a = torch.tensor([[1.0 + 2 ** -20, -1.0]])
    b = torch.tensor([[1.0], [1.0]])
    assert_same(torch.mm(a.to("tpu"), b.to("tpu")), a @ b, exact=True)
    check(torch.mm, r(64, 64), r(64, 32), atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int8])
def test_integer_products_exact(dtype):
    check(torch.mm, r(5, 7, dtype=dtype), r(7, 3, dtype=dtype), exact=True)
    check(torch.bmm, r(2, 5, 7, dtype=dtype), r(2, 7, 3, dtype=dtype), exact=True)
    check(torch.mv, r(5, 7, dtype=dtype), r(7, dtype=dtype), exact=True)
    check(torch.dot, r(7, dtype=dtype), r(7, dtype=dtype, seed=2), exact=True)


def test_large_int64_exact():
    a = torch.tensor([[2 ** 40, 3]], dtype=torch.int64)
    b = torch.tensor([[5], [2 ** 35]], dtype=torch.int64)
    check(torch.mm, a, b, exact=True)


def test_float64_and_complex():
    check(torch.mm, r(4, 6, dtype=torch.float64), r(6, 3, dtype=torch.float64), atol=1e-12, rtol=1e-12)
    check(torch.vdot, r(5, dtype=torch.complex64, grad=False), r(5, dtype=torch.complex64, grad=False, seed=3))
    check(torch.mm, r(3, 4, dtype=torch.complex64, grad=False), r(4, 2, dtype=torch.complex64, grad=False))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_products(dtype):
    tol = dict(atol=2e-2, rtol=2e-2)
    check(torch.mm, r(8, 16, dtype=dtype), r(16, 4, dtype=dtype), **tol)
    check(torch.bmm, r(2, 8, 16, dtype=dtype), r(2, 16, 4, dtype=dtype), **tol)
    check(lambda x, w, b: F.linear(x, w, b), r(3, 16, dtype=dtype), r(8, 16, dtype=dtype), r(8, dtype=dtype), **tol)


def test_addmm_activation():
    s, a, b = r(3), r(4, 5), r(5, 3)
    for gelu in (False, True):
        # no autograd formula in PyTorch: values only
        check(lambda s, a, b: torch.ops.aten._addmm_activation(s, a, b, beta=0.5, use_gelu=gelu),
              s.detach(), a.detach(), b.detach())


def test_einsum_and_outer():
    check(lambda a, b: torch.einsum("bij,bjk->bik", a, b), r(2, 3, 4), r(2, 4, 5))
    check(lambda a, b: torch.einsum("ij,kj->ik", a, b), r(3, 4), r(5, 4))
    check(torch.outer, r(3), r(4))


def test_shape_errors_match():
    a, b = torch.randn(3, 4), torch.randn(5, 2)
    with pytest.raises(RuntimeError) as cpu_err:
        torch.mm(a, b)
    with pytest.raises(RuntimeError) as tpu_err:
        torch.mm(a.to("tpu"), b.to("tpu"))
    assert "3, 4" in str(tpu_err.value) and "5, 2" in str(tpu_err.value)  # the meta kernel's wording
    with pytest.raises(RuntimeError):
        torch.bmm(torch.randn(2, 3, 4, device="tpu"), torch.randn(3, 4, 2, device="tpu"))


def test_empty_inner_dimension():
    check(torch.mm, r(3, 0, grad=False), r(0, 2, grad=False))
    check(lambda s, a, b: torch.addmm(s, a, b, beta=2), r(3, 2, grad=False), r(3, 0, grad=False), r(0, 2, grad=False))
