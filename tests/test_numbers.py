"""Python numbers an op passes often go to jit as cached device arrays
(storage/numbers.py): the results must be exactly those of the Python number,
on the first call (no copy yet) and on later ones (the cached copy)."""
import jax
import pytest
import torch

from torch_tpu.storage import numbers


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.int64,
                                   torch.uint8, torch.bool])
@pytest.mark.parametrize("value", [1.0001, 3, -2, 2.5, float("inf")])
def test_repeated_number_matches_cpu(dtype, value):
    if dtype is torch.bool and value == float("inf"):
        pytest.skip("bool * inf: the CPU gives nan for False, tpu 0 (also before numbers.py)")
    x = (torch.arange(-4, 8) % 5).to(dtype) if dtype is not torch.bool else torch.arange(12) % 2 == 0
    t = x.to("tpu")
    for _ in range(3):  # the first two see a Python number, the third its device copy
        expected = x * value
        got = (t * value).cpu()
        assert got.dtype == expected.dtype
        torch.testing.assert_close(got, expected, rtol=0, atol=0, equal_nan=True)


def test_signed_zero_and_nan_are_never_shared():
    x = torch.tensor([1.0, -1.0])
    t = x.to("tpu")
    for value in [0.0, -0.0, 0.0, -0.0, float("nan"), float("nan")]:
        got = (t * value).cpu()
        torch.testing.assert_close(got, x * value, rtol=0, atol=0, equal_nan=True)
        assert torch.equal(torch.signbit(got), torch.signbit(x * value))


def test_copy_is_what_jit_reads_of_the_number(monkeypatch):
    # (fresh tables: an earlier test in this process may have seen these numbers)
    for name, empty in [("_floats", {}), ("_ints", {}), ("_seen", set())]:
        monkeypatch.setattr(numbers, name, empty)
    for value, dtype in [(7.25, "float64"), (11, "int64")]:
        assert numbers.on_device(value) is value  # first sighting: kept as is
        arr = numbers.on_device(value)
        assert isinstance(arr, jax.Array) and arr.weak_type and str(arr.dtype) == dtype
        assert numbers.on_device(value) is arr
    for value in [True, 1j, 0.0, -0.0, float("nan"), 2 ** 70]:
        numbers.on_device(value)
        assert numbers.on_device(value) is value


def test_one_and_one_point_zero_do_not_share():
    t = torch.arange(4).to("tpu")
    for _ in range(3):
        assert (t * 1).dtype == torch.int64
        assert (t * 1.0).dtype == torch.float32
