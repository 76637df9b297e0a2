"""An out= whose tensor is its whole buffer (fresh, or resized from empty, as
PyTorch's tests and factories pass it) takes the op's result buffer: one
executable per new shape, the op's own, and no copy program beside it.  Out
tensors that are views, of another dtype or larger storages still get the
copy, with the CPU's values.  Counted, not timed."""
import warnings

import pytest
import torch

from torch_tpu import profiler
from helpers import assert_same, sample, strict  # noqa: F401  (no CPU fallback)


def _compiles(fn):
    before = profiler.xla_compiles()
    result = fn()
    return profiler.xla_compiles() - before, result


@pytest.mark.parametrize("n", [37, 41])
def test_out_resized_from_empty_compiles_only_the_op(n):
    a, b = sample(n), sample(n) * 3
    out = torch.empty(0, device="tpu")
    a_tpu, b_tpu = a.to("tpu"), b.to("tpu")
    torch.mul(a_tpu[:3], b_tpu[:3], out=torch.empty(0, device="tpu"))  # (once per process: JAX's scalar casts)
    count, result = _compiles(lambda: torch.mul(a_tpu, b_tpu, out=out))
    assert result is out
    assert count == 1  # mul.out; before: mul.out and a copy_ into the resized out
    assert_same(out, a * b, exact=True)


def test_randperm_out_compiles_only_the_op():
    out = torch.empty(0, dtype=torch.int64, device="tpu")
    count, _ = _compiles(lambda: torch.randperm(53, out=out))
    assert count <= 2  # its random words (once per size) and the permutation; no copy
    assert sorted(out.cpu().tolist()) == list(range(53))


def test_out_taking_the_result_is_seen_by_every_alias():
    base = torch.zeros(4, 6, device="tpu")
    alias = base.view(24)
    torch.mul(sample(4, 6).to("tpu"), 2, out=base)
    assert_same(alias, (sample(4, 6) * 2).view(24), exact=True)


@pytest.mark.parametrize("numel,view", [
    (24, lambda base: base.view(6, 4).t()),  # a transposed view of its whole buffer
    (60, lambda base: base.view(10, 6)[2:6]),  # part of a larger buffer
    (30, lambda base: base[6:30].view(4, 6)),  # at an offset, to the buffer's end
])
def test_out_views_still_get_the_copy(numel, view):
    base = {d: torch.arange(float(numel), device=d) for d in ("cpu", "tpu")}
    for d, b in base.items():
        torch.mul(sample(4, 6).to(d), 2, out=view(b))
    assert_same(base["tpu"], base["cpu"], exact=True)


def test_out_of_another_dtype_still_gets_the_cast():
    out = torch.empty(0, dtype=torch.float64, device="tpu")
    torch.randperm(29, out=torch.empty(0, dtype=torch.int64, device="tpu"))
    torch.sum(sample(5, 3).to("tpu"), 0, dtype=torch.float64, out=out)
    assert_same(out, torch.sum(sample(5, 3), 0, dtype=torch.float64), exact=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool, torch.complex64])
def test_zeros_compile_nothing_per_shape(dtype):
    torch.zeros(2, dtype=dtype, device="tpu"), torch.ones(2, dtype=dtype, device="tpu")  # (JAX's scalar casts, once)
    count, z = _compiles(lambda: (torch.zeros(7, 11, dtype=dtype, device="tpu"),
                                  torch.zeros(13, dtype=dtype, device="tpu").zero_(),
                                  torch.ones(5, 3, dtype=dtype, device="tpu").zero_()))
    # ones' fill (and at times JAX's own staging of the scalar 1); the zeros and
    # both zero_ take a zero-filled buffer (before: 4, a zero_ program per shape)
    assert count <= 2
    for t in z:
        assert_same(t, torch.zeros(t.shape, dtype=dtype), exact=True)


def test_zero_of_a_view_still_writes_through():
    base = {d: torch.arange(24.0, device=d).view(4, 6) for d in ("cpu", "tpu")}
    for b in base.values():
        b[1:3].zero_()
        b[:, 0].zero_()
        b.t()[5].zero_()
    assert_same(base["tpu"], base["cpu"], exact=True)
    whole = torch.arange(6.0, device="tpu")
    alias = whole.view(2, 3)
    whole.zero_()
    assert_same(alias, torch.zeros(2, 3), exact=True)
    assert alias.cpu().sum().item() == 0 and whole.tolist() == [0.0] * 6


def test_zeros_like_of_any_dense_layout_compiles_nothing():
    x = torch.empty(2, 3, 5, 7, device="tpu").to(memory_format=torch.channels_last)
    count, z = _compiles(lambda: (torch.zeros_like(x), torch.empty(5, 4, device="tpu").t().zero_()))
    assert count == 0
    assert z[0].stride() == x.stride()
    assert_same(z[0], torch.zeros(2, 3, 5, 7), exact=True)
    assert_same(z[1], torch.zeros(4, 5), exact=True)


def test_zeroed_storages_do_not_share_a_buffer():
    # a compiled graph donates its rewritten inputs (optimizer states made by zeros_like)
    from torch_tpu.storage import buffers
    a, b = torch.zeros(9, device="tpu"), torch.zeros(9, device="tpu")
    assert buffers.get_buffer(a.untyped_storage()) is not buffers.get_buffer(b.untyped_storage())


@pytest.mark.parametrize("op", [
    lambda d, out: torch.exp(torch.ones(3, device=d), out=out),
    lambda d, out: torch.add(torch.ones(3, device=d), 1, out=out),
    lambda d, out: torch.cat([torch.ones(2, device=d), torch.ones(1, device=d)], out=out),
    lambda d, out: torch.sum(torch.ones(3, 3, device=d), 0, out=out),
    lambda d, out: torch.nonzero(torch.ones(3, device=d), out=out.long()),
])
def test_resizing_an_out_with_elements_warns_on_every_call(op):
    # PyTorch deprecates resizing a non-empty out= and says so each time; an
    # empty one is resized silently (the cached call resizes too)
    def warnings_of(device, out_numel):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for _ in range(3):
                op(device, torch.empty(out_numel, device=device))
        return [str(w.message).split(" (Triggered")[0] for w in caught if "resized" in str(w.message)]
    op("tpu", torch.empty(3, device="tpu"))  # (its first call: the signature's checks)
    assert warnings_of("tpu", 2) == warnings_of("cpu", 2) and len(warnings_of("cpu", 2)) == 3
    assert warnings_of("tpu", 0) == warnings_of("cpu", 0) == []
