"""Shape ops and factories on tpu against PyTorch's CPU results."""
import pytest
import torch

import torch_tpu
from helpers import assert_same, run_both, sample, strict, to_tpu  # noqa: F401  (strict: no CPU fallback)


_x = sample


# ---- fill / zero ------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool, torch.bfloat16, torch.complex64])
def test_fill_zero(dtype):
    x = torch.zeros(3, 4, dtype=dtype)
    run_both(lambda a: a.clone().fill_(1), x, exact=True)
    run_both(lambda a: a.clone().zero_(), x + 1 if dtype != torch.bool else x, exact=True)
    run_both(lambda a: a.clone().fill_(torch.tensor(1)), x, exact=True)


def test_fill_through_views():
    x = _x(4, 6)
    t = x.to("tpu")
    x[:, 1::2].fill_(3.0)
    t[:, 1::2].fill_(3.0)
    x.t()[2].zero_()
    t.t()[2].zero_()
    x.diagonal().fill_(-1)
    t.diagonal().fill_(-1)
    assert_same(t, x, exact=True)


def test_fill_tensor_value_on_tpu():
    t = torch.empty(3, device="tpu").fill_(torch.tensor(2.5, device="tpu"))
    assert_same(t, torch.full((3,), 2.5), exact=True)


# ---- factories ----------------------------------------------------------------------

@pytest.mark.parametrize("make", [
    lambda d: torch.zeros(2, 3, device=d),
    lambda d: torch.ones(4, dtype=torch.int32, device=d),
    lambda d: torch.full((2, 2), 7.5, device=d),
    lambda d: torch.full((2,), True, device=d),
    lambda d: torch.scalar_tensor(3, device=d),
    lambda d: torch.tensor([[1, 2], [3, 4]], device=d),
    lambda d: torch.tensor(2.5, device=d, dtype=torch.float64),
    lambda d: torch.arange(7, device=d),
    lambda d: torch.arange(2, 11, 3, device=d),
    lambda d: torch.arange(10, 0, -3, device=d),
    lambda d: torch.arange(0, 1, 0.1, device=d),
    lambda d: torch.arange(-1.5, 2.25, 0.25, device=d, dtype=torch.float64),
    lambda d: torch.arange(0, 5, device=d, dtype=torch.bfloat16),
    lambda d: torch.arange(0, 1, 0.1, device=d, dtype=torch.float16),
    lambda d: torch.arange(1e6, 1e6 + 10, 0.7, device=d),
    lambda d: torch.linspace(0, 1, 7, device=d),
    lambda d: torch.linspace(-3, 5, 1, device=d),
    lambda d: torch.linspace(-3, 5, 0, device=d),
    lambda d: torch.linspace(0, 10, 4, device=d, dtype=torch.int64),
    lambda d: torch.linspace(2.5, -7.3, 6, device=d, dtype=torch.float64),
    lambda d: torch.logspace(0, 3, 4, device=d),
    lambda d: torch.logspace(-1, 1, 5, base=2, device=d, dtype=torch.float64),
    lambda d: torch.logspace(2, 5, 1, device=d),
    lambda d: torch.eye(3, device=d),
    lambda d: torch.eye(2, 4, device=d, dtype=torch.int64),
    lambda d: torch.tril_indices(4, 3, device=d),
    lambda d: torch.triu_indices(3, 5, 1, device=d),
    lambda d: torch.tril_indices(3, 3, -1, device=d, dtype=torch.int32),
])
def test_factories(make):
    exact = True
    assert_same(make("tpu"), make("cpu"), exact=exact)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_arange_linspace_long_exact(dtype):
    # the CPU's vector loop and fused multiply-adds are reproduced bit for bit
    for args in ((-2, 7, 0.013), (3.3, 100, 0.77), (5, -5, -0.3)):
        assert_same(torch.arange(*args, device="tpu", dtype=dtype), torch.arange(*args, dtype=dtype), exact=True)
    if dtype == torch.float32:
        for n in (100, 1001):
            assert_same(torch.linspace(3.3, -1e3, n, device="tpu"), torch.linspace(3.3, -1e3, n), exact=True)


def test_float64_and_logspace_long_close():
    # float64 (CPU uses FMA) and logspace (libm pow): within an ulp or so
    assert_same(torch.arange(-2, 7, 0.013, device="tpu", dtype=torch.float64),
                torch.arange(-2, 7, 0.013, dtype=torch.float64))
    assert_same(torch.linspace(3.3, -1e3, 1001, device="tpu", dtype=torch.float64),
                torch.linspace(3.3, -1e3, 1001, dtype=torch.float64))
    assert_same(torch.logspace(-2, 7, 1001, device="tpu"), torch.logspace(-2, 7, 1001))


def test_like_factories():
    x = _x(2, 3).to("tpu")
    for fn in (torch.zeros_like, torch.ones_like, lambda a: torch.full_like(a, 4.0)):
        assert_same(fn(x), fn(torch.empty(2, 3)), exact=True)
    assert torch.empty_like(x).device.type == "tpu"


def test_factory_out_and_errors():
    out = torch.empty(0, dtype=torch.int64, device="tpu")
    torch.arange(5, out=out)
    assert_same(out, torch.arange(5), exact=True)
    with pytest.raises(RuntimeError, match="step must be nonzero"):
        torch.arange(0, 5, 0, device="tpu")
    with pytest.raises(RuntimeError, match="inconsistent"):
        torch.arange(0, 5, -1, device="tpu")
    with pytest.raises(RuntimeError):
        torch.linspace(0, 1, -1, device="tpu")


@pytest.mark.parametrize("make", [
    lambda: torch.zeros(3, device="tpu:1"),
    lambda: torch.ones(3, device="tpu:1"),
    lambda: torch.arange(3, device="tpu:1"),
    lambda: torch.linspace(0, 1, 3, device="tpu:1"),
    lambda: torch.eye(2, device="tpu:1"),
    lambda: torch.tensor([1, 2], device="tpu:1"),
    lambda: torch.full((2,), 1.0, device="tpu:1"),
    lambda: torch.rand(2, device="tpu:1"),
    lambda: torch.randperm(3, device="tpu:1"),
    lambda: torch.tril_indices(3, 3, device="tpu:1"),
])
def test_bad_device_index(make):
    with pytest.raises(RuntimeError, match="Invalid device index"):
        make()


# ---- cat / stack ----------------------------------------------------------------------------

def test_cat():
    a, b = _x(2, 3), _x(4, 3)
    run_both(lambda p, q: torch.cat([p, q]), a, b, exact=True)
    run_both(lambda p, q: torch.cat([p.t(), q.t()], dim=1), a, b, exact=True)
    run_both(lambda p, q: torch.cat([p, q], dim=-2), a, b, exact=True)
    run_both(lambda p: torch.cat([p]), a, exact=True)


def test_cat_promotion_and_legacy_empty():
    a, b = _x(2, 3), _x(1, 3, dtype=torch.int64)
    run_both(lambda p, q: torch.cat([p, q]), a, b, exact=True)
    run_both(lambda p, q: torch.cat([q, p.to(torch.float64)]), a, b, exact=True)
    run_both(lambda p, q: torch.cat([p, q, torch.zeros_like(p, dtype=torch.bool)]), a, b, exact=True)
    run_both(lambda p, e: torch.cat([e, p, e], dim=1), a, torch.empty(0), exact=True)
    run_both(lambda e: torch.cat([e, e]), torch.empty(0, dtype=torch.int32), exact=True)


def test_cat_out_and_errors():
    a, b = _x(2, 3), _x(2, 3)
    out = torch.empty(1, device="tpu")
    torch.cat([a.to("tpu"), b.to("tpu")], dim=1, out=out)
    assert_same(out, torch.cat([a, b], dim=1), exact=True)
    with pytest.raises(RuntimeError, match="Sizes of tensors must match"):
        torch.cat([torch.zeros(2, 3, device="tpu"), torch.zeros(2, 4, device="tpu")])
    with pytest.raises(RuntimeError):
        torch.cat([torch.zeros(2, device="tpu"), torch.zeros(2)])


def test_stack_and_backward():
    a, b = _x(2, 3).requires_grad_(), _x(2, 3).requires_grad_()
    at, bt = to_tpu(a), to_tpu(b)
    run_both(lambda p, q: torch.stack([p, q], dim=1), a.detach(), b.detach(), exact=True)
    g = _x(4, 3)
    torch.cat([a, b]).backward(g)
    torch.cat([at, bt]).backward(g.to("tpu"))
    assert_same(at.grad, a.grad, exact=True)
    assert_same(bt.grad, b.grad, exact=True)


# ---- reorderings and views ---------------------------------------------------------------------

def test_flip_roll():
    x = _x(3, 4, 2)
    run_both(lambda a: a.flip(0), x, exact=True)
    run_both(lambda a: a.flip(0, 2), x, exact=True)
    run_both(lambda a: a.transpose(0, 2).flip(-1), x, exact=True)
    run_both(lambda a: a.roll(1), x, exact=True)
    run_both(lambda a: a.roll(-2, 1), x, exact=True)
    run_both(lambda a: a.roll((1, 5), (0, 1)), x, exact=True)
    run_both(lambda a: torch.fliplr(a), x, exact=True)


@pytest.mark.parametrize("k", [0, 1, -1, 5])
def test_tril_triu(k):
    x = _x(2, 4, 5)
    run_both(lambda a: a.tril(k), x, exact=True)
    run_both(lambda a: a.triu(k), x, exact=True)
    run_both(lambda a: a.transpose(1, 2).tril(k), x, exact=True)
    run_both(lambda a: a.clone().triu_(k), x, exact=True)
    out = torch.empty(0, device="tpu")
    torch.tril(x.to("tpu"), k, out=out)
    assert_same(out, torch.tril(x, k), exact=True)


def test_views_and_copies():
    x = _x(4, 6)
    run_both(lambda a: a.split([1, 3]), x, exact=True)
    run_both(lambda a: a.unbind(1), x, exact=True)
    run_both(lambda a: a.t().contiguous(), x, exact=True)
    run_both(lambda a: a.chunk(3, 1), x, exact=True)
    run_both(lambda a: a.repeat(2, 1, 3), x, exact=True)
    run_both(lambda a: a[:, 1:5:2].clone(), x, exact=True)
    run_both(lambda a: torch.diag(a), x, exact=True)
    run_both(lambda a: torch.diag(a[0], 1), x, exact=True)
    run_both(lambda a: torch.diag_embed(a), x, exact=True)
    y = _x(2, 3, 4, 5)
    # contiguous() of permuted, strided, expanded and 0-d/empty views: one
    # row-major launch (ops/shape.py), PyTorch's strides and values
    for view in (lambda a: a.permute(0, 2, 3, 1), lambda a: a[:, :, ::2], lambda a: a[:, :1].expand(2, 3, 4, 5),
                 lambda a: a[0, 0, 0, 0], lambda a: a[:, :0].transpose(1, 3)):
        for fmt in (torch.contiguous_format, torch.preserve_format):
            got, want = view(y.to("tpu")).clone(memory_format=fmt), view(y).clone(memory_format=fmt)
            assert got.stride() == want.stride()
            assert_same(got, want, exact=True)
    cl = y.to("tpu").clone(memory_format=torch.channels_last)
    assert cl.stride() == y.clone(memory_format=torch.channels_last).stride()
    assert_same(cl, y, exact=True)


# ---- searching, unique, histc -------------------------------------------------------------------

def test_searchsorted_bucketize():
    seq = torch.tensor([1.0, 2.0, 2.0, 5.0, 9.0])
    vals = torch.tensor([[0.0, 2.0, 3.0], [9.0, 10.0, 2.0]])
    for right in (False, True):
        run_both(lambda s, v: torch.searchsorted(s, v, right=right), seq, vals, exact=True)
        run_both(lambda v, s: torch.bucketize(v, s, right=right), vals, seq, exact=True)
    run_both(lambda s, v: torch.searchsorted(s, v, side="right", out_int32=True), seq, vals, exact=True)
    batched = torch.tensor([[1, 3, 5, 7], [0, 0, 4, 8]])
    run_both(lambda s, v: torch.searchsorted(s, v), batched, torch.tensor([[3, 6], [0, 9]]), exact=True)
    unsorted = torch.tensor([5.0, 1.0, 9.0, 2.0])
    sorter = torch.argsort(unsorted)
    run_both(lambda s, v, o: torch.searchsorted(s, v, sorter=o), unsorted, vals, sorter, exact=True)
    run_both(lambda s: torch.searchsorted(s, 4.0), seq, exact=True)
    run_both(lambda s: torch.bucketize(3, s), seq, exact=True)


@pytest.mark.parametrize("dtype", [torch.int64, torch.float32])
def test_unique(dtype):
    x = torch.tensor([[3, 1, 2], [1, 7, 3]], dtype=dtype)
    run_both(torch.unique, x, exact=True)
    run_both(lambda a: torch.unique(a, return_inverse=True, return_counts=True), x, exact=True)
    run_both(lambda a: torch.unique(a, return_counts=True), x, exact=True)
    run_both(lambda a: torch.unique(a, sorted=False), x, exact=True)
    run_both(torch.unique, torch.empty(0, dtype=dtype), exact=True)


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_unique_dim(dim):
    # distinct slices in lexicographic order; NaN slices stay distinct
    x = torch.randint(0, 3, (6, 2, 3), generator=torch.Generator().manual_seed(0))
    run_both(lambda a: torch.unique(a, dim=dim, return_inverse=True, return_counts=True), x, exact=True)
    nan_rows = torch.tensor([[2.0, float("nan")], [2.0, float("nan")], [-0.0, 1.0], [0.0, 1.0]])
    run_both(lambda a: torch.unique(a, dim=dim, return_inverse=True, return_counts=True), nan_rows, exact=True)
    run_both(lambda a: torch.unique(a, dim=0), torch.empty(0, 3), exact=True)


def test_unique_dim_errors_match_cpu():
    for x, dim in [(torch.tensor(3.0), 0), (torch.zeros(2, 3), 2), (torch.zeros(2, 0), 0)]:
        with pytest.raises(Exception) as cpu:
            torch.unique(x, dim=dim)
        with pytest.raises(cpu.type, match=str(cpu.value)[:40].replace("[", r"\[").replace("(", r"\(")):
            torch.unique(x.to("tpu"), dim=dim)


def test_histc():
    x = torch.tensor([0.0, 0.5, 1.0, 1.0, 2.5, 3.0, -1.0, 7.0])
    run_both(lambda a: torch.histc(a, bins=4, min=0, max=3), x, exact=True)
    run_both(lambda a: torch.histc(a, bins=5), x, exact=True)
    run_both(lambda a: torch.histc(a, bins=3), torch.full((4,), 2.0), exact=True)


def test_no_fallback():
    assert not torch_tpu.fallback_ops() or all(
        not k.startswith(("aten::cat", "aten::fill", "aten::zero", "aten::arange"))
        for k in torch_tpu.fallback_ops())


@pytest.mark.parametrize("make", [
    lambda d: torch.empty(2, 3, device=d, memory_format=torch.channels_last),
    lambda d: torch.empty(2, 3, 4, 5, device=d, memory_format=torch.channels_last_3d),
    lambda d: torch.empty(2, 3, device=d, memory_format=torch.preserve_format),
    lambda d: torch.ones_like(torch.zeros(2, 3, device=d), memory_format=torch.channels_last),
    lambda d: torch.zeros(2, 3, device=d).contiguous(memory_format=torch.channels_last),
])
def test_memory_format_the_rank_cannot_take_raises(make):
    with pytest.raises(RuntimeError) as cpu:
        make("cpu")
    with pytest.raises(RuntimeError) as tpu:
        make("tpu")
    assert str(tpu.value) == str(cpu.value)


def test_empty_channels_last_strides():
    for size, fmt in (((2, 3, 4, 5), torch.channels_last), ((2, 3, 4, 5, 6), torch.channels_last_3d)):
        assert torch.empty(size, device="tpu", memory_format=fmt).stride() == torch.empty(size, memory_format=fmt).stride()
