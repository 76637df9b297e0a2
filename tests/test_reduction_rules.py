"""Reductions, sorting and selection on tpu against the CPU's own answers:
values, dtypes and errors in the corners PyTorch's device-generic suites
(test_reductions, test_sort_and_select) probe - NaN, empty and 0-d inputs."""
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
