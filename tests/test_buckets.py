"""Exact elementwise ops (and a 1-d cumsum) on a new small shape run their
first calls on the program of the shape's power-of-two bucket
(``torch_tpu.ops.buckets``): an eager loop whose lengths change every step
compiles one program per bucket, not one per length, and every value is the
op's own, bit for bit.  Counted, not timed."""
import itertools

import numpy as np
import pytest
import torch

import torch_tpu  # noqa: F401
from torch_tpu import profiler
from torch_tpu.ops import buckets, registry
from helpers import strict  # noqa: F401  (no CPU fallback)

_lengths = (n for n in itertools.count(2003, 7))  # lengths no other test uses (< BUCKET_MAX_ELEMENTS)


_INTS = {2: torch.int16, 4: torch.int32, 8: torch.int64}


def _ints(t):
    """Each element's bits as an integer (NaN payloads and zero signs count)."""
    t = t.cpu().contiguous().reshape(-1)
    if t.dtype == torch.bool:
        return t.to(torch.uint8)
    return t.view(_INTS[t.element_size()]) if t.is_floating_point() else t


def _same(got, want):
    assert got.dtype == want.dtype and got.shape == want.shape and got.stride() == want.stride()
    assert torch.equal(_ints(got), _ints(want))


def _as_its_own_program(fn, *tpu_args, cpu_args, monkeypatch):
    """``fn``'s result on the bucket path: the bits the op's own program
    gives (the bucket path off), except where that program's differ from the
    CPU's and the bucket's are the CPU's (``cumsum`` of ``[-0.0]``: -0.0 from
    its own program, 0.0 on the CPU)."""
    before = buckets.bucketed_calls
    got = fn(*tpu_args)
    bucketed = buckets.bucketed_calls - before
    with monkeypatch.context() as m:
        m.setattr(buckets, "BUCKET_CALLS", 0)
        own = fn(*[a.clone() for a in tpu_args])
    want = fn(*cpu_args)
    assert got.dtype == own.dtype == want.dtype and got.shape == own.shape == want.shape
    assert got.stride() == own.stride()
    g, o, w = _ints(got), _ints(own), _ints(want)
    nan = torch.isnan(want.reshape(-1)) if want.is_floating_point() else torch.zeros_like(w, dtype=torch.bool)
    # (a NaN's sign and payload are not a value: the programs of two lengths
    # may add two NaNs in either order, as the CPU's vector and scalar loops do)
    assert bool((nan | (g == o) | ((o != w) & (g == w))).all())
    return bucketed


def _values(n, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, (n,), generator=g).bool()
    if not dtype.is_floating_point:
        return torch.randint(-50, 50, (n,), generator=g).to(dtype)
    x = torch.randn(n, generator=g, dtype=torch.float64) * 10.0 ** torch.randint(-6, 7, (n,), generator=g)
    x[::11] = float("nan")
    x[::13] = float("inf")
    x[::17] = -0.0
    return x.to(dtype)


UNARY = {
    "abs": torch.abs, "neg": torch.neg, "isnan": torch.isnan, "sign": torch.sign,
    "long": lambda x: x.long(), "float": lambda x: x.float(), "half": lambda x: x.half(),
    "cumsum": lambda x: x.cumsum(0), "eq_scalar": lambda x: x == 3, "lt_scalar": lambda x: x < 0.5,
}
BINARY = {
    "eq": torch.eq, "ne": torch.ne, "le": torch.le, "gt": torch.gt, "mul": torch.mul,
    "maximum": torch.maximum, "minimum": torch.minimum,
}
DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int64, torch.int32]


@pytest.fixture
def unseen_signatures():
    """Every signature new to the kernels, as the bucket tests' fixed lengths
    assume (a test before them in the same process may have run abs of two
    float32s: its own program then, no bucket)."""
    for kernel in registry.KERNELS.values():
        if isinstance(kernel, registry.Kernel):
            kernel.cache.clear()
    buckets._calls.clear()


@pytest.mark.parametrize("name", sorted(UNARY))
@pytest.mark.usefixtures("unseen_signatures")
def test_unary_bucketed_is_the_op_bit_for_bit(name, monkeypatch):
    fn = UNARY[name]
    for dtype in DTYPES:
        for n in (1, 2, 15, 17, 100, 127, 129, 1000, 4000):
            x = _values(n, dtype, n)
            if fn(x) is x:  # (a cast to its own dtype: no kernel)
                continue
            bucketed = _as_its_own_program(fn, x.to("tpu"), cpu_args=(x,), monkeypatch=monkeypatch)
            if name != "isnan" or dtype.is_floating_point:  # (an integer's isnan is no kernel)
                assert bucketed == 1, (name, dtype, n)


@pytest.mark.parametrize("name", sorted(BINARY))
@pytest.mark.usefixtures("unseen_signatures")
def test_binary_bucketed_is_the_op_bit_for_bit(name, monkeypatch):
    fn = BINARY[name]
    for dtype in DTYPES:
        for shape in ((3,), (37,), (5, 7), (2, 3, 11), (999,)):
            n = int(np.prod(shape))
            a, b = _values(n, dtype, 1).view(shape), _values(n, dtype, 2).view(shape)
            b.view(-1)[::3] = a.view(-1)[::3]  # ties: equal elements
            bucketed = _as_its_own_program(fn, a.to("tpu"), b.to("tpu"), cpu_args=(a, b), monkeypatch=monkeypatch)
            assert bucketed == 1


def test_where_bucketed(monkeypatch):
    for n in (5, 300):
        c = _values(n, torch.bool, 3)
        a, b = _values(n, torch.float32, 4), _values(n, torch.float32, 5)
        bucketed = _as_its_own_program(torch.where, c.to("tpu"), a.to("tpu"), b.to("tpu"), cpu_args=(c, a, b),
                                       monkeypatch=monkeypatch)
        assert bucketed == 1


def test_a_loop_of_new_lengths_compiles_once_per_bucket():
    lengths = [next(_lengths) % 1000 + 129 for _ in range(12)]  # 129..1128: buckets 256 .. 2048
    xs = [torch.randn(n, dtype=torch.float64).to("tpu") for n in lengths]
    torch.tpu.synchronize()
    for x in xs[:1]:  # the buckets' programs of one length, once
        x.abs().cumsum(0).long()
    before = profiler.xla_compiles()
    for x in xs:
        y = x.abs().cumsum(0).long()
        assert y.shape == x.shape
    new_buckets = {buckets.bucket_of(n) for n in lengths} - {buckets.bucket_of(lengths[0])}
    assert profiler.xla_compiles() - before <= 3 * len(new_buckets)


def test_a_steady_shape_gets_its_own_program():
    x = torch.randn(next(_lengths), dtype=torch.float64).to("tpu")
    before = buckets.bucketed_calls
    for _ in range(buckets.BUCKET_CALLS + 3):
        x.abs()
    assert buckets.bucketed_calls - before == buckets.BUCKET_CALLS
    compiles = profiler.xla_compiles()
    x.abs()  # its own program, cached: nothing new, no host copy
    assert profiler.xla_compiles() == compiles and buckets.bucketed_calls - before == buckets.BUCKET_CALLS


def test_what_keeps_its_own_program():
    n = next(_lengths) % 1000
    x = torch.randn(n, 4, dtype=torch.float64)
    t = x.to("tpu")
    before = buckets.bucketed_calls
    _same(t[:, 1].abs(), x[:, 1].abs())  # a strided view
    _same(t[1:].abs(), x[1:].abs())  # at an offset
    _same(t.t().abs(), x.t().abs())  # transposed: the result keeps its layout
    torch.testing.assert_close(t.cumsum(0).cpu(), x.cumsum(0))  # a running sum of a 2-d tensor
    _same(t * t[0], x * x[0])  # operands of different shapes
    big = torch.randn(buckets.BUCKET_MAX_ELEMENTS + 1)
    _same(big.to("tpu").abs(), big.abs())  # too large
    assert buckets.bucketed_calls == before
    _same(t.abs(), x.abs())  # the whole (n, 4) tensor: on its bucket
    assert buckets.bucketed_calls == before + 1


def test_errors_are_the_ops_own():
    x = torch.ones(next(_lengths), dtype=torch.bool).to("tpu")
    with pytest.raises(RuntimeError, match="Negation, the `-` operator, on a bool tensor is not supported"):
        x.neg()


def test_fused_mode_records_the_ops_own_program():
    x = torch.randn(next(_lengths), dtype=torch.float64)
    t = x.to("tpu")
    before = buckets.bucketed_calls
    with torch.tpu.set_eager_mode("fused"):
        y = t.abs().cumsum(0)
    torch.testing.assert_close(y.cpu(), x.abs().cumsum(0))
    assert buckets.bucketed_calls == before


def test_integer_max_min_bucketed(monkeypatch):
    for dtype in (torch.int64, torch.int32, torch.uint8, torch.bool):
        for n in (3, 100, 1000):
            x = _values(n, dtype, n).abs() if dtype == torch.uint8 else _values(n, dtype, n)
            for fn in (torch.max, torch.min):
                assert _as_its_own_program(fn, x.to("tpu"), cpu_args=(x,), monkeypatch=monkeypatch) == 1


def test_float_max_keeps_its_own_program():
    x = torch.randn(37, dtype=torch.float64)
    before = buckets.bucketed_calls
    _same(x.to("tpu").max(), x.max())  # (which of -0.0 and 0.0 a float max keeps may depend on the order)
    assert buckets.bucketed_calls == before


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64], ids=str)
def test_random_fills_bucketed_are_the_own_programs_draws(dtype, monkeypatch):
    def draws():
        torch.manual_seed(1234)
        out = [torch.empty(n, dtype=dtype, device="tpu").uniform_(-2, 3) for n in (5, 100, 1000)]
        out += [torch.randn(n, dtype=dtype, device="tpu") for n in (7, 300)]
        out += [torch.empty(6, 7, dtype=dtype, device="tpu").normal_(1.5, 0.25)]
        out.append(torch.rand(3, dtype=dtype, device="tpu"))  # the generator went on as it would
        return out

    before = buckets.bucketed_calls
    got = draws()
    assert buckets.bucketed_calls - before == 6
    with monkeypatch.context() as m:
        m.setattr(buckets, "BUCKET_CALLS", 0)
        own = draws()
    for g, o in zip(got, own):
        _same(g, o)


def test_random_fill_of_a_view_keeps_its_own_program():
    t = torch.zeros(next(_lengths) % 1000 + 3, device="tpu")
    before = buckets.bucketed_calls
    t[1:].uniform_()
    assert buckets.bucketed_calls == before and float(t[0]) == 0.0


@pytest.mark.parametrize("accumulate", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.bool], ids=str)
def test_index_put_bucketed_is_the_own_programs(dtype, accumulate, monkeypatch):
    for m, i in ((5, 3), (100, 511), (1023, 40), (7, 1)):
        g = torch.Generator().manual_seed(m + i)
        x = _values(m, dtype, m)
        index = torch.randint(-m, m, (i,), generator=g)  # negative positions and duplicates
        values = _values(i, dtype, i)

        def put(x, index, values):
            return x.index_put((index,), values, accumulate=accumulate)

        cpu = (x, index, values)
        bucketed = _as_its_own_program(put, *[t.to("tpu") for t in cpu], cpu_args=cpu, monkeypatch=monkeypatch)
        assert bucketed == 1
        # in place, through x[index] = values's path
        t = x.to("tpu")
        before = buckets.bucketed_calls
        t.index_put_((index.to("tpu"),), values.to("tpu"), accumulate=accumulate)
        assert buckets.bucketed_calls == before + 1
        torch.testing.assert_close(t.cpu(), put(*cpu), rtol=0, atol=0, equal_nan=True)


def test_index_put_bucketed_still_checks_its_index():
    x = torch.zeros(next(_lengths) % 1000 + 3, device="tpu")
    index = torch.tensor([0, x.shape[0]]).to("tpu") + 0  # values the host does not know
    before = buckets.bucketed_calls
    y = x.index_put((index,), torch.ones(2, device="tpu"))
    assert buckets.bucketed_calls == before + 1
    with pytest.raises(IndexError, match="out of bounds"):
        y.cpu()
