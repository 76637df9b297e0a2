"""Elementwise ops ("ufuncs") follow the CPU's rules beyond their values:
which ``out=`` dtypes they accept, and what they write there."""
import pytest
import torch
from helpers import strict  # noqa: F401  (no CPU fallback)

import torch_tpu  # noqa: F401


def run(device, fn, make_inputs, out_dtype):
    """fn(*inputs, out=...) on ``device``: the out tensor on the CPU, or the error."""
    inputs = [x.to(device) for x in make_inputs()]
    out = torch.empty(0, dtype=out_dtype, device=device)
    try:
        fn(*inputs, out=out)
    except RuntimeError as e:
        return type(e), str(e)
    return out.cpu()


def complex_values():
    return [torch.tensor([3 + 4j, -1 - 1j, 0j, 2.5 - 0.5j], dtype=torch.complex64)]


# abs of a complex tensor is real; the CPU casts it into a complex out= (the
# meta kernel refuses that out, the CPU kernel does not).
@pytest.mark.parametrize("fn", [torch.abs, torch.angle], ids=["abs", "angle"])
@pytest.mark.parametrize("out_dtype", [torch.float32, torch.complex64, torch.complex128, torch.int64],
                         ids=str)
def test_complex_to_real_op_into_an_out_of_another_dtype(fn, out_dtype):
    expected = run("cpu", fn, complex_values, out_dtype)
    actual = run("tpu", fn, complex_values, out_dtype)
    if isinstance(expected, tuple):
        assert actual == expected
    else:
        assert actual.dtype == expected.dtype
        torch.testing.assert_close(actual, expected)
