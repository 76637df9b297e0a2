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
