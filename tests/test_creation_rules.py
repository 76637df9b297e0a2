"""Factories (empty, empty_strided, resize_, ...) follow the CPU's rules beyond
their values: the errors for sizes whose bytes do not fit in int64 (raised as
RuntimeError before any buffer is built; XLA would abort the process)."""
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
