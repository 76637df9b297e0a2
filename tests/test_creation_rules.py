"""Factories (empty, empty_strided, resize_, ...) follow the CPU's rules beyond
their values: the errors for sizes whose bytes do not fit in int64 (raised as
RuntimeError before any buffer is built; XLA would abort the process)."""
import warnings

import pytest
import torch
from helpers import strict  # noqa: F401  (no CPU fallback)

import torch_tpu  # noqa: F401


def error_on(device, fn):
    with pytest.raises(RuntimeError) as info:
        fn(device)
    return str(info.value)


@pytest.mark.parametrize("make", [
    lambda d: torch.empty([2, 4, 2**29, 2**29], dtype=torch.float64, device=d),
    lambda d: torch.empty([0, 4, 2**61], dtype=torch.float32, device=d),
    lambda d: torch.empty_strided([8, 8], [2**61, 1], dtype=torch.float64, device=d),
    lambda d: torch.empty((), dtype=torch.float64, device=d).resize_([2, 4, 2**29, 2**29]),
    lambda d: torch.empty((), device=d).resize_([0, 4, 2**61]),
], ids=["empty", "empty-stride", "empty_strided", "resize_", "resize_-stride"])
def test_storage_size_overflow_raises_the_cpu_error(make):
    assert error_on("tpu", make) == error_on("cpu", make)


def test_large_but_valid_empty_still_allocates():
    t = torch.empty_strided((3, 2), (1, 3), device="tpu")
    assert t.stride() == (1, 3) and t.shape == (3, 2)


# ---- random fills: the CPU's parameter checks, before anything is drawn ------------

def outcome(fn, device):
    """The error (type, message) and warnings ``fn(device)`` gives, or None for both."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            fn(device)
            error = None
        except RuntimeError as e:  # NotImplementedError too
            error = (type(e), str(e))
    return error, [str(w.message) for w in caught if "no tpu kernel" not in str(w.message)]


@pytest.mark.parametrize("fill", [
    lambda d: torch.empty(5, dtype=torch.bool, device=d).random_(-42, 1),   # from below bool
    lambda d: torch.empty(5, dtype=torch.bool, device=d).random_(0, 42),    # to - 1 above bool
    lambda d: torch.empty(5, dtype=torch.int8, device=d).random_(-129, 0),
    lambda d: torch.empty(5, dtype=torch.int8, device=d).random_(300),
    lambda d: torch.empty(5, dtype=torch.int64, device=d).random_(3, 2),     # from >= to
    lambda d: torch.empty(5, dtype=torch.float32, device=d).random_(-2**25, 0),  # warns: inexact
    lambda d: torch.randint(6, (2,), dtype=torch.complex64, device=d),
    lambda d: torch.empty(5, device=d).uniform_(42, 0),
    lambda d: torch.empty(5, device=d).uniform_(-3e38, 3e38),                # to - from overflows
    lambda d: torch.rand(3, dtype=torch.int32, device=d),
    lambda d: torch.empty(3, device=d).exponential_(-1),
    lambda d: torch.empty(3, device=d).geometric_(2),
    lambda d: torch.empty(3, device=d).log_normal_(0, -1),
    lambda d: torch.empty(3, dtype=torch.int32, device=d).cauchy_(),
], ids=["bool-from", "bool-to", "int8-from", "int8-to", "from>=to", "float-warns", "randint-complex",
        "uniform-from>to", "uniform-overflow", "rand-int", "exponential", "geometric", "log_normal", "cauchy-int"])
def test_random_fill_parameters_checked_as_on_cpu(fill):
    cpu = outcome(fill, "cpu")
    assert cpu[0] is not None or cpu[1], "the case must raise or warn on the CPU"
    assert outcome(fill, "tpu") == cpu


@pytest.mark.parametrize("dtype, n", [(torch.float16, 2**11 + 2), (torch.uint8, 2**8 + 1), (torch.int8, 200)])
def test_randperm_past_the_dtype_raises_as_on_cpu(dtype, n):
    def run(d):
        torch.randperm(n, out=torch.empty(0, dtype=dtype, device=d))
    assert outcome(run, "tpu") == outcome(run, "cpu") != (None, [])


def test_randperm_at_the_dtype_limit_is_a_permutation():
    out = torch.randperm(2**8, out=torch.empty(0, dtype=torch.uint8, device="tpu"))
    assert torch.equal(out.cpu().sort().values.long(), torch.arange(256))


@pytest.mark.parametrize("make", [
    lambda d: torch.empty_strided((2,), (), device=d),
    lambda d: torch.ones(1, device=d).new_empty_strided((2,), ()),
    lambda d: torch.empty_strided((-1, 2), (1, 1), device=d),
    lambda d: torch.empty_strided((2, 2), (1, -1), device=d),
], ids=["rank-mismatch", "new_empty_strided", "negative-size", "negative-stride"])
def test_empty_strided_geometry_errors_as_on_cpu(make):
    assert error_on("tpu", make) == error_on("cpu", make)


def test_empty_strided_negative_stride_of_a_size_one_dim_is_allowed():
    cpu = torch.empty_strided((1, 2), (-1, 1))
    assert torch.empty_strided((1, 2), (-1, 1), device="tpu").stride() == cpu.stride()


# ---- arange / range -----------------------------------------------------------------

@pytest.mark.parametrize("make", [
    lambda d: torch.arange(-5, float("nan"), device=d),
    lambda d: torch.arange(0, float("-inf"), -1, device=d),
    lambda d: torch.arange(0.5, float("inf"), device=d),
    lambda d: torch.arange(1.175494351e-38, 3.402823466e+38, device=d),
    lambda d: torch.arange(0, 5, 0, device=d),
    lambda d: torch.arange(0, float("nan"), 0, device=d),
    lambda d: torch.arange(0, 5, -1, device=d),
    lambda d: torch.range(1, 2, -1, device=d),
], ids=["nan-end", "-inf-end", "inf-end", "size-overflow", "zero-step", "zero-step-first", "sign", "range-sign"])
@pytest.mark.filterwarnings("ignore:torch.range is deprecated")
def test_range_errors_as_on_cpu(make):
    assert error_on("tpu", make) == error_on("cpu", make)


def test_arange_out_of_another_size_warns_then_resizes():
    def run(d):
        out = torch.zeros(1, 49, device=d)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.arange(-1, 1, 2. / 49, dtype=torch.float32, out=out)
        return out.cpu(), [str(w.message) for w in caught]
    (cpu, cpu_warned), (tpu, tpu_warned) = run("cpu"), run("tpu")
    assert torch.equal(cpu, tpu) and tpu.shape == (50,)
    assert len(tpu_warned) == len(cpu_warned) == 1 and cpu_warned[0].startswith(tpu_warned[0])


def test_arange_into_an_empty_out_does_not_warn():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert torch.arange(5, out=torch.zeros(0, device="tpu", dtype=torch.int64)).shape == (5,)


@pytest.mark.parametrize("args, dtype", [((0.1, 0.9, 0.2), torch.float32), ((3, 0, -1), torch.int64),
                                         ((0, 1, 0.1), torch.float64), ((0, 1, 0.1), torch.float16),
                                         ((1, 1, -1), torch.float32)])
def test_range_values_match_cpu_bit_for_bit(args, dtype):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.range is deprecated
        cpu = torch.range(*args, dtype=dtype)
        tpu = torch.range(*args, dtype=dtype, device="tpu")
    assert torch.equal(cpu, tpu.cpu())


def test_range_out_into_a_strided_view():
    def run(d):
        x = torch.zeros(2, 3, device=d)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.range(0, 3, out=x.narrow(1, 1, 2))
        return x.cpu()
    assert torch.equal(run("cpu"), run("tpu"))


# ---- complex / polar: the dtypes of the parts and of out= ----------------------------

@pytest.mark.parametrize("op", [torch.complex, torch.polar], ids=["complex", "polar"])
@pytest.mark.parametrize("dtypes, out_dtype", [
    ((torch.int64, torch.int64), None),            # parts must be Half/Float/Double
    ((torch.bool, torch.bool), None),
    ((torch.float32, torch.float64), None),        # parts of one dtype
    ((torch.float32, torch.float32), torch.float32),  # out= must be the complex dtype
], ids=["long", "bool", "mixed", "real-out"])
def test_complex_parts_dtype_errors_as_on_cpu(op, dtypes, out_dtype):
    def make(d):
        a, b = (torch.tensor([1, 2], dtype=dt, device=d) for dt in dtypes)
        return op(a, b) if out_dtype is None else op(a, b, out=torch.zeros(2, dtype=out_dtype, device=d))
    assert error_on("tpu", make) == error_on("cpu", make)


def test_copy_of_complex_into_real_warns_once_as_on_cpu():
    from torch_tpu.ops import core
    core._warn_complex_to_real.cache_clear()  # the CPU warns once per process (TORCH_WARN_ONCE)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            x = torch.zeros(2, device="tpu").copy_(torch.tensor([1 + 2j, 3j], device="tpu"))
    assert sum("discards the imaginary part" in str(w.message) for w in caught) == 1
    assert x.cpu().tolist() == [1.0, 0.0]


# ---- linspace in double: the CPU's fused multiply-add, bit for bit --------------------

@pytest.mark.parametrize("start, end, steps, dtype", [
    (-100, 100, 15, torch.float64),
    (0.123, 999.77, 5000, torch.float64),
    (-2**63, (2**63 - 1) & ~0xfff, 15, torch.int64),
    (-2**31, (2**31 - 1) & ~0xfff, 15, torch.int32),
])
def test_linspace_in_double_matches_cpu_bit_for_bit(start, end, steps, dtype):
    cpu = torch.linspace(start, end, steps, dtype=dtype)
    assert torch.equal(torch.linspace(start, end, steps, dtype=dtype, device="tpu").cpu(), cpu)



# ---- layouts tpu does not support: a clear NotImplementedError -------------------

@pytest.mark.parametrize("make", [
    lambda d: torch.quantize_per_tensor(torch.randn(4), 0.1, 0, torch.quint8).to(d),
    lambda d: torch.quantize_per_channel(torch.randn(2, 3), torch.tensor([0.1, 0.2]), torch.tensor([0, 1]), 0,
                                         torch.qint8).to(d),
    lambda d: torch._empty_affine_quantized([2], scale=1.0, zero_point=0, dtype=torch.quint8, device=d),
    lambda d: torch.empty([2], dtype=torch.qint8, device=d),
], ids=["per_tensor-to", "per_channel-to", "_empty_affine_quantized", "empty-qint8"])
def test_quantized_tensors_are_refused_by_name(make):
    assert make("cpu").is_quantized
    with pytest.raises(NotImplementedError, match="quantized tensors are not supported on tpu"):
        make("tpu")


@pytest.mark.parametrize("make", [
    lambda d: torch.sparse_coo_tensor(torch.tensor([[0, 2]]), torch.tensor([1.0, 2.0]), (3,), device=d),
    lambda d: torch.sparse_coo_tensor(torch.tensor([[0, 2]]), torch.tensor([1.0, 2.0]), (3,)).to(d),
], ids=["sparse_coo_tensor", "to"])
def test_sparse_coo_tensors_are_refused_by_name(make):
    assert make("cpu").is_sparse
    with pytest.raises(NotImplementedError, match="sparse COO tensors are not supported on tpu"):
        make("tpu")


# ---- random_ of a float dtype: the CPU's ends, so rounding never reaches `to` --------

@pytest.mark.parametrize("dtype,args,low,high", [
    (torch.float16, (32752,), 0, 32736),  # 32751 rounds up to 32752: the CPU draws below 32736
    (torch.float16, (-32751, 5), -32736, 4),  # from + 1 = -32750 rounds down past from: from moves up to -32736
    (torch.bfloat16, (1000,), 0, 996),
])
def test_random_of_a_float_dtype_stays_inside_its_ends(dtype, args, low, high):
    torch.manual_seed(0)
    t = torch.empty(50000, dtype=dtype, device="tpu").random_(*args).double()
    assert low <= t.min().item() and t.max().item() <= high
    assert t.max().item() >= high - 64 and t.min().item() <= low + 64  # the whole range is drawn


@pytest.mark.parametrize("shifts,dims", [((1,), (1, 2)), ((1, 2), (1,)), ((), 1), ((), ())])
def test_roll_checks_its_counts_first(shifts, dims):
    """The CPU's messages (the meta kernel wraps the dims first: 'Dimension out of range')."""
    assert outcome(lambda d: torch.arange(8, device=d).view(2, 4).roll(shifts, dims), "tpu") == \
        outcome(lambda d: torch.arange(8, device=d).view(2, 4).roll(shifts, dims), "cpu")


# ---- deterministic mode: memory handed out uninitialized is filled as the CPU fills it ------

def _uninitialized(device, dtype):
    grown = torch.zeros(3, dtype=dtype, device=device)
    grown.resize_(5)
    return [torch.empty(3, dtype=dtype, device=device),
            torch.empty_strided((2, 2), (1, 2), dtype=dtype, device=device),
            torch.empty_like(torch.zeros(2, dtype=dtype, device=device)),
            grown]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.complex64, torch.int8, torch.uint8,
                                   torch.int64, torch.bool])
def test_deterministic_mode_fills_uninitialized_memory_as_the_cpu(dtype):
    from torch.testing._internal.common_utils import DeterministicGuard
    with DeterministicGuard(True):
        tpu = [t.cpu() for t in _uninitialized("tpu", dtype)]
        cpu = _uninitialized("cpu", dtype)
    for a, b in zip(tpu, cpu):
        torch.testing.assert_close(a, b, equal_nan=True, atol=0, rtol=0)


def test_zero_gradients_stay_zero_in_deterministic_mode():
    from torch.testing._internal.common_utils import DeterministicGuard
    with DeterministicGuard(True):
        assert torch._efficientzerotensor(3, device="tpu").cpu().tolist() == [0.0, 0.0, 0.0]


# ---- resize_ growing the storage keeps the old storage's elements where they were -------------

def _grown(device, make):
    t = make(device)
    t.resize_(4, 3, 4)
    return t.storage_offset(), t.stride(), torch.tensor(t.untyped_storage(), dtype=t.dtype, device="cpu")


@pytest.mark.parametrize("make", [
    # a strided tensor: its storage holds gaps, kept in place (the values were read in view order)
    lambda d: torch.arange(46.0, device=d).as_strided((2, 3, 4), (1, 4, 12)),
    # a view at an offset: the offset stays (it was reset to 0)
    lambda d: torch.arange(10.0, device=d)[3:],
], ids=["strided", "offset"])
def test_resize_growth_keeps_storage_layout_and_offset(make):
    off, stride, storage = _grown("tpu", make)
    cpu_off, cpu_stride, cpu_storage = _grown("cpu", make)
    assert (off, stride) == (cpu_off, cpu_stride)
    n = make("cpu").untyped_storage().nbytes() // 4  # the old elements (the grown part is uninitialized)
    assert storage[:n].tolist() == cpu_storage[:n].tolist()


def test_a_remembered_arange_is_each_tensors_own():
    # torch.arange of plain numbers is computed once and shared by the storages
    # that take it: a write through one tensor leaves the others (and the
    # next arange) as they were; -0.0 and 0.0 are different starts
    a, b = torch.arange(8, device="tpu"), torch.arange(8, device="tpu")
    a.add_(1)
    b[0] = 100
    c = torch.arange(8, device="tpu")
    assert a.tolist() == list(range(1, 9)) and b.tolist() == [100] + list(range(1, 8))
    assert c.tolist() == list(range(8))
    for start in (0.0, -0.0):
        tpu, cpu = torch.arange(start, 2.0, device="tpu").cpu(), torch.arange(start, 2.0)
        assert torch.equal(tpu, cpu) and torch.equal(tpu.signbit(), cpu.signbit())


@pytest.mark.parametrize("args,kwargs", [
    ((16,), {}), ((3, 11), {}), ((0, 1, 0.1), {}), ((5.0,), {}), ((True,), {}), ((10, 0, -3), {}),
    ((7,), dict(dtype=torch.float16)), ((-2, 2, 0.5), dict(dtype=torch.bfloat16)), ((4,), dict(dtype=torch.uint8)),
])
def test_arange_seen_before_gives_the_cpus_ramp_again(args, kwargs):
    # the second torch.arange of the same numbers is wrapped from the ramp the
    # first made (no empty + out=): same values, dtype and shape as the CPU's
    cpu = torch.arange(*args, **kwargs)
    for _ in range(3):
        tpu = torch.arange(*args, device="tpu", **kwargs)
        assert tpu.dtype == cpu.dtype and tpu.shape == cpu.shape and tpu.stride() == cpu.stride()
        assert torch.equal(tpu.cpu(), cpu)


@pytest.mark.parametrize("first,then", [(dict(dtype=torch.float32), {}), ({}, dict(dtype=torch.float32)),
                                        ({}, dict(dtype=torch.int32))], ids=["float_first", "int_first", "int32"])
def test_remembered_aranges_of_one_length_keep_their_dtypes(first, then):
    # a remembered ramp is found by the dtype of its result: torch.arange(16,
    # dtype=torch.float32) (a diffusers timestep embedding's) once made the
    # next torch.arange(16) (a GPT's positions) a float tensor, which its
    # position embedding then refused
    for kwargs in (first, then, first, then):
        tpu, cpu = torch.arange(16, device="tpu", **kwargs), torch.arange(16, **kwargs)
        assert tpu.dtype == cpu.dtype and torch.equal(tpu.cpu(), cpu)


def test_arange_seen_before_keeps_its_host_values_and_errors():
    # positions from a remembered arange are still range-checked at the op, as on the CPU
    emb = torch.nn.Embedding(8, 2).to("tpu")
    for _ in range(3):
        with pytest.raises(IndexError, match="index out of range"):
            emb(torch.arange(9, device="tpu"))
        for bad, message in (((0, 5, 0), "step must be nonzero"), ((5, 0), "inconsistent with step sign")):
            with pytest.raises(RuntimeError, match=message):
                torch.arange(*bad, device="tpu")
        with pytest.raises(RuntimeError, match="Invalid device index"):
            torch.arange(5, device="tpu:1")
    assert not torch.arange(5, device="tpu").requires_grad
    assert torch.arange(5.0, device="tpu", requires_grad=True).requires_grad


@pytest.mark.parametrize("value", [0.0, -0.0, 1, True, 2.5, -7, 3 + 1j])
@pytest.mark.parametrize("dtype", [None, torch.float64, torch.int32, torch.bool, torch.complex64, torch.bfloat16])
def test_scalar_tensor_seen_before_gives_the_cpus_value_again(value, dtype):
    # a number as a 0-d tensor (torch.where(mask, x, 0.0), x[i] = v) is wrapped
    # from the array its first call made: the CPU's value, dtype and sign of zero
    try:
        cpu = torch.scalar_tensor(value, dtype=dtype)
    except RuntimeError as e:
        for _ in range(2):
            with pytest.raises(RuntimeError, match=str(e).split(":")[0]):
                torch.scalar_tensor(value, dtype=dtype, device="tpu")
        return
    for _ in range(3):
        tpu = torch.scalar_tensor(value, dtype=dtype, device="tpu")
        assert tpu.dtype == cpu.dtype and tpu.shape == () and torch.equal(tpu.cpu(), cpu)
        if not cpu.is_complex():
            assert tpu.cpu().signbit() == cpu.signbit()


def test_remembered_constants_follow_the_default_dtype():
    # without a dtype, float ends and numbers take the default dtype, which may change
    for _ in range(2):
        assert torch.arange(0.5, 3, device="tpu").dtype == torch.scalar_tensor(2, device="tpu").dtype == torch.float32
    torch.set_default_dtype(torch.float64)
    try:
        assert torch.arange(0.5, 3, device="tpu").dtype == torch.scalar_tensor(2, device="tpu").dtype == torch.float64
    finally:
        torch.set_default_dtype(torch.float32)


def test_remembered_scalar_tensor_keeps_its_host_value():
    x = torch.zeros(5, device="tpu")
    for _ in range(3):
        with pytest.raises(IndexError, match="out of bounds"):
            x[torch.scalar_tensor(7, dtype=torch.long, device="tpu")]
    a, b = (torch.scalar_tensor(4, dtype=torch.long, device="tpu") for _ in range(2))
    a.add_(1)  # a write to one tensor of the shared array leaves the other's value
    assert (a.item(), b.item(), x[b].item()) == (5, 4, 0.0)


def test_empty_checks_are_not_remembered_as_passed():
    # empty's checks are remembered per (size, dtype, device, format) only
    # when they pass: the same bad call raises every time
    for _ in range(2):
        with pytest.raises(RuntimeError, match="negative dimension"):
            torch.empty(2, -3, device="tpu")
    assert torch.empty(2, 3, device="tpu", memory_format=torch.contiguous_format).stride() == (3, 1)
    assert torch.empty(2, 3, 4, 5, device="tpu", memory_format=torch.channels_last).stride() == \
        torch.empty(2, 3, 4, 5, memory_format=torch.channels_last).stride()
