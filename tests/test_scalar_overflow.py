"""A Python number an op converts to its result's dtype is refused where
PyTorch's CPU refuses it ("value cannot be converted to type int8_t without
overflow"): XLA would wrap it or give inf (ops/scalar_checks.py).  Where the
CPU accepts the number, tpu gives the CPU's values."""
import math

import pytest
import torch

import torch_tpu  # noqa: F401

OPS = {
    "fill_": lambda x, v: x.clone().fill_(v),
    "fill_ one element": lambda x, v: x[:1].clone().fill_(v),
    "full": lambda x, v: torch.full((64,), v, dtype=x.dtype, device=x.device),
    "masked_fill": lambda x, v: x.masked_fill(torch.arange(64, device=x.device) % 2 == 0, v),
    "index_fill": lambda x, v: x.index_fill(0, torch.tensor([1], device=x.device), v),
    "scatter": lambda x, v: x.scatter(0, torch.tensor([2, 9], device=x.device), v),
    "clamp": lambda x, v: x.clamp(min=v),
    "clamp_max": lambda x, v: torch.clamp_max(x, v),
    "hardtanh": lambda x, v: torch.nn.functional.hardtanh(x, -abs(v) if v == v else v, abs(v) if v == v else v),
    "threshold": lambda x, v: torch.nn.functional.threshold(x, 1, v),
    "add alpha": lambda x, v: torch.add(x, x, alpha=v),
    "sub_ alpha": lambda x, v: x.clone().sub_(x, alpha=v),
    "pow": lambda x, v: x.pow(v),
    "linspace": lambda x, v: torch.linspace(0, v, 3, dtype=x.dtype, device=x.device),
}
VALUES = [300, -1, -300, 2, 70000.0, 65504.5, 1e6, 1e39, 0.5, float("nan"), float("inf"), 2 ** 40]


def _outcome(fn, x, v):
    try:
        r = fn(x, v)
    except Exception as e:  # noqa: BLE001 (compared below: the CPU's error type and message)
        return type(e), str(e)
    return r.cpu()


@pytest.mark.parametrize("dtype", [torch.int8, torch.uint8, torch.int32, torch.float16, torch.bfloat16,
                                   torch.float32])
@pytest.mark.parametrize("op", OPS)
def test_number_out_of_the_dtype_range_is_the_cpus_error(op, dtype):
    fn = OPS[op]
    if op in ("hardtanh", "threshold", "pow") and not dtype.is_floating_point:
        pytest.skip("float only on the CPU (hardtanh/threshold), pow of ints: other rules")
    x = (torch.arange(64) % 3 + 1).to(dtype)  # 64: no scalar tail in the CPU's vector loops
    refused = 0
    for v in VALUES:
        if op == "linspace" and (math.isnan(v) or math.isinf(v)):
            continue  # the CPU's own message there is about the step count, not overflow
        expected, got = _outcome(fn, x, v), _outcome(fn, x.to("tpu"), v)
        if isinstance(expected, tuple):
            refused += 1
            assert got == expected, (v, got)
        else:
            assert not isinstance(got, tuple), (v, got)
            torch.testing.assert_close(got, expected, equal_nan=True, rtol=0, atol=0, msg=f"{op} {v}")
    if op != "fill_ one element" and (op != "pow" or dtype in (torch.float16, torch.bfloat16)):
        assert refused, "the CPU refuses some of these numbers"
