"""Reductions, sorting and selection on tpu against the CPU's own answers:
values, dtypes and errors in the corners PyTorch's device-generic suites
(test_reductions, test_sort_and_select) probe - NaN, empty and 0-d inputs."""
import warnings

import pytest
import torch
from helpers import strict  # noqa: F401  (no CPU fallback)

import torch_tpu  # noqa: F401

NAN = float("nan")


def _same(cpu, tpu):
    cpu = cpu if isinstance(cpu, tuple) else (cpu,)
    tpu = tpu if isinstance(tpu, tuple) else (tpu,)
    assert len(cpu) == len(tpu)
    for c, t in zip(cpu, tpu):
        t = t.cpu()
        assert (c.shape, c.dtype) == (t.shape, t.dtype)
        torch.testing.assert_close(t, c, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("values", [
    [NAN, 0.0, 0.0, NAN, NAN, 1.0],   # every NaN its own value, last, in input order
    [2.0, NAN, -0.0, 0.0, 2.0],
    [[3.0, 1.0], [1.0, NAN]],
])
@pytest.mark.parametrize("inverse, counts", [(False, False), (True, False), (True, True)])
def test_unique_keeps_each_nan_distinct(values, inverse, counts):
    x = torch.tensor(values)
    cpu = torch.unique(x, return_inverse=inverse, return_counts=counts)
    _same(cpu, torch.unique(x.to("tpu"), return_inverse=inverse, return_counts=counts))


@pytest.mark.parametrize("fn, name", [
    (lambda x: torch.unique(x), "unique"),
    (lambda x: torch.unique(x, dim=0), "unique_dim"),
    (lambda x: torch.unique_consecutive(x), "unique"),
])
def test_unique_of_complex_is_not_implemented(fn, name):
    x = torch.tensor([1 + 1j, 2j])
    with pytest.raises(NotImplementedError, match=f'"{name}" not implemented for \'ComplexFloat\''):
        fn(x)
    with pytest.raises(NotImplementedError, match=f'"{name}" not implemented for \'ComplexFloat\''):
        fn(x.to("tpu"))


def _outcome(fn, device):
    try:
        r = fn(device)
    except (RuntimeError, TypeError) as e:
        return type(e), str(e)
    return r.cpu()


def _values(d):
    return torch.tensor([1, 2, 3, 4, 5, 6, 7, 8, 9], device=d)


@pytest.mark.parametrize("fn", [
    lambda d: torch.searchsorted(_values(d), _values(d), out=_values(d).float()),
    lambda d: torch.searchsorted(_values(d), _values(d), out=_values(d).int()),
    lambda d: torch.searchsorted(_values(d), _values(d), out=_values(d), out_int32=True),
    lambda d: torch.searchsorted(_values(d), _values(d), side="bad"),
    lambda d: torch.searchsorted(_values(d).float(), _values(d), sorter=torch.zeros(9, device=d)),
    lambda d: torch.searchsorted(torch.ones(2, 3, device=d), 1),
    lambda d: torch.bucketize(_values(d), torch.ones(2, 3, device=d)),
], ids=["out_float", "out_int32_unasked", "out_int64_with_int32", "side", "sorter_dtype", "scalar_into_rows",
        "bucketize_2d_boundaries"])
def test_searchsorted_argument_errors_like_cpu(fn):
    cpu, tpu = _outcome(fn, "cpu"), _outcome(fn, "tpu")
    assert isinstance(cpu, tuple), "the CPU refuses this call"
    assert tpu == cpu


def test_searchsorted_warns_for_non_contiguous_inputs():
    seq = torch.arange(12.0).reshape(3, 4).to("tpu").t()
    always = torch.is_warn_always_enabled()
    torch.set_warn_always(True)  # the CPU warns once per process otherwise
    try:
        with pytest.warns(UserWarning, match="non-contiguous"):
            torch.searchsorted(seq, torch.ones(4, 2, device="tpu"))
    finally:
        torch.set_warn_always(always)


# ---- reductions without an identity over empty inputs ---------------------------------

_EMPTY_CASES = {
    "argmax_all": lambda x: x.argmax(), "argmin_dim": lambda x: x.argmin(1), "amax_all": lambda x: x.amax(),
    "amax_dims_as_given": lambda x: x.amax((0, -2)), "amin_dim": lambda x: x.amin(1), "max_all": lambda x: x.max(),
    "max_dim": lambda x: x.max(1), "min_dim": lambda x: x.min(-2), "median_dim": lambda x: x.median(1),
    "nanmedian_dim": lambda x: x.nanmedian(1), "kthvalue_dim": lambda x: x.kthvalue(1, 1),
    "kthvalue_other_dim": lambda x: x.kthvalue(1, 2), "mode_dim": lambda x: x.mode(1),
    "aminmax_all": lambda x: x.aminmax(), "aminmax_dim": lambda x: x.aminmax(dim=1),
}


def _shapes_or_error(fn, x):
    try:
        r = fn(x)
    except (RuntimeError, IndexError) as e:
        return type(e), str(e)
    return [tuple(t.shape) for t in (r if isinstance(r, tuple) else (r,))]


@pytest.mark.parametrize("case", sorted(_EMPTY_CASES))
def test_reduction_over_an_empty_dim_like_cpu(case):
    x = torch.randn(2, 0, 4)
    fn = _EMPTY_CASES[case]
    assert _shapes_or_error(fn, x.to("tpu")) == _shapes_or_error(fn, x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.int32, torch.int16, torch.bool])
@pytest.mark.parametrize("fn", [torch.median, torch.nanmedian])
def test_median_of_no_elements_is_nan_cast_like_cpu(fn, dtype):
    x = torch.tensor([], dtype=dtype)
    _same(fn(x), fn(x.to("tpu")))


@pytest.mark.parametrize("name", ["var", "std", "var_mean", "std_mean"])
@pytest.mark.parametrize("shape, kwargs, warns", [
    ((10, 20), dict(dim=-1, correction=20), True),
    ((10, 20), dict(dim=(0, 1), correction=199.5), False),
    ((1,), {}, True),
    ((0,), {}, True),
    ((10, 20), dict(dim=1), False),
])
def test_no_degrees_of_freedom_warns_like_cpu(name, shape, kwargs, warns):
    fn = getattr(torch, name)
    x = torch.randn(shape)
    for t in (x, x.to("tpu")):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            fn(t, **kwargs)
        messages = [str(w.message) for w in caught if "degrees of freedom" in str(w.message)]
        assert len(messages) == int(warns), (t.device, messages)
        assert all(m.startswith(f"{name}(): degrees of freedom is <= 0.") for m in messages)


@pytest.mark.parametrize("fn", [torch.all, torch.any])
@pytest.mark.parametrize("dtype, out_dtype", [(torch.float32, torch.float32), (torch.int32, torch.int32),
                                              (torch.float32, torch.uint8), (torch.bool, torch.bool)])
@pytest.mark.parametrize("dim", [None, 0])
def test_all_any_out_dtype_like_cpu(fn, dtype, out_dtype, dim):
    def call(device):
        x = torch.ones(3, 3, dtype=dtype, device=device)
        out = torch.empty((3,) if dim is not None else (), dtype=out_dtype, device=device)
        try:
            r = fn(x, out=out) if dim is None else fn(x, dim, out=out)
        except RuntimeError as e:
            return str(e)
        return r.cpu()
    cpu, tpu = call("cpu"), call("tpu")
    if isinstance(cpu, str):
        assert tpu == cpu
    else:
        _same(cpu, tpu)


@pytest.mark.parametrize("values", [[1.0, 2.0, float("inf")], [float("nan")], [-float("inf"), 1.0]])
def test_histc_refuses_a_non_finite_data_range(values):
    for device in ("cpu", "tpu"):
        with pytest.raises(RuntimeError, match=r"torch.histc: range of \[.*\] is not finite"):
            torch.histc(torch.tensor(values, device=device), bins=3)


def test_histc_counts_integers_as_an_accelerator_does():
    # The CPU refuses integer inputs; CUDA counts them, and Hugging Face's MoE
    # layers (Mixtral) pass ints on every device but the CPU and MPS: tpu
    # counts them as CUDA does (in the input's dtype), bool is refused.
    for dtype in (torch.int32, torch.int64, torch.uint8):
        x = torch.tensor([0, 1, 1, 3, 2, 3, 3, 7, 5], dtype=dtype)
        for bins, lo, hi in ((4, 0, 3), (3, 0, 0), (5, 1, 6)):
            got = torch.histc(x.to("tpu"), bins=bins, min=lo, max=hi)
            assert got.dtype == dtype
            want = torch.histc(x.double(), bins=bins, min=lo, max=hi)
            torch.testing.assert_close(got.cpu().double(), want, rtol=0, atol=0)
    with pytest.raises(NotImplementedError, match="\"histogram_cpu\" not implemented for 'Long'"):
        torch.histc(torch.tensor([1, 2]))  # (the CPU's refusal, unchanged)
    with pytest.raises(NotImplementedError, match="not implemented for 'Bool'"):
        torch.histc(torch.tensor([True, False], device="tpu"))


def test_histc_with_a_given_range_ignores_nan_and_inf():
    x = torch.tensor([1.0, 2.0, float("nan"), float("inf")])
    _same(torch.histc(x, bins=4, max=3), torch.histc(x.to("tpu"), bins=4, max=3))


def _error(fn, device):
    try:
        fn(device)
    except (RuntimeError, NotImplementedError) as e:
        return type(e), str(e)
    return None


@pytest.mark.parametrize("fn", [
    lambda d: torch.sum(torch.ones(3, 3, 3, 3, device=d), dim=(0, -4)),
    lambda d: torch.std(torch.ones(3, 3, 3, 3, device=d), dim=(1, 2, -3)),
    lambda d: torch.nansum(torch.ones([1] * 65, device=d), dim=64),
    lambda d: torch.bincount(torch.tensor([[1.0, 2.0]], device=d)),
    lambda d: torch.bincount(torch.tensor([True], device=d)),
    lambda d: torch.bincount(torch.tensor([[1, 2]], device=d)),
], ids=["repeated_dim", "repeated_wrapped_dim", "nansum_65_dims", "bincount_float_2d", "bincount_bool",
        "bincount_int_2d"])
def test_reduction_argument_errors_like_cpu(fn):
    cpu = _error(fn, "cpu")
    assert cpu is not None
    assert _error(fn, "tpu") == cpu


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.int16, torch.int64])
def test_bincount_length_is_the_largest_value_plus_one(dtype):
    x = torch.tensor([0, 3, 2, 1, 3], dtype=dtype)
    _same(torch.bincount(x), torch.bincount(x.to("tpu")))
    _same(torch.bincount(x[:0]), torch.bincount(x[:0].to("tpu")))


# ---- cumulative ops: an out= of another dtype is refused, as the CPU refuses it ----------------

def _cum_out_error(device, call):
    x = torch.randn(5, 2, dtype=torch.float64, device=device)
    f32 = torch.zeros(5, 2, device=device)
    i64 = torch.zeros(5, 2, dtype=torch.int64, device=device)
    try:
        call(x, f32, i64)
    except RuntimeError as e:
        return str(e)
    return None


@pytest.mark.parametrize("call", [
    lambda x, f32, i64: torch.logcumsumexp(x, 1, out=f32),
    lambda x, f32, i64: torch.cummax(x, 1, out=(f32, i64)),
    lambda x, f32, i64: torch.cummin(x, 0, out=(f32, i64)),
    lambda x, f32, i64: torch.cummax(x, 1, out=(x.clone(), f32)),  # indices must be Long
    lambda x, f32, i64: torch.cummin(x, 1, out=(x.clone(), i64)),  # accepted
], ids=["logcumsumexp", "cummax-values", "cummin-values", "cummax-indices", "cummin-ok"])
def test_cumulative_out_of_another_dtype_refused_as_the_cpu(call):
    assert _cum_out_error("tpu", call) == _cum_out_error("cpu", call)


def test_is_set_to_compares_storage_offset_sizes_strides_on_tpu():
    """is_set_to had no tpu kernel: the CPU fallback compared fresh copies, always False."""
    def answers(d):
        t1 = torch.empty(3, 4, device=d)
        t3 = torch.tensor([], device=d).set_(t1)
        return [t1.is_set_to(t3), t3.is_set_to(t1), t1.is_set_to(torch.empty(3, 4, device=d)),
                t1.is_set_to(t1.view(4, 3)), t1[1:].is_set_to(t1[1:]), t1[1:].is_set_to(t1[2:])]
    assert answers("tpu") == answers("cpu") == [True, True, False, False, True, False]
