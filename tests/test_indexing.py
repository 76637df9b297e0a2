"""Indexing ops on tpu against PyTorch's CPU results."""
import pytest
import torch

import torch_tpu
from helpers import assert_same, raises_at_sync, run_both, sample, strict, to_tpu  # noqa: F401  (strict: no CPU fallback)


_x = sample


# ---- advanced indexing ---------------------------------------------------------

@pytest.mark.parametrize("make_key", [
    lambda: (torch.tensor([0, 2, -1]),),
    lambda: (slice(None), torch.tensor([[1, 0], [3, 3]])),
    lambda: (torch.tensor([0, 1]), slice(None), torch.tensor([2, 0])),
    lambda: (None, torch.tensor([1, 2])),
    lambda: (Ellipsis, torch.tensor([0, 4])),
    lambda: (torch.tensor([0, 2]), torch.tensor([1, 3])),
    lambda: (torch.tensor([True, False, True]),),
    lambda: (slice(None), torch.tensor([True, False, True, False])),
    lambda: (torch.tensor([[True, False, True, False]] * 3),),
    lambda: (torch.tensor([1, 2], dtype=torch.int32), 1),
])
def test_index(make_key):
    x = _x(3, 4, 5)
    key = make_key()
    expect = x[key]
    dev_key = tuple(k.to("tpu") if isinstance(k, torch.Tensor) else k for k in key)
    assert_same(x.to("tpu")[dev_key], expect, exact=True)
    assert_same(x.to("tpu")[key], expect, exact=True)  # CPU index tensors are allowed


def test_index_non_contiguous():
    x = _x(4, 6)
    idx = torch.tensor([3, 0, 1])
    assert_same(x.to("tpu").t()[idx], x.t()[idx], exact=True)
    assert_same(x.to("tpu")[:, ::2][idx], x[:, ::2][idx], exact=True)


def test_index_out_of_range():
    x = torch.zeros(3, 4, device="tpu")
    with raises_at_sync(IndexError, match="out of bounds for dimension 0 with size 3"):
        x[torch.tensor([0, 3], device="tpu")]
    with raises_at_sync(IndexError, match="out of bounds for dimension 1 with size 4"):
        x[:, torch.tensor([-5])]
    with raises_at_sync(IndexError):
        x[torch.tensor([True, False])]


def test_bool_mask_empty_and_all():
    x = _x(5)
    for m in (torch.zeros(5, dtype=torch.bool), torch.ones(5, dtype=torch.bool)):
        assert_same(x.to("tpu")[m.to("tpu")], x[m], exact=True)


@pytest.mark.parametrize("accumulate", [False, True])
def test_index_put(accumulate):
    x = _x(4, 3)
    idx = (torch.tensor([0, 2, 2, -1]), torch.tensor([1, 0, 0, 2]))
    v = _x(4)
    expect = x.clone().index_put_(idx, v, accumulate=accumulate)
    if not accumulate:  # duplicate positions: any writer may win; make them agree
        v[2] = v[1]
        expect = x.clone().index_put_(idx, v, accumulate=accumulate)
    got = x.to("tpu").index_put_(to_tpu(idx), v.to("tpu"), accumulate=accumulate)
    assert_same(got, expect, exact=not accumulate)
    assert_same(torch.index_put(x.to("tpu"), to_tpu(idx), v.to("tpu"), accumulate), expect)


def test_setitem():
    x = _x(4, 5)
    t = x.to("tpu")
    mask = x > 0
    x[mask] = 7.0
    t[mask.to("tpu")] = 7.0
    x[torch.tensor([1, 3]), 1:3] = -1.0
    t[torch.tensor([1, 3], device="tpu"), 1:3] = -1.0
    x[:, torch.tensor([0])] = torch.arange(4.0).reshape(4, 1)
    t[:, torch.tensor([0])] = torch.arange(4.0).reshape(4, 1).to("tpu")
    assert_same(t, x, exact=True)


@pytest.mark.parametrize("put", [
    lambda x, m: x.__setitem__(m, float("nan")),  # CPU mask, tpu tensor: not PyTorch's masked_fill_ path
    lambda x, m: x.__setitem__((slice(None), m[0]), -2.0),
    lambda x, m: x.t().__setitem__(m.t(), 3.0),  # written through a transposed view
    lambda x, m: x.index_put_((m,), torch.tensor([[5.0]], device=x.device)),
    lambda x, m: x.__setitem__(torch.tensor(True), 1.0),  # a 0-d mask: all or nothing
    lambda x, m: x.__setitem__((m[:, 0], 1), 8.0),  # a mask and a number
], ids=["mask", "mask-dim1", "transposed", "index_put_-1x1", "0-d", "mask-and-int"])
def test_mask_fill_with_one_value(put):
    x, m = _x(4, 5), _x(4, 5) > 0
    t = x.to("tpu")
    put(x, m)
    put(t, m)
    assert_same(t, x, exact=True)


def test_mask_fill_compiles_once_per_shape():
    """``x[mask] = v`` for masks of one shape reuses one executable, whatever
    the count of True (it used to compile a nonzero and an index_put per count)."""
    from torch_tpu import profiler
    g = torch.Generator().manual_seed(0)
    t = torch.zeros(6, 7, device="tpu")
    t[torch.rand(6, 7, generator=g) > 0.5] = 1.0
    before = profiler.xla_compiles()
    for _ in range(5):
        t[torch.rand(6, 7, generator=g) > 0.5] = 2.0
    t.cpu()
    assert profiler.xla_compiles() == before


def test_setitem_through_view():
    x = _x(4, 6)
    t = x.to("tpu")
    x[:, 1::2][torch.tensor([0, 2])] = 5.0
    t[:, 1::2][torch.tensor([0, 2])] = 5.0
    assert_same(t, x, exact=True)


def test_index_put_out_of_range():
    t = torch.zeros(3, device="tpu")
    with raises_at_sync(IndexError):
        t[torch.tensor([5], device="tpu")] = 1.0


def test_index_backward():
    x = _x(5, 3).requires_grad_()
    xt = to_tpu(x)
    idx = torch.tensor([0, 4, 0, 2])
    g = _x(4, 3)
    x[idx].backward(g)
    xt[idx.to("tpu")].backward(g.to("tpu"))
    assert_same(xt.grad, x.grad)
    x.grad = None
    xt.grad = None
    mask = torch.tensor([True, False, True, True, False])
    g = _x(3, 3)
    x[mask].backward(g)
    xt[mask.to("tpu")].backward(g.to("tpu"))
    assert_same(xt.grad, x.grad)


# ---- gather / scatter ---------------------------------------------------------------

@pytest.mark.parametrize("dim", [0, 1, -1])
def test_gather(dim):
    x = _x(4, 5)
    index = torch.randint(0, 4, (3, 2), generator=torch.Generator().manual_seed(1))
    run_both(torch.gather, x, dim, index, exact=True)
    run_both(lambda a, i: torch.gather(a.t(), dim, i), x, index, exact=True)


def test_gather_out_and_errors():
    x = _x(4, 5)
    index = torch.tensor([[0, 1], [3, 2]])
    out = torch.empty(0, device="tpu")
    torch.gather(x.to("tpu"), 0, index.to("tpu"), out=out)
    assert_same(out, torch.gather(x, 0, index), exact=True)
    with raises_at_sync(RuntimeError, match="index 4 is out of bounds for dimension 0 with size 4"):
        torch.gather(x.to("tpu"), 0, torch.tensor([[4]], device="tpu"))
    with raises_at_sync(RuntimeError, match="out of bounds"):
        torch.gather(x.to("tpu"), 1, torch.tensor([[-1]], device="tpu"))


def test_gather_backward():
    x = _x(4, 5).requires_grad_()
    xt = to_tpu(x)
    index = torch.tensor([[0, 0, 1], [3, 3, 3]])
    grad = _x(2, 3)
    torch.gather(x, 1, index).backward(grad)
    torch.gather(xt, 1, index.to("tpu")).backward(grad.to("tpu"))
    assert_same(xt.grad, x.grad)


def test_scatter_variants():
    x = _x(4, 5)
    index = torch.tensor([[0, 1, 2], [3, 0, 1]])
    src = _x(3, 4) * 10
    run_both(lambda a, i, s: a.scatter(1, i, s), x, index, src, exact=True)
    run_both(lambda a, i: a.scatter(1, i, 2.5), x, index, exact=True)
    run_both(lambda a, i, s: a.scatter(1, i, s, reduce="add"), x, index, src)
    run_both(lambda a, i, s: a.scatter(1, i, s, reduce="multiply"), x, index, src)
    run_both(lambda a, i: a.scatter(1, i, 2.0, reduce="multiply"), x, index)
    dup = torch.tensor([[0, 0, 0], [1, 1, 4]])
    run_both(lambda a, i, s: a.scatter_add(1, i, s), x, dup, src)
    run_both(lambda a, i, s: a.clone().scatter_add_(1, i, s), x, dup, src)


@pytest.mark.parametrize("index_shape", [(0,), (0, 3, 1)])
def test_scatter_with_an_empty_index_of_any_rank_is_a_no_op(index_shape):
    # the CPU checks no rank or shape when the index is empty: self comes back as it was
    x, src = _x(3, 4), _x(2, 5)
    index = torch.empty(index_shape, dtype=torch.long)
    run_both(lambda a, i, s: a.scatter(0, i, s), x, index, src, exact=True)
    run_both(lambda a, i, s: a.scatter(1, i, s, reduce="multiply"), x, index, src, exact=True)
    run_both(lambda a, i, s: a.clone().scatter_add_(0, i, s), x, index, src, exact=True)
    for reduce in ("sum", "mean", "amin"):
        run_both(lambda a, i, s: a.scatter_reduce(1, i, s, reduce, include_self=False), x, index, src, exact=True)


@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
def test_scatter_reduce(reduce, include_self, dtype):
    x = _x(3, 6, dtype=dtype)
    index = torch.tensor([[0, 0, 5, 2], [1, 1, 1, 1], [4, 0, 4, 4]])
    src = _x(3, 4, dtype=dtype)
    run_both(lambda a, i, s: a.scatter_reduce(1, i, s, reduce, include_self=include_self),
             x, index, src, exact=dtype == torch.int64)


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_scatter_reduce_mean_of_complex_divides_as_the_cpu(dtype):
    # the mean divides the sums by the counts by c10's complex division; XLA's differed by an ulp
    g = torch.Generator().manual_seed(0)
    x = torch.randn(40, dtype=dtype, generator=g)
    src = torch.randn(1000, dtype=dtype, generator=g)
    index = torch.randint(0, 40, (1000,), generator=g)
    for include_self in (True, False):
        run_both(lambda a, i, s: a.scatter_reduce(0, i, s, "mean", include_self=include_self),
                 x, index, src, exact=True)


@pytest.mark.parametrize("reduce", ["amax", "amin"])
def test_scatter_reduce_amax_amin_of_bools_without_self(reduce):
    # the untouched-by-self start of a bool max is False, of a min True (iinfo has no bool)
    x = torch.tensor([True, False, True, False, True])
    src = torch.tensor([False, True, False, True, False, False])
    index = torch.tensor([0, 1, 1, 2, 2, 0])
    run_both(lambda a, i, s: a.scatter_reduce(0, i, s, reduce, include_self=False), x, index, src, exact=True)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_scatter_sums_and_products_round_once_as_the_cpu(dtype):
    # the CPU's scatter kernel accumulates half tensors in float32 and rounds at the end;
    # rounding after each update (XLA's half scatter) was off by several ulps
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(30, 3, generator=g) * 10).to(dtype)
    src = (torch.randn(400, 3, generator=g) * 10).to(dtype)
    factors = (torch.rand(400, 3, generator=g) + 0.5).to(dtype)
    index = torch.randint(0, 30, (400, 3), generator=g)
    run_both(lambda a, i, s: a.scatter_add(0, i, s), x, index, src, exact=True)
    run_both(lambda a, i, s: a.scatter(0, i, s, reduce="add"), x, index, src, exact=True)
    run_both(lambda a, i, s: a.scatter(0, i, s, reduce="multiply"), x, index, factors, exact=True)
    for reduce in ("sum", "mean", "prod"):
        for include_self in (True, False):
            run_both(lambda a, i, s: a.scatter_reduce(0, i, s, reduce, include_self=include_self),
                     x, index, factors if reduce == "prod" else src, exact=True)


def test_scatter_in_place_non_contiguous_and_errors():
    x = _x(5, 4)
    index = torch.tensor([[0, 1], [2, 3]])
    src = _x(2, 2)
    expect = x.clone()
    expect.t().scatter_(1, index, src)
    got = x.to("tpu")
    got.t().scatter_(1, index.to("tpu"), src.to("tpu"))
    assert_same(got, expect, exact=True)
    with raises_at_sync(RuntimeError, match="out of bounds"):
        torch.zeros(3, device="tpu").scatter_(0, torch.tensor([3], device="tpu"), 1.0)
    with raises_at_sync(RuntimeError, match="out of bounds"):
        torch.zeros(3, device="tpu").scatter_add_(0, torch.tensor([-1], device="tpu"),
                                                  torch.ones(1, device="tpu"))


def test_scatter_backward():
    x = _x(3, 4).requires_grad_()
    src = _x(3, 2).requires_grad_()
    xt, st = to_tpu(x), to_tpu(src)
    index = torch.tensor([[0, 3], [1, 2], [2, 2]])
    g = torch.arange(12.0).reshape(3, 4)
    x.scatter(1, index, src).backward(g)
    xt.scatter(1, index.to("tpu"), st).backward(g.to("tpu"))
    assert_same(xt.grad, x.grad)
    assert_same(st.grad, src.grad)
    x.grad = src.grad = xt.grad = st.grad = None
    x.scatter_add(1, index, src).backward(g)
    xt.scatter_add(1, index.to("tpu"), st).backward(g.to("tpu"))
    assert_same(xt.grad, x.grad)
    assert_same(st.grad, src.grad)


# ---- index_select / index_add / index_copy / index_fill ------------------------------

@pytest.mark.parametrize("dim", [0, 1])
def test_index_select(dim):
    x = _x(4, 5)
    index = torch.tensor([3, 0, 0, 1])
    run_both(torch.index_select, x, dim, index, exact=True)
    run_both(lambda a, i: a.t().index_select(dim, i), x, index, exact=True)
    out = torch.empty(0, device="tpu")
    torch.index_select(x.to("tpu"), dim, index.to("tpu"), out=out)
    assert_same(out, torch.index_select(x, dim, index), exact=True)
    run_both(torch.index_select, x, dim, torch.tensor(2), exact=True)


def test_index_select_errors_and_backward():
    x = torch.zeros(3, 2, device="tpu")
    with raises_at_sync(IndexError, match="index out of range in self"):
        x.index_select(0, torch.tensor([3], device="tpu"))
    with raises_at_sync(IndexError, match="index out of range in self"):
        x.index_select(0, torch.tensor([-1], device="tpu"))
    a = _x(4, 3).requires_grad_()
    at = to_tpu(a)
    index = torch.tensor([1, 1, 3])
    g = _x(3, 3)
    a.index_select(0, index).backward(g)
    at.index_select(0, index.to("tpu")).backward(g.to("tpu"))
    assert_same(at.grad, a.grad)


def test_index_add_copy_fill():
    x = _x(5, 3)
    index = torch.tensor([4, 0, 4])
    src = _x(3, 3)
    run_both(lambda a, i, s: a.index_add(0, i, s), x, index, src)
    run_both(lambda a, i, s: a.index_add(0, i, s, alpha=-2.0), x, index, src)
    run_both(lambda a, i, s: a.clone().index_add_(1, i, s), x, torch.tensor([2, 0]), _x(5, 2))
    uniq = torch.tensor([4, 0, 2])
    run_both(lambda a, i, s: a.index_copy(0, i, s), x, uniq, src, exact=True)
    run_both(lambda a, i, s: a.clone().index_copy_(0, i, s), x, uniq, src, exact=True)
    run_both(lambda a, i: a.index_fill(1, i, -3.0), x, torch.tensor([0, -1]), exact=True)
    run_both(lambda a, i: a.clone().index_fill_(0, i, torch.tensor(9.0)), x, uniq, exact=True)
    run_both(lambda a, i: a.t().index_fill(0, i, 1.5), x, torch.tensor([1]), exact=True)
    xi = _x(5, 3, dtype=torch.int64)
    run_both(lambda a, i, s: a.index_add(0, i, s, alpha=3), xi, index, _x(3, 3, dtype=torch.int64), exact=True)


def test_index_add_copy_fill_errors():
    x = torch.zeros(3, 2, device="tpu")
    with raises_at_sync(IndexError, match="index out of range in self"):
        x.index_add_(0, torch.tensor([3], device="tpu"), torch.ones(1, 2, device="tpu"))
    with raises_at_sync(IndexError, match="index_copy_"):
        x.index_copy_(0, torch.tensor([7], device="tpu"), torch.ones(1, 2, device="tpu"))
    with raises_at_sync(IndexError, match="out of bounds"):
        x.index_fill_(0, torch.tensor([3], device="tpu"), 1.0)


@pytest.mark.parametrize("reduce", ["prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_index_reduce(reduce, include_self):
    x = _x(5, 3)
    x[1, 2] = float("nan")
    index = torch.tensor([4, 0, 4, 2])
    src = _x(4, 3)
    src[3, 0] = float("nan")
    run_both(lambda a, i, s: a.index_reduce(0, i, s, reduce, include_self=include_self), x, index, src)
    run_both(lambda a, i, s: a.index_reduce(1, i, s, reduce, include_self=include_self),
             x.t().contiguous(), index, src.t().contiguous())
    xi = _x(5, 3, dtype=torch.int64)  # integer mean floors
    run_both(lambda a, i, s: a.index_reduce(0, i, s, reduce, include_self=include_self), xi, index,
             _x(4, 3, dtype=torch.int64), exact=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.complex64])
def test_index_reduce_mean_divides_as_the_cpu(dtype):
    # the sums divided by the broadcast counts: XLA multiplied by their reciprocal (an ulp off)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(20, 3, dtype=dtype, generator=g)
    src = torch.randn(200, 3, dtype=dtype, generator=g)
    index = torch.randint(0, 20, (200,), generator=g)
    run_both(lambda a, i, s: a.index_reduce(0, i, s, "mean"), x, index, src, exact=True)
    if not dtype.is_complex:  # (the CPU has no complex index_reduce without self)
        run_both(lambda a, i, s: a.index_reduce(0, i, s, "mean", include_self=False), x, index, src, exact=True)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_index_add_of_slices_rounds_once_as_the_cpu(dtype):
    # slices (alpha 1) are summed in float32 and rounded at the end on the CPU; single
    # elements (1-d) and alpha != 1 round after each add
    g = torch.Generator().manual_seed(0)
    index = torch.randint(0, 20, (200,), generator=g)
    for shape, dim in (((20, 3), 0), ((3, 20), 1), ((20, 2, 2), 0), ((20,), 0)):
        x = (torch.randn(shape, generator=g) * 4).to(dtype)
        src_shape = list(shape)
        src_shape[dim] = 200
        src = (torch.randn(src_shape, generator=g) * 4).to(dtype)
        run_both(lambda a, i, s: a.index_add(dim, i, s), x, index, src, exact=True)
        run_both(lambda a, i, s: a.index_add(dim, i, s, alpha=2), x, index, src, exact=True)


def test_index_reduce_errors():
    x = torch.zeros(3, 2, device="tpu")
    with raises_at_sync(IndexError, match="index out of range in self"):
        x.index_reduce(0, torch.tensor([3], device="tpu"), torch.ones(1, 2, device="tpu"), "amax")


# ---- take / put -------------------------------------------------------------------------

def test_take_put():
    x = _x(3, 4)
    index = torch.tensor([[0, -1], [5, 11]])
    run_both(torch.take, x, index, exact=True)
    run_both(lambda a, i: a.t().take(i), x, index, exact=True)
    src = _x(2, 2)
    uniq = torch.tensor([[0, -2], [5, 7]])
    run_both(lambda a, i, s: a.put(i, s), x, uniq, src, exact=True)
    run_both(lambda a, i, s: a.clone().put_(i, s, accumulate=True), x, torch.tensor([[1, 1], [1, 3]]), src)
    with raises_at_sync(IndexError, match="out of range: tried to access index 12 on a tensor of 12"):
        torch.take(x.to("tpu"), torch.tensor([12], device="tpu"))
    with raises_at_sync(IndexError, match="out of range"):
        x.to("tpu").put_(torch.tensor([-13], device="tpu"), torch.ones(1, device="tpu"))


# ---- masked ops, nonzero --------------------------------------------------------------------

def test_masked_fill():
    x = _x(3, 4)
    mask = x > 0.3
    run_both(lambda a, m: a.masked_fill(m, -1.0), x, mask, exact=True)
    run_both(lambda a, m: a.masked_fill(m, torch.tensor(2.0)), x, mask, exact=True)
    run_both(lambda a, m: a.clone().masked_fill_(m[0], 5.0), x, mask, exact=True)  # broadcast mask
    run_both(lambda a, m: a.t().masked_fill(m.t(), 0.0), x, mask, exact=True)


def test_masked_scatter_and_select():
    x = _x(3, 4)
    mask = x > 0
    src = _x(12) * 100
    run_both(lambda a, m, s: a.masked_scatter(m, s), x, mask, src, exact=True)
    run_both(lambda a, m, s: a.clone().masked_scatter_(m[1], s), x, mask, src, exact=True)
    run_both(torch.masked_select, x, mask, exact=True)
    run_both(torch.masked_select, x, mask[0], exact=True)  # broadcast mask
    run_both(lambda a, m: torch.masked_select(a.t(), m.t()), x, mask, exact=True)
    with raises_at_sync(RuntimeError, match="Number of elements of source"):
        x.to("tpu").masked_scatter(torch.ones(3, 4, dtype=torch.bool, device="tpu"),
                                   torch.ones(2, device="tpu"))


def test_masked_select_backward():
    x = _x(3, 4).requires_grad_()
    xt = to_tpu(x)
    mask = torch.tensor([True, False, True, True])
    torch.masked_select(x, mask).backward(torch.arange(9.0))
    torch.masked_select(xt, mask.to("tpu")).backward(torch.arange(9.0).to("tpu"))
    assert_same(xt.grad, x.grad)


@pytest.mark.parametrize("shape", [(0,), (7,), (3, 4), (2, 3, 2)])
def test_nonzero(shape):
    x = (_x(*shape) > 0.2).to(torch.float32)
    run_both(torch.nonzero, x, exact=True)
    run_both(torch.argwhere, x, exact=True)
    run_both(lambda a: torch.nonzero(a, as_tuple=True), x, exact=True)
    out = torch.empty(0, dtype=torch.int64, device="tpu")
    torch.nonzero(x.to("tpu"), out=out)
    assert_same(out, torch.nonzero(x), exact=True)


def test_nonzero_scalar_and_static():
    run_both(torch.nonzero, torch.tensor(3.0), exact=True)
    run_both(torch.nonzero, torch.tensor(0), exact=True)
    x = torch.tensor([0, 3, 0, 1, 2])
    run_both(lambda a: torch.nonzero_static(a, size=5), x, exact=True)
    run_both(lambda a: torch.nonzero_static(a, size=2, fill_value=9), x, exact=True)


def test_no_fallback():
    torch_tpu.fallback_ops()  # strict mode above makes any fallback an error
    assert not any(k.startswith(("aten::index", "aten::gather", "aten::scatter", "aten::nonzero"))
                   for k in torch_tpu.fallback_ops())


@pytest.mark.parametrize("reduce", ["amax", "amin"])
@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.int64])
def test_index_reduce_extremes_of_small_integers(reduce, dtype):
    # include_self=False starts amax from the dtype's lowest value (0 for uint8, not -255)
    x = torch.tensor([5, 100, 7], dtype=dtype)
    index, source = torch.tensor([0, 0, 2]), torch.tensor([3, 9, 1], dtype=dtype)
    run_both(lambda a, i, s: a.index_reduce(0, i, s, reduce, include_self=False), x, index, source, exact=True)


# ---- index_fill with a complex value; overlapping destinations of index/scatter ops ------

def _outcome(fn, device):
    """(error type and message, or None; the warnings' first lines), as ``fn(device)`` gives them."""
    import warnings
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            fn(device)
            error = None
        except Exception as e:  # noqa: BLE001 (the error is the result compared)
            error = (type(e), str(e))
    return error, [str(w.message).split(" (Triggered")[0] for w in caught]


@pytest.mark.parametrize("dtype", [torch.float32, torch.int8, torch.bool, torch.complex64])
@pytest.mark.parametrize("value", [1 + 1j, complex(2, 0), "tensor"])
def test_index_fill_complex_value_refused_as_the_cpu(dtype, value):
    def fill(device):
        x = torch.tensor([[1, 2], [4, 5]], dtype=dtype, device=device)
        v = torch.tensor(1 + 1j, device=device) if value == "tensor" else value
        return x.index_fill_(1, torch.tensor([0], device=device), v).cpu()
    assert _outcome(fill, "tpu") == _outcome(fill, "cpu")


_OVERLAPS = {
    "index_add_ expanded": lambda d: torch.rand(1, device=d).expand(6).index_add_(0, torch.tensor([2, 1], device=d),
                                                                                 torch.rand(2, device=d)),
    "index_add_ source part of self": lambda d: (lambda y: y.index_add_(0, torch.tensor([2, 1, 0], device=d), y[:3]))(
        torch.rand(6, device=d)),
    "index_copy_ self is the index": lambda d: (lambda i: i.index_copy_(0, i, i.clone()))(
        torch.tensor([2, 1, 0], device=d)),
    "index_copy_ self is the source": lambda d: (lambda i: i.index_copy_(0, i.clone(), i))(
        torch.tensor([2, 1, 0], device=d)),
    "index_fill_ expanded warns": lambda d: torch.zeros(1, device=d).expand(6).index_fill_(
        0, torch.tensor([2, 1], device=d), 1.0),
    "index_fill_ self is the index": lambda d: (lambda i: i.index_fill_(0, i, 0))(torch.tensor([2, 1, 0], device=d)),
    "index_put_ expanded warns": lambda d: torch.zeros(1, device=d).expand(6).index_put_(
        (torch.tensor([2, 1], device=d),), torch.ones(2, device=d)),
    "index_put_ value part of self": lambda d: (lambda y: y.index_put_((torch.tensor([2, 1, 0], device=d),), y[:3]))(
        torch.rand(6, device=d)),
    "put_ self is the index": lambda d: (lambda i: i.put_(i, i.clone()))(torch.tensor([2, 1, 0], device=d)),
    "masked_fill_ expanded warns": lambda d: torch.zeros(1, device=d).expand(6).masked_fill_(
        torch.tensor([True, False] * 3, device=d), 0.0),
    "masked_fill_ mask part of self": lambda d: (lambda m: m[1:].masked_fill_(m[:-1], False))(
        torch.tensor([True, False, True, True], device=d)),
    "masked_fill_ mask is self": lambda d: (lambda m: m.masked_fill_(m, False))(
        torch.tensor([True, False, True], device=d)),
    "masked_scatter_ expanded": lambda d: torch.zeros(1, device=d).expand(6).masked_scatter_(
        torch.tensor([True, False] * 3, device=d), torch.ones(3, device=d)),
    "scatter_ src is self": lambda d: (lambda s: s.scatter_(0, torch.tensor([2, 1, 0], device=d), s))(
        torch.rand(3, device=d)),
    "scatter_add_ self is the index": lambda d: (lambda i: i.scatter_add_(0, i, i.clone()))(
        torch.tensor([2, 1, 0], device=d)),
}


@pytest.mark.parametrize("case", list(_OVERLAPS))
def test_index_and_scatter_ops_refuse_overlapping_memory_as_the_cpu(case):
    """The CPU refuses (or warns about) a destination that is expanded or shares
    memory with the op's index or source; tpu wrote through the aliases."""
    fn = _OVERLAPS[case]
    assert _outcome(fn, "tpu") == _outcome(fn, "cpu")


@pytest.mark.parametrize("accumulate", [False, True])
def test_put_alerts_in_deterministic_mode_as_the_cpu(accumulate):
    """put_ without accumulate has no deterministic implementation: the CPU
    raises in deterministic mode (tpu wrote silently)."""
    from torch.testing._internal.common_utils import DeterministicGuard

    def put(device):
        a = torch.zeros(5, device=device)
        a.put_(torch.tensor([0, 0], device=device), torch.tensor([1.0, 2.0], device=device), accumulate=accumulate)
    with DeterministicGuard(True):
        assert _outcome(put, "tpu") == _outcome(put, "cpu")
    with DeterministicGuard(True, warn_only=True):
        assert bool(_outcome(put, "tpu")[1]) == bool(_outcome(put, "cpu")[1]) == (not accumulate)
