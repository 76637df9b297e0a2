"""Reductions, scans, sorting and softmax on tpu against PyTorch's CPU results."""
import contextlib
import os
import re

import pytest
import torch

import torch_tpu
from helpers import assert_same, run_both, strict, to_tpu  # noqa: F401  (strict: no CPU fallback)

NAN, INF = float("nan"), float("inf")


_MY_OPS = ("sum", "nansum", "mean", "prod", "amax", "amin", "max", "min", "aminmax", "argmax",
           "argmin", "var", "std", "var_mean", "std_mean", "any", "all", "count_nonzero",
           "logsumexp", "norm", "linalg_vector_norm", "cumsum", "cumprod", "cummax", "cummin",
           "logcumsumexp", "sort", "topk", "kthvalue", "median", "nanmedian", "mode",
           "softmax", "log_softmax", "softmax_backward_data", "log_softmax_backward_data")


@contextlib.contextmanager
def others_may_fall_back():
    """For composites and backward formulas that also use pointwise/indexing
    ops owned by other modules: those may run on the CPU, reductions may not."""
    os.environ["TORCH_TPU_STRICT"] = "0"
    before = dict(torch_tpu.fallback_ops())
    try:
        yield
    finally:
        os.environ["TORCH_TPU_STRICT"] = "1"
    new = {k for k, v in torch_tpu.fallback_ops().items() if before.get(k) != v}
    mine = {k for k in new if k.split("::")[-1].split(".")[0].lstrip("_") in _MY_OPS}
    assert not mine, f"reductions fell back to the CPU: {mine}"


# CPU messages the tpu words differently today (same type; the CPU names its
# own kernel, e.g. "softmax_lastdim_kernel_impl", or the dtype as 'Long'):
# every other refusal must carry the CPU's message.
_KNOWN_WORDING_GAPS = (r"not implemented for '", r"^topk does not support bool",
                       r"^std_mean only support", r"^linalg\.vector_norm: Expected a floating point")


def run_or_raise(fn, *args, **kw):
    """run_both, or, where PyTorch's CPU raises, the tpu raises the same."""
    try:
        fn(*args)
    except Exception as e:
        # PyTorch's "not implemented for 'Long'" is a NotImplementedError, itself
        # a RuntimeError; the tpu raises a RuntimeError with the same message.
        with pytest.raises(RuntimeError if isinstance(e, RuntimeError) else type(e)) as got:
            fn(*to_tpu(list(args)))
        cpu_message = str(e).splitlines()[0]
        if not any(re.search(gap, cpu_message) for gap in _KNOWN_WORDING_GAPS):
            assert cpu_message in str(got.value), f"tpu: {got.value!r}, CPU: {e!r}"
        return
    run_both(fn, *args, **kw)


def rand(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    if not dtype.is_floating_point:
        return torch.randint(-5, 6, shape, generator=g).to(dtype)
    return torch.randn(shape, generator=g).to(dtype)


def unique(*shape, seed=0):
    """Distinct float values: orderings (sort, topk, median) are unambiguous."""
    g = torch.Generator().manual_seed(seed)
    n = 1
    for s in shape:
        n *= s
    return (torch.randperm(n, generator=g).float() - n / 2).reshape(shape) / 4


def noncontig(*shape, dtype=torch.float32):
    """A transposed view: non-contiguous strides."""
    return rand(*reversed(shape), dtype=dtype).transpose(0, -1)


DTYPES = [torch.float32, torch.int32, torch.int64, torch.bool, torch.bfloat16]
DIMS = [None, 0, -1, (0, 2), (-1, 0), ()]


# ---- sum / mean / prod / nansum ------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES + [torch.uint8, torch.float64])
@pytest.mark.parametrize("dim", DIMS)
@pytest.mark.parametrize("keepdim", [False, True])
def test_sum(dtype, dim, keepdim):
    run_or_raise(lambda a: torch.sum(a, dim, keepdim=keepdim), rand(3, 4, 5, dtype=dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_sum_all(dtype):
    run_or_raise(torch.sum, rand(6, 7, dtype=dtype))


@pytest.mark.parametrize("src,dst", [(torch.int32, torch.int32), (torch.float32, torch.float64),
                                     (torch.int64, torch.float32), (torch.bool, torch.int16),
                                     (torch.bfloat16, torch.float32)])
def test_sum_dtype_arg(src, dst):
    x = rand(4, 5, dtype=src)
    run_both(lambda a: torch.sum(a, dtype=dst), x)
    run_both(lambda a: torch.sum(a, 1, dtype=dst), x)


def test_sum_int_overflow_accumulates_in_int64():
    x = torch.full((10,), 2**30, dtype=torch.int32)
    run_both(torch.sum, x, exact=True)


def test_sum_bfloat16_accumulates_in_float32():
    x = torch.full((4096,), 1.0, dtype=torch.bfloat16)  # sequential bf16 sums stall at 256
    run_both(torch.sum, x, exact=True)
    run_both(torch.mean, x, exact=True)


@pytest.mark.parametrize("shape,dim", [((0,), None), ((3, 0), 1), ((3, 0), 0), ((0, 4), (0, 1))])
def test_sum_mean_prod_empty(shape, dim):
    x = torch.empty(shape)
    run_both(lambda a: torch.sum(a, dim), x)
    run_both(lambda a: torch.mean(a, dim), x)
    run_both(lambda a: torch.prod(a) if dim is None or isinstance(dim, tuple) else torch.prod(a, dim), x)


def test_noncontiguous_and_scalar_inputs():
    x = noncontig(3, 4, 5)
    for dim in (None, 0, 1, (0, 2)):
        run_both(lambda a: a.sum(dim), x)
        run_both(lambda a: a.mean(dim), x)
    run_both(lambda a: a[:, ::2].amax(1), x)
    s = torch.tensor(2.5)
    for fn in (torch.sum, torch.mean, torch.prod, torch.amax, torch.argmax,
               lambda a: a.sum(0), lambda a: a.max(-1), lambda a: a.cumsum(0),
               lambda a: a.sort(0), lambda a: a.softmax(0), lambda a: a.var(0, correction=0)):
        run_both(fn, s)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("dim", DIMS)
@pytest.mark.parametrize("keepdim", [False, True])
def test_mean(dtype, dim, keepdim):
    run_both(lambda a: torch.mean(a, dim, keepdim=keepdim), rand(3, 4, 5, dtype=dtype))


def test_mean_dtype_arg_and_int_error():
    x = rand(3, 4, dtype=torch.int64)
    run_both(lambda a: torch.mean(a, dtype=torch.float32), x)
    run_both(lambda a: torch.mean(a, 1, dtype=torch.float64), x)
    with pytest.raises(RuntimeError, match="mean"):
        torch.mean(x.to("tpu"))


@pytest.mark.parametrize("dtype", DTYPES + [torch.float64])
@pytest.mark.parametrize("dim", [None, 0, -1])
@pytest.mark.parametrize("keepdim", [False, True])
def test_prod(dtype, dim, keepdim):
    x = rand(3, 4, 5, dtype=dtype)
    if dtype.is_floating_point:
        x = x.clamp(-2, 2)
    if dim is None:
        run_or_raise(torch.prod, x)
        run_or_raise(lambda a: torch.prod(a, dtype=torch.float64), x)
    else:
        run_or_raise(lambda a: torch.prod(a, dim, keepdim=keepdim), x)
        run_or_raise(lambda a: torch.prod(a, dim, dtype=torch.float64), x)


@pytest.mark.parametrize("dim", [None, 0, (0, 1)])
def test_nansum_nanmean(dim):
    x = rand(4, 5)
    x[0, 1] = x[2, 3] = x[3, 0] = NAN
    run_or_raise(lambda a: torch.nansum(a, dim), x)
    with others_may_fall_back():
        run_or_raise(lambda a: torch.nanmean(a, dim), x)
    run_or_raise(lambda a: torch.nansum(a, dim, dtype=torch.float64), x)
    run_or_raise(lambda a: torch.nansum(a, dim), rand(4, 5, dtype=torch.int32))
    run_or_raise(lambda a: torch.nansum(a, dim), x.to(torch.bfloat16))


# ---- max / min family ------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES + [torch.uint8])
@pytest.mark.parametrize("dim", [None, 0, -1, (0, 2), ()])
@pytest.mark.parametrize("keepdim", [False, True])
def test_amax_amin(dtype, dim, keepdim):
    x = rand(3, 4, 5, dtype=dtype)
    d = () if dim is None else dim
    run_or_raise(lambda a: torch.amax(a, d, keepdim), x, exact=True)
    run_or_raise(lambda a: torch.amin(a, d, keepdim), x, exact=True)


def test_nan_propagates():
    x = rand(4, 5)
    x[1, 2] = NAN
    x[3, 0] = NAN
    for fn in (torch.max, torch.min, torch.amax, lambda a: a.amin(1), lambda a: a.max(1),
               lambda a: a.min(0), torch.argmax, torch.argmin, lambda a: a.argmax(1),
               lambda a: a.argmin(0), torch.aminmax, lambda a: torch.aminmax(a, dim=1)):
        run_both(fn, x, exact=True)


@pytest.mark.parametrize("dtype", DTYPES)
def test_max_min_all(dtype):
    x = rand(5, 6, dtype=dtype)
    run_or_raise(torch.max, x, exact=True)
    run_or_raise(torch.min, x, exact=True)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("keepdim", [False, True])
def test_max_min_dim_first_index(dtype, dim, keepdim):
    x = rand(4, 6, 3, dtype=dtype)  # small integer range: many ties
    run_or_raise(lambda a: torch.max(a, dim, keepdim), x, exact=True)
    run_or_raise(lambda a: torch.min(a, dim, keepdim), x, exact=True)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dim", [None, 0, -1])
@pytest.mark.parametrize("keepdim", [False, True])
def test_argmax_argmin(dtype, dim, keepdim):
    x = rand(4, 6, 3, dtype=dtype)
    run_or_raise(lambda a: torch.argmax(a, dim, keepdim), x, exact=True)
    run_or_raise(lambda a: torch.argmin(a, dim, keepdim), x, exact=True)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dim", [None, 0, -1])
@pytest.mark.parametrize("keepdim", [False, True])
def test_aminmax(dtype, dim, keepdim):
    run_or_raise(lambda a: torch.aminmax(a, dim=dim, keepdim=keepdim), rand(4, 5, dtype=dtype), exact=True)


def test_max_empty_errors():
    x = torch.empty(3, 0).to("tpu")
    with pytest.raises((RuntimeError, IndexError)):
        torch.max(x, 1)
    with pytest.raises((RuntimeError, IndexError)):
        torch.max(x)
    with pytest.raises((RuntimeError, IndexError)):
        torch.argmax(x)
    run_both(lambda a: torch.max(a, 0), torch.empty(3, 0))  # reducing a non-empty dim is fine
    run_both(lambda a: torch.amax(a, 0), torch.empty(3, 0))


def test_max_min_out():
    x = rand(4, 5)
    for op in (torch.max, torch.min):
        cpu_v, cpu_i = torch.empty(0), torch.empty(0, dtype=torch.long)
        tpu_v, tpu_i = torch.empty(0, device="tpu"), torch.empty(0, dtype=torch.long, device="tpu")
        op(x, 1, out=(cpu_v, cpu_i))
        r = op(x.to("tpu"), 1, out=(tpu_v, tpu_i))
        assert r[0] is tpu_v and r[1] is tpu_i
        assert_same((tpu_v, tpu_i), (cpu_v, cpu_i), exact=True)


# ---- variance ---------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("dim", [None, 0, -1, (0, 2)])
@pytest.mark.parametrize("correction", [None, 0, 1, 2.5])
@pytest.mark.parametrize("keepdim", [False, True])
def test_var_std(dtype, dim, correction, keepdim):
    x = rand(3, 4, 5, dtype=dtype)
    for fn in (torch.var, torch.std, torch.var_mean, torch.std_mean):
        run_both(lambda a: fn(a, dim, correction=correction, keepdim=keepdim), x)


def test_var_std_unbiased_and_edge_cases():
    x = rand(3, 4)
    run_both(lambda a: torch.var(a, unbiased=False), x)
    run_both(lambda a: torch.std(a, 1, unbiased=True), x)
    run_both(lambda a: torch.var(a, 1, correction=4), x)  # N - correction <= 0: inf
    run_both(lambda a: torch.var(a, 0), torch.ones(1, 3))  # 0/0: nan
    run_both(lambda a: torch.var(a, 0), torch.empty(0, 3))
    run_both(lambda a: torch.std(a, 1), noncontig(3, 6))
    run_both(lambda a: torch.var(a, 1), torch.randn(3, 4, dtype=torch.complex64))
    with pytest.raises(RuntimeError):
        torch.var(rand(3, dtype=torch.int64).to("tpu"))


# ---- any / all / count_nonzero --------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.bool, torch.float32, torch.int64, torch.uint8])
@pytest.mark.parametrize("dim", [None, 0, -1, (0, 2), ()])
@pytest.mark.parametrize("keepdim", [False, True])
def test_any_all(dtype, dim, keepdim):
    x = rand(3, 4, 5, dtype=dtype)
    if dtype == torch.float32:
        x = x.clamp(min=0)  # some zeros
    for fn in (torch.any, torch.all):
        if dim is None:
            run_or_raise(fn, x)
        run_or_raise(lambda a: fn(a, dim, keepdim=keepdim), x, exact=True)
    run_or_raise(torch.any, torch.empty(0, dtype=dtype), exact=True)
    run_or_raise(torch.all, torch.empty(0, dtype=dtype), exact=True)


@pytest.mark.parametrize("dim", [None, 0, -1, (0, 2)])
def test_count_nonzero(dim):
    for dtype in (torch.float32, torch.int32, torch.bool):
        run_or_raise(lambda a: torch.count_nonzero(a, dim), rand(3, 4, 5, dtype=dtype).clamp(min=0)
                 if dtype != torch.bool else rand(3, 4, 5, dtype=dtype), exact=True)


# ---- logsumexp / norms -----------------------------------------------------------------------

@pytest.mark.parametrize("dim", [0, -1, (0, 2)])
@pytest.mark.parametrize("keepdim", [False, True])
def test_logsumexp(dim, keepdim):
    x = rand(3, 4, 5) * 30
    run_both(lambda a: torch.logsumexp(a, dim, keepdim), x)
    run_both(lambda a: torch.logsumexp(a, dim, keepdim), x.to(torch.bfloat16))
    run_both(lambda a: torch.logsumexp(a, dim, keepdim), rand(3, 4, 5, dtype=torch.int64))


def test_logsumexp_infinities_and_empty():
    x = torch.tensor([[-INF, -INF], [INF, 1.0], [-INF, 2.0], [NAN, 1.0]])
    run_both(lambda a: torch.logsumexp(a, 1), x)
    run_both(lambda a: torch.logsumexp(a, 1), torch.empty(3, 0))


@pytest.mark.parametrize("ord", [0, 1, 2, 3, 0.5, INF, -INF])
@pytest.mark.parametrize("dim", [None, 0, (0, 2)])
@pytest.mark.parametrize("keepdim", [False, True])
def test_vector_norm(ord, dim, keepdim):
    x = rand(3, 4, 5)
    x[0, 0] = 0
    run_both(lambda a: torch.linalg.vector_norm(a, ord, dim, keepdim), x)
    run_both(lambda a: torch.linalg.vector_norm(a, ord, dim, keepdim, dtype=torch.float64), x)
    run_both(lambda a: torch.linalg.vector_norm(a, ord, dim, keepdim), x.to(torch.bfloat16))


@pytest.mark.parametrize("p", [None, 1, 2, 3, INF, "fro"])
def test_norm(p):
    x = noncontig(4, 5)
    run_both(lambda a: torch.norm(a, p), x)
    run_both(lambda a: torch.norm(a, p, dim=1, keepdim=True), x)
    run_both(lambda a: a.norm(p, dim=(0, 1), dtype=torch.float64), x)
    run_both(lambda a: torch.linalg.vector_norm(a), torch.randn(3, 4, dtype=torch.complex64))
    run_both(lambda a: torch.linalg.vector_norm(a, 2), torch.empty(0, 3))


# ---- scans ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES + [torch.float64])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_cumsum_cumprod(dtype, dim):
    x = rand(3, 4, 5, dtype=dtype)
    if dtype.is_floating_point:
        x = x.clamp(-1.5, 1.5)
    run_or_raise(lambda a: torch.cumsum(a, dim), x)
    run_or_raise(lambda a: torch.cumprod(a, dim), x)
    run_or_raise(lambda a: torch.cumsum(a, dim, dtype=torch.float64), x)
    run_or_raise(lambda a: torch.cumprod(a, dim, dtype=torch.int64 if not dtype.is_floating_point
                                     else torch.float64), x)


def test_scans_empty_noncontig_out_inplace():
    run_both(lambda a: torch.cumsum(a, 1), torch.empty(3, 0))
    run_both(lambda a: torch.cumprod(a, 0), torch.empty(0, 2))
    run_both(lambda a: torch.cummax(a, 0), torch.empty(0, 2))
    run_both(lambda a: torch.logcumsumexp(a, 0), torch.empty(0, 2))
    x = noncontig(4, 6)
    for fn in (torch.cumsum, torch.cumprod, torch.cummax, torch.cummin, torch.logcumsumexp):
        run_both(lambda a: fn(a, 1), x)
    cpu_out = torch.empty(4, 6)
    tpu_out = cpu_out.to("tpu")
    torch.cumsum(x, 0, out=cpu_out)
    torch.cumsum(x.to("tpu"), 0, out=tpu_out)
    assert_same(tpu_out, cpu_out)
    c, t = x.clone(), x.to("tpu")
    c.cumsum_(1)
    t.cumsum_(1)
    assert_same(t, c)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool, torch.bfloat16])
@pytest.mark.parametrize("dim", [0, -1])
def test_cummax_cummin(dtype, dim):
    x = rand(7, 9, dtype=dtype)  # small int range: ties pick the latest index
    run_or_raise(lambda a: torch.cummax(a, dim), x, exact=True)
    run_or_raise(lambda a: torch.cummin(a, dim), x, exact=True)


def test_cummax_cummin_nan():
    x = torch.tensor([[1., 3., 3., NAN, 5., NAN, 2.], [2., NAN, 0., -1., NAN, 4., -5.]])
    run_both(lambda a: torch.cummax(a, 1), x, exact=True)
    run_both(lambda a: torch.cummin(a, 1), x, exact=True)


@pytest.mark.parametrize("dim", [0, -1])
def test_logcumsumexp(dim):
    run_both(lambda a: torch.logcumsumexp(a, dim), rand(5, 6) * 20)
    run_both(lambda a: torch.logcumsumexp(a, dim), rand(5, 6, dtype=torch.bfloat16))
    x = torch.tensor([[-INF, -INF, 1.0, 2.0], [-INF, INF, 1.0, -INF], [1.0, NAN, 2.0, 3.0]])
    run_both(lambda a: torch.logcumsumexp(a, 1), x)


# ---- sorting and selection ----------------------------------------------------------------------

@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("descending", [False, True])
def test_sort_unique(dim, descending):
    run_both(lambda a: torch.sort(a, dim, descending), unique(4, 5, 6), exact=True)
    run_both(lambda a: torch.argsort(a, dim, descending), unique(4, 5, 6), exact=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.int64, torch.bool,
                                   torch.uint8, torch.bfloat16])
@pytest.mark.parametrize("dim", [0, -1])
@pytest.mark.parametrize("descending", [False, True])
def test_sort_stable_ties(dtype, dim, descending):
    x = rand(9, 11, dtype=dtype)  # small integer range: many ties
    if dtype == torch.uint8:
        x = rand(9, 11, dtype=torch.int64).abs().to(dtype)
    run_or_raise(lambda a: torch.sort(a, dim=dim, descending=descending, stable=True), x, exact=True)
    run_or_raise(lambda a: torch.argsort(a, dim=dim, descending=descending, stable=True), x, exact=True)


@pytest.mark.parametrize("descending", [False, True])
def test_sort_nan_inf_signed_zero(descending):
    x = torch.tensor([[3., NAN, -INF, 0., INF, -0., NAN, 1., -NAN, 0.]])
    run_both(lambda a: torch.sort(a, descending=descending, stable=True), x, exact=True)


def test_sort_empty_noncontig_out():
    run_both(lambda a: torch.sort(a, 1), torch.empty(3, 0))
    run_both(lambda a: torch.sort(a, dim=0, stable=True), noncontig(5, 4), exact=True)
    x = unique(4, 5)
    cv, ci = torch.empty(0), torch.empty(0, dtype=torch.long)
    tv, ti = torch.empty(0, device="tpu"), torch.empty(0, dtype=torch.long, device="tpu")
    torch.sort(x, 1, out=(cv, ci))
    torch.sort(x.to("tpu"), 1, out=(tv, ti))
    assert_same((tv, ti), (cv, ci), exact=True)


@pytest.mark.parametrize("k", [0, 1, 3, 6])
@pytest.mark.parametrize("dim", [0, -1])
@pytest.mark.parametrize("largest", [True, False])
def test_topk(k, dim, largest):
    x = unique(6, 7)
    run_both(lambda a: torch.topk(a, k, dim, largest, sorted=True), x, exact=True)
    # sorted=False: PyTorch leaves the order open, so compare sorted sets.
    v, _ = torch.topk(x.to("tpu"), k, dim, largest, sorted=False)
    cv, _ = torch.topk(x, k, dim, largest, sorted=False)
    assert_same(v.cpu().sort(dim).values, cv.sort(dim).values, exact=True)


def test_topk_nan_int_bf16_out():
    x = unique(3, 8)
    x[1, 2] = NAN
    run_both(lambda a: torch.topk(a, 3), x, exact=True)
    run_both(lambda a: torch.topk(a, 3, largest=False), x, exact=True)
    run_both(lambda a: torch.topk(a, 2).values, rand(4, 6, dtype=torch.int32), exact=True)
    run_both(lambda a: torch.topk(a, 2).values, rand(4, 6, dtype=torch.bfloat16), exact=True)
    cv, ci = torch.empty(0), torch.empty(0, dtype=torch.long)
    tv, ti = torch.empty(0, device="tpu"), torch.empty(0, dtype=torch.long, device="tpu")
    torch.topk(x, 2, out=(cv, ci))
    torch.topk(x.to("tpu"), 2, out=(tv, ti))
    assert_same((tv, ti), (cv, ci), exact=True)


@pytest.mark.parametrize("k", [1, 3, 5])
@pytest.mark.parametrize("dim", [0, -1])
@pytest.mark.parametrize("keepdim", [False, True])
def test_kthvalue(k, dim, keepdim):
    run_both(lambda a: torch.kthvalue(a, k, dim, keepdim), unique(5, 6), exact=True)
    run_both(lambda a: torch.kthvalue(a, k, dim, keepdim), unique(6, 5).t(), exact=True)


@pytest.mark.parametrize("n", [1, 4, 5])
@pytest.mark.parametrize("dim", [0, -1])
@pytest.mark.parametrize("keepdim", [False, True])
def test_median_nanmedian(n, dim, keepdim):
    x = unique(n, n + 1)
    run_both(lambda a: torch.median(a, dim, keepdim), x, exact=True)
    run_both(lambda a: torch.nanmedian(a, dim, keepdim), x, exact=True)
    run_both(torch.median, x, exact=True)
    run_both(torch.nanmedian, x, exact=True)
    run_both(torch.median, unique(n, n + 1).to(torch.int64), exact=True)


def test_median_with_nan():
    x = torch.tensor([[3., NAN, 1., NAN, 2.], [4., 1., 2., 0., 3.], [NAN, 5., 6., 1., 2.],
                      [NAN, NAN, NAN, 1., 9.], [NAN, NAN, NAN, NAN, NAN]])
    run_both(lambda a: torch.median(a, 1), x, exact=True)
    run_both(torch.median, x, exact=True)
    run_both(torch.nanmedian, x, exact=True)
    run_both(lambda a: torch.nanmedian(a, 1), x[:4], exact=True)
    # An all-NaN row: the value is NaN; PyTorch's index there comes from
    # std::nth_element's internals, so only the value is compared.
    run_both(lambda a: torch.nanmedian(a, 1).values, x, exact=True)


@pytest.mark.parametrize("dim", [0, -1])
@pytest.mark.parametrize("keepdim", [False, True])
def test_mode(dim, keepdim):
    g = torch.Generator().manual_seed(1)
    x = torch.randint(0, 4, (6, 9), generator=g)
    run_or_raise(lambda a: torch.mode(a, dim, keepdim), x, exact=True)
    run_or_raise(lambda a: torch.mode(a, dim, keepdim), x.float() - 1.5, exact=True)
    run_or_raise(lambda a: torch.mode(a, dim, keepdim), x > 1, exact=True)


# ---- softmax ---------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_softmax_log_softmax(dtype, dim):
    x = rand(3, 4, 5, dtype=dtype) * 5
    run_both(lambda a: torch.softmax(a, dim), x)
    if dtype == torch.bfloat16:
        # PyTorch's CPU kernel rounds max + log(sum) to bfloat16 before the
        # subtraction; the tpu keeps it in float32 (closer to the float64 answer).
        tpu, cpu = torch.log_softmax(x.to("tpu"), dim), torch.log_softmax(x, dim)
        exact = torch.log_softmax(x.double(), dim)
        assert_same(tpu, cpu, atol=4e-2, rtol=1.6e-2)
        assert (tpu.cpu().double() - exact).abs().max() <= (cpu.double() - exact).abs().max()
    else:
        run_both(lambda a: torch.log_softmax(a, dim), x)
    run_both(lambda a: torch.softmax(a, dim, dtype=torch.float64), x)
    run_both(lambda a: torch.log_softmax(a, dim, dtype=torch.float32), x)


def test_softmax_edge_cases():
    x = torch.tensor([[-INF, -INF, -INF], [-INF, 0., 1.], [1000., 0., -1000.]])
    run_both(lambda a: torch.softmax(a, 1), x)
    run_both(lambda a: torch.log_softmax(a, 1), x)
    run_both(lambda a: torch.softmax(a, 1), torch.empty(3, 0))
    run_both(lambda a: torch.softmax(a, 0), noncontig(4, 5))
    # half_to_float is a CUDA-only option on the CPU: compare with float32 on the CPU.
    h = rand(3, 4, dtype=torch.float16)
    assert_same(torch._softmax(h.to("tpu"), 1, True), torch._softmax(h.float(), 1, False))
    assert_same(torch._log_softmax(h.to("tpu"), 1, True), torch._log_softmax(h.float(), 1, False))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("dim", [0, -1])
def test_softmax_backward_data(dtype, dim):
    x, g = rand(4, 5, dtype=dtype), rand(4, 5, dtype=dtype, seed=1)
    y = torch._softmax(x, dim, False)
    ly = torch._log_softmax(x, dim, False)
    run_both(lambda gg, yy: torch.ops.aten._softmax_backward_data(gg, yy, dim, dtype), g, y)
    run_both(lambda gg, yy: torch.ops.aten._log_softmax_backward_data(gg, yy, dim, dtype), g, ly)


# ---- autograd through the reductions ---------------------------------------------------------

@pytest.mark.parametrize("fn", [
    lambda a: a.sum(1).sum(),
    lambda a: a.mean(),
    lambda a: a.prod(1).sum(),
    lambda a: a.amax(1).sum(),
    lambda a: a.max(1).values.sum(),
    lambda a: a.var(0).sum(),
    lambda a: a.std(),
    lambda a: a.logsumexp(1).sum(),
    lambda a: torch.linalg.vector_norm(a),
    lambda a: a.cumsum(1).sum(),
    lambda a: a.cummax(1).values.sum(),
    lambda a: a.logcumsumexp(1).sum(),
    lambda a: a.sort(1).values[:, :2].sum(),
    lambda a: a.topk(2).values.sum(),
    lambda a: a.median(1).values.sum(),
    lambda a: a.softmax(1)[:, 0].sum(),
    lambda a: a.log_softmax(1)[:, 0].sum(),
], ids=["sum", "mean", "prod", "amax", "max_dim", "var", "std", "logsumexp", "norm", "cumsum",
        "cummax", "logcumsumexp", "sort", "topk", "median", "softmax", "log_softmax"])
def test_backward(fn):
    x = unique(4, 5).requires_grad_()
    xt = to_tpu(x)
    fn(x).backward()
    with others_may_fall_back():
        fn(xt).backward()
    assert_same(xt.grad, x.grad)


@pytest.mark.parametrize("fn", [
    lambda a, out: torch.sum(a, 1, out=out),
    lambda a, out: torch.mean(a, (0, 1), keepdim=True, out=out),
    lambda a, out: torch.prod(a, 0, out=out),
    lambda a, out: torch.amax(a, 1, out=out),
    lambda a, out: torch.var(a, 1, out=out),
    lambda a, out: torch.logsumexp(a, 1, out=out),
    lambda a, out: torch.linalg.vector_norm(a, 3, 1, out=out),
    lambda a, out: torch.cumprod(a, 1, out=out),
    lambda a, out: torch.logcumsumexp(a, 0, out=out),
    lambda a, out: torch.softmax(a, 1, out=out),
], ids=["sum", "mean", "prod", "amax", "var", "logsumexp", "vector_norm", "cumprod",
        "logcumsumexp", "softmax"])
def test_out(fn):
    x = rand(4, 5)
    cpu_out, tpu_out = torch.empty(0), torch.empty(0, device="tpu")  # resized by the op
    fn(x, cpu_out)
    assert fn(x.to("tpu"), tpu_out) is tpu_out
    assert_same(tpu_out, cpu_out)


@pytest.mark.parametrize("fn,dtype", [
    (lambda a, out: torch.argmax(a, 1, out=out), torch.long),
    (lambda a, out: torch.any(a, 1, out=out), torch.bool),
    (lambda a, out: torch.all(a, out=out), torch.bool),
], ids=["argmax", "any", "all"])
def test_out_integer_results(fn, dtype):
    x = rand(4, 5).clamp(min=0)
    cpu_out, tpu_out = torch.empty(0, dtype=dtype), torch.empty(0, dtype=dtype, device="tpu")
    fn(x, cpu_out)
    fn(x.to("tpu"), tpu_out)
    assert_same(tpu_out, cpu_out, exact=True)


def test_inplace_scans():
    x = rand(4, 5)
    for name in ("cumsum_", "cumprod_"):
        c, t = x.clone(), x.to("tpu")
        getattr(c, name)(0)
        getattr(t, name)(0)
        assert_same(t, c)


@pytest.mark.parametrize("fn", [
    lambda a: torch.ops.aten.norm.ScalarOpt_dim(a, 3, [1], True),
    lambda a: torch.ops.aten.norm.ScalarOpt_dim(a, None, [0, 1]),
    lambda a: torch.ops.aten.norm.ScalarOpt_dim_dtype(a, 1, [0], False, dtype=torch.float64),
    lambda a: torch.ops.aten.norm.Scalar(a, INF),
    lambda a: torch.ops.aten.norm.ScalarOpt_dtype(a, 2, dtype=torch.float64),
    lambda a: torch.ops.aten._logcumsumexp(a, 1),
], ids=["norm_dim", "norm_dim_none", "norm_dim_dtype", "norm_scalar", "norm_dtype", "_logcumsumexp"])
def test_aten_overloads_python_does_not_reach(fn):
    run_both(fn, noncontig(4, 5))


@pytest.mark.parametrize("fn", [
    lambda a, out: torch.cummax(a, 1, out=out),
    lambda a, out: torch.sort(a, dim=0, stable=True, out=out),
    lambda a, out: torch.kthvalue(a, 2, 1, out=out),
    lambda a, out: torch.median(a, 0, out=out),
    lambda a, out: torch.mode(a, 1, out=out),
], ids=["cummax", "sort_stable", "kthvalue", "median", "mode"])
def test_values_indices_out(fn):
    x = unique(4, 5)
    cpu_out = (torch.empty(0), torch.empty(0, dtype=torch.long))
    tpu_out = (torch.empty(0, device="tpu"), torch.empty(0, dtype=torch.long, device="tpu"))
    fn(x, cpu_out)
    r = fn(x.to("tpu"), tpu_out)
    assert r[0] is tpu_out[0] and r[1] is tpu_out[1]
    assert_same(tpu_out, cpu_out, exact=True)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.bool, torch.uint8])
@pytest.mark.parametrize("fn", [
    lambda a: torch.logsumexp(a, 1),
    lambda a: torch.linalg.vector_norm(a, 2, 1),
    lambda a: torch.logcumsumexp(a, 1),
    lambda a: torch._softmax(a, 1, False),
    lambda a: torch._log_softmax(a, 1, False),
    lambda a: torch.topk(a, 2, 1, sorted=True).values,
    lambda a: torch.kthvalue(a, 2, 1).values,
    lambda a: torch.median(a, 1).values,
    lambda a: torch.nanmedian(a),
    lambda a: torch.cumsum(a, 0),
    lambda a: torch.cummin(a, 0),
    lambda a: torch.var(a, 1),
    lambda a: torch.std_mean(a),
], ids=["logsumexp", "vector_norm", "logcumsumexp", "_softmax", "_log_softmax", "topk",
        "kthvalue", "median", "nanmedian", "cumsum", "cummin", "var", "std_mean"])
def test_integer_and_bool_inputs(fn, dtype):
    """Where the CPU kernel accepts an integer/bool dtype the tpu matches it; where it
    refuses one (even though the meta kernel accepts it) the tpu refuses too."""
    x = rand(4, 6, dtype=dtype) if dtype != torch.uint8 else rand(4, 6, dtype=torch.int64).abs().to(dtype)
    run_or_raise(fn, x)


# ---- histogram, histogramdd, segment_reduce (ops/histogram.py) ----------------------

@pytest.mark.parametrize("fn", [
    lambda a, w: torch.histogram(a, 5),
    lambda a, w: torch.histogram(a, 4, range=(-1.0, 1.0), weight=w, density=True),
    lambda a, w: torch.histogram(a, torch.tensor([-2.0, -0.5, 0.0, 3.0], dtype=a.dtype, device=a.device)),
    lambda a, w: torch.histogramdd(a.reshape(-1, 2), [3, 2], density=True),
    lambda a, w: torch.histogramdd(a.reshape(-1, 2), [3, 2], weight=w.reshape(-1, 2)[:, 0]),
], ids=["bin_ct", "range_weight_density", "bins_tensor", "dd_density", "dd_weight"])
def test_histogram(fn):
    a = torch.randn(40, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    a[0], a[1] = 1.0, -1.0  # values on the outer edges land in the first and last bins
    run_both(fn, a, torch.rand(40, dtype=torch.float64, generator=torch.Generator().manual_seed(4)))


def test_histogram_errors_match_cpu():
    for bad in (torch.tensor([0.0, INF]), torch.tensor([0.0, NAN])):  # the data's range must be finite
        run_or_raise(lambda a: torch.histogram(a, 3), bad)
    with pytest.raises(RuntimeError, match="min should not exceed max, but got min 2 max 1 for dimension 0"):
        torch.histogram(torch.rand(4, device="tpu"), 3, range=(2.0, 1.0))
    run_or_raise(lambda a: torch.histogram(a, 3), torch.arange(4))


@pytest.mark.parametrize("reduce", ["sum", "mean", "max", "min", "prod"])
@pytest.mark.parametrize("initial", [None, 2.0])
def test_segment_reduce(reduce, initial):
    data = torch.tensor([[1.0, 0.0, 3.0, NAN, 0.0, 5.0, 2.0], [4.0, 0.0, 2.0, 2.0, 0.0, 1.0, -1.0]]).T
    data.requires_grad_()
    lengths = torch.tensor([2, 0, 2, 3])
    offsets = torch.tensor([1, 3, 3, 7])
    for kw in ({"lengths": lengths}, {"offsets": offsets}):
        cpu = torch.segment_reduce(data, reduce, initial=initial, **kw)
        x = to_tpu(data)
        got = torch.segment_reduce(x, reduce, initial=initial, **{k: v.to("tpu") for k, v in kw.items()})
        assert_same(got, cpu)
        up = torch.randn(cpu.shape, generator=torch.Generator().manual_seed(0))
        (expected,) = torch.autograd.grad(cpu, data, up)
        (grad,) = torch.autograd.grad(got, x, up.to("tpu"))
        assert_same(grad, expected)


def test_segment_reduce_length_checks():
    data = torch.rand(6, 2)
    for lengths in (torch.tensor([2, 3]), torch.tensor([-1, 7])):  # must add up, none negative
        run_or_raise(lambda d, n: torch.segment_reduce(d, "sum", lengths=n), data, lengths)


@pytest.mark.parametrize("name", ["sum", "amax", "argmax", "argmin", "max", "min", "nansum", "std", "all", "sum()", "argmax()"])
def test_more_than_64_dims_as_on_cpu(name):
    # the CPU's reductions over a dim refuse tensors of more than 64 dims (a
    # 64-bit dim mask); a full reduction works.  Meta kernels differ both ways.
    fn = {"sum()": lambda t: t.sum(), "argmax()": lambda t: t.argmax()}.get(name, lambda t: getattr(t, name)(0))

    def outcome(device):
        t = torch.ones([1] * 65, device=device)
        try:
            r = fn(t)
        except Exception as e:
            return type(e), str(e)
        r = r[0] if isinstance(r, tuple) else r
        return tuple(r.shape), r.cpu().item()
    assert outcome("tpu") == outcome("cpu")
