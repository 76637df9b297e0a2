"""Batch norm in pieces on tpu: the ops nn.SyncBatchNorm runs (CUDA-only in
ATen, so checked against the formulas they compute, built from PyTorch CPU
ops), and the _batch_norm_with_update family (against the CPU kernels).
The multi-rank nn.SyncBatchNorm run is in test_distributed.py."""
import pytest
import torch
import torch.nn.functional as F

from helpers import assert_same, strict  # noqa: F401  (strict: no CPU fallback)

TOL = dict(atol=1e-5, rtol=1e-5)
EPS = 1e-5


def _x(*shape, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g) * 2 + 0.5).to(dtype)


def _axes(x):
    return [0] + list(range(2, x.dim()))


def _stats(x, eps=EPS):
    """(mean, invstd) per channel, as batch_norm_stats defines them (float32 for half x)."""
    x = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
    return x.mean(_axes(x)), 1 / torch.sqrt(x.var(_axes(x), unbiased=False) + eps)


def _count(x):
    return x.numel() // x.shape[1]


@pytest.mark.parametrize("shape", [(6, 3), (4, 3, 5), (2, 3, 4, 5), (2, 3, 2, 3, 2)])
def test_batch_norm_stats(shape):
    x = _x(*shape)
    assert_same(torch.batch_norm_stats(x.to("tpu"), EPS), _stats(x), **TOL)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_batch_norm_stats_half_gives_float32(dtype):
    x = _x(4, 3, 5, dtype=dtype)
    mean, invstd = torch.batch_norm_stats(x.to("tpu"), EPS)
    assert mean.dtype == invstd.dtype == torch.float32
    assert_same((mean, invstd), _stats(x), **TOL)


def _ranks(x, sizes):
    """Per-rank (mean, invstd, count) of ``x`` split along the batch into ``sizes``."""
    parts = torch.split(x, sizes)
    stats = [_stats(p) for p in parts]
    return (torch.stack([s[0] for s in stats]), torch.stack([s[1] for s in stats]),
            torch.tensor([float(_count(p)) for p in parts]))


def test_gather_stats_with_counts_global_stats_and_running_update():
    x = _x(6, 3, 4, 4)
    mean_all, invstd_all, counts = _ranks(x, [1, 2, 3])  # uneven ranks
    rm, rv = _x(3, seed=1), torch.rand(3, generator=torch.Generator().manual_seed(2)) + 0.5
    trm, trv = rm.to("tpu"), rv.to("tpu")
    mean, invstd = torch.batch_norm_gather_stats_with_counts(
        x.to("tpu"), mean_all.to("tpu"), invstd_all.to("tpu"), trm, trv, 0.3, EPS, counts.to("tpu"))
    assert_same((mean, invstd), _stats(x), **TOL)
    # the running statistics are updated in place, with the unbiased variance
    assert_same(trm, 0.7 * rm + 0.3 * x.mean(_axes(x)), **TOL)
    assert_same(trv, 0.7 * rv + 0.3 * x.var(_axes(x), unbiased=True), **TOL)


def test_gather_stats_with_counts_ignores_empty_ranks_and_missing_running_stats():
    x = _x(4, 3, 5)
    mean_all, invstd_all, counts = _ranks(x, [2, 2])
    # a rank with no elements sends zeros (SyncBatchNorm on an empty input)
    mean_all = torch.cat([mean_all, torch.zeros(1, 3)])
    invstd_all = torch.cat([invstd_all, torch.zeros(1, 3)])
    counts = torch.cat([counts, torch.zeros(1)])
    out = torch.batch_norm_gather_stats_with_counts(
        x.to("tpu"), mean_all.to("tpu"), invstd_all.to("tpu"), None, None, 0.1, EPS, counts.to("tpu"))
    assert_same(out, _stats(x), **TOL)


def test_gather_stats_one_count():
    x = _x(4, 3, 5)
    mean_all, invstd_all, _ = _ranks(x, [2, 2])
    trm, trv = torch.zeros(3, device="tpu"), torch.ones(3, device="tpu")
    out = torch.batch_norm_gather_stats(x.to("tpu"), mean_all.to("tpu"), invstd_all.to("tpu"), trm, trv,
                                        0.1, EPS, 10)
    assert_same(out, _stats(x), **TOL)
    assert_same(trm, 0.1 * x.mean(_axes(x)), **TOL)
    assert_same(trv, 0.9 + 0.1 * x.var(_axes(x), unbiased=True), **TOL)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("affine", [True, False])
def test_batch_norm_elemt(dtype, affine):
    x = _x(4, 3, 2, 5, dtype=dtype)
    mean, invstd = _stats(x)
    w, b = (_x(3, seed=1), _x(3, seed=2)) if affine else (None, None)
    want = F.batch_norm(x.float(), mean, 1 / invstd ** 2 - EPS, w, b, training=False, eps=EPS).to(dtype)
    got = torch.batch_norm_elemt(x.to("tpu"), None if w is None else w.to("tpu"),
                                 None if b is None else b.to("tpu"), mean.to("tpu"), invstd.to("tpu"), EPS)
    assert got.dtype == dtype
    tol = TOL if dtype == torch.float32 else dict(atol=2e-2, rtol=1e-2)
    assert_same(got, want, **tol)


def _reference_backward(x, w, g):
    """CPU batch norm on the whole batch: its input, weight and bias gradients."""
    x, w = x.clone().requires_grad_(), w.clone().requires_grad_()
    b = torch.zeros_like(w, requires_grad=True)
    F.batch_norm(x, None, None, w, b, training=True, eps=EPS).backward(g)
    return x.grad, w.grad, b.grad


def test_backward_reduce_and_elemt_match_batch_norm_gradients():
    x, g, w = _x(6, 3, 4, seed=0), _x(6, 3, 4, seed=1), _x(3, seed=2)
    mean, invstd = _stats(x)
    dx, dw, db = _reference_backward(x, w, g)
    xmu = x - mean.view(1, 3, 1)
    t = lambda a: a.to("tpu")  # noqa: E731
    sum_dy, sum_dy_xmu, grad_w, grad_b = torch.batch_norm_backward_reduce(
        t(g), t(x), t(mean), t(invstd), t(w), True, True, True)
    assert_same((sum_dy, sum_dy_xmu), (g.sum((0, 2)), (g * xmu).sum((0, 2))), atol=1e-4, rtol=1e-5)
    assert_same((grad_w, grad_b), (dw, db), atol=1e-4, rtol=1e-5)
    # the input gradient from the (here: one process's) sums and per-rank counts
    counts = torch.tensor([16, 8], dtype=torch.int32)  # 24 elements per channel in all
    grad_in = torch.batch_norm_backward_elemt(t(g), t(x), t(mean), t(invstd), t(w), sum_dy, sum_dy_xmu,
                                              t(counts))
    assert_same(grad_in, dx, atol=1e-5, rtol=1e-4)
    # without a weight: as with weight 1
    grad_in = torch.batch_norm_backward_elemt(t(g), t(x), t(mean), t(invstd), None, sum_dy, sum_dy_xmu,
                                              t(counts))
    assert_same(grad_in, _reference_backward(x, torch.ones(3), g)[0], atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("flags", [(True, False, False), (False, True, False), (False, False, True),
                                   (False, False, False)])
def test_backward_reduce_only_what_the_flags_ask(flags):
    x, g, w = _x(4, 3, 5), _x(4, 3, 5, seed=1), _x(3, seed=2)
    mean, invstd = _stats(x)
    outs = torch.batch_norm_backward_reduce(g.to("tpu"), x.to("tpu"), mean.to("tpu"), invstd.to("tpu"),
                                            w.to("tpu"), *flags)
    wanted = (flags[0], flags[0], flags[1], flags[2])
    assert [o is not None for o in outs] == list(wanted)


def test_backward_reduce_half_input():
    # statistics sums in float32 like the saved stats; parameter gradients in the weight's dtype
    x, g = _x(4, 3, 5, dtype=torch.bfloat16), _x(4, 3, 5, seed=1, dtype=torch.bfloat16)
    mean, invstd = _stats(x)
    w = _x(3, seed=2)
    outs = torch.batch_norm_backward_reduce(g.to("tpu"), x.to("tpu"), mean.to("tpu"), invstd.to("tpu"),
                                            w.to("tpu"), True, True, True)
    assert [o.dtype for o in outs] == [torch.float32] * 4
    gf, xmu = g.float(), x.float() - mean.view(1, 3, 1)
    assert_same(outs[:2], (gf.sum((0, 2)), (gf * xmu).sum((0, 2))), atol=1e-4, rtol=1e-5)


# ---- _batch_norm_with_update and friends -------------------------------------------

def test_batch_norm_with_update_matches_cpu_and_updates_running_stats():
    x, w, b = _x(4, 3, 5), _x(3, seed=1), _x(3, seed=2)
    rm, rv = torch.zeros(3), torch.ones(3)
    trm, trv = rm.to("tpu"), rv.to("tpu")
    want = torch.ops.aten._batch_norm_with_update(x, w, b, rm, rv, 0.2, EPS)
    got = torch.ops.aten._batch_norm_with_update(x.to("tpu"), w.to("tpu"), b.to("tpu"), trm, trv, 0.2, EPS)
    assert_same(got[:3], want[:3], **TOL)
    assert got[3].shape == (0,) and got[3].dtype == torch.uint8
    assert_same((trm, trv), (rm, rv), **TOL)


def test_batch_norm_with_update_functional_and_no_update():
    x, w, b = _x(4, 3, 5), _x(3, seed=1), _x(3, seed=2)
    rm, rv = _x(3, seed=3), torch.rand(3, generator=torch.Generator().manual_seed(4)) + 0.5
    t = lambda a: a.to("tpu")  # noqa: E731
    want = torch.ops.aten._batch_norm_with_update_functional(x, w, b, rm, rv, 0.2, EPS)
    got = torch.ops.aten._batch_norm_with_update_functional(t(x), t(w), t(b), t(rm), t(rv), 0.2, EPS)
    assert_same(got[:3] + got[4:], want[:3] + want[4:], **TOL)
    want = torch.ops.aten._batch_norm_no_update(x, w, b, rm, rv, 0.2, EPS)
    got = torch.ops.aten._batch_norm_no_update(t(x), t(w), t(b), t(rm), t(rv), 0.2, EPS)
    assert_same(got[:3], want[:3], **TOL)
    assert got[3].shape == (0,) and got[3].dtype == torch.uint8


@pytest.mark.parametrize("update", [True, False])
def test_batch_norm_backward(update):
    x, g, w = _x(4, 3, 5), _x(4, 3, 5, seed=1), _x(3, seed=2)
    rm, rv = _x(3, seed=3), torch.rand(3, generator=torch.Generator().manual_seed(4)) + 0.5
    mean, invstd = _stats(x)
    reserve = torch.empty(0, dtype=torch.uint8)
    args = (g, x, w, rm, rv, mean, invstd, update, EPS, [True, True, True], reserve)
    want = torch.ops.aten.batch_norm_backward(*args)
    got = torch.ops.aten.batch_norm_backward(*(a.to("tpu") if isinstance(a, torch.Tensor) else a
                                               for a in args))
    assert_same(got, want, atol=1e-4, rtol=1e-5)
