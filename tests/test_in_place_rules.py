"""In-place ops whose result dtype the tensor cannot hold are refused as on
the CPU ("result type Float can't be cast to the desired output type Long"),
never truncated silently; a bool operand of a subtraction is the CPU's error."""
import pytest
import torch

import torch_tpu  # noqa: F401

INT, BOOL, HALF = torch.tensor([3, -7, 0, 5]), torch.tensor([True, False, True, True]), torch.tensor([1., 2, 3, 4]).half()
CASES = [
    (INT, "mul_", 1.5), (INT, "mul_", torch.tensor(1.5)), (INT, "mul_", torch.tensor([1.5, 2, 3, 4])),
    (INT, "div_", 2), (INT, "pow_", 0.5), (INT, "remainder_", 1.5), (INT, "add_", 2j), (INT, "atan2_", INT),
    (BOOL, "mul_", 2), (BOOL, "add_", torch.tensor([1, 2, 3, 4])), (HALF, "mul_", 2j), (HALF, "add_", 2j),
    (INT, "sub_", True), (BOOL, "sub_", True), (HALF, "sub_", True), (INT, "sub", BOOL), (INT, "sub", True),
    # accepted: the result fits
    (INT, "mul_", 2), (INT, "add_", True), (HALF, "mul_", 1.5), (HALF, "mul_", torch.tensor([1, 2, 3, 4])),
    (BOOL, "mul_", True), (INT, "sub", 1),
]


def _outcome(x, op, other):
    try:
        return getattr(x.clone(), op)(other).cpu()
    except RuntimeError as e:
        return str(e)


@pytest.mark.parametrize("x, op, other", CASES, ids=[f"{x.dtype}.{op}({o!r})" for x, op, o in CASES])
def test_in_place_result_dtype_rules_are_the_cpus(x, op, other):
    expected = _outcome(x, op, other)
    got = _outcome(x.to("tpu"), op, other.to("tpu") if isinstance(other, torch.Tensor) and other.dim() else other)
    if isinstance(expected, str):
        assert got == expected
    else:
        assert isinstance(got, torch.Tensor), got
        torch.testing.assert_close(got, expected, rtol=0, atol=0)


def test_sub_into_an_out_of_another_dtype_computes_in_the_operands_dtype():
    # the bool-operand check runs the CPU's sub on stand-ins, out= included
    def run(d):
        a, b = torch.tensor(5, dtype=torch.uint8, device=d), torch.tensor(8, dtype=torch.uint8, device=d)
        return torch.sub(a, b, out=torch.empty(0, dtype=torch.float64, device=d)).cpu()
    assert torch.equal(run("tpu"), run("cpu"))  # 253: uint8 wraps before the cast


# ---- an elementwise op's out= that gets resized takes the result's layout --------------------

@pytest.mark.parametrize("make", [
    lambda d: torch.arange(24.0, device=d).reshape(2, 3, 4).permute(2, 0, 1),
    lambda d: torch.arange(48.0, device=d).reshape(1, 1, 4, 12)[:, :, :, ::2].permute(3, 2, 0, 1),  # size-1 dims
    lambda d: torch.arange(48.0, device=d).reshape(2, 3, 8)[:, :, ::2].permute(1, 2, 0),
], ids=["permuted", "size-1-dims", "sliced"])
@pytest.mark.parametrize("op", ["neg", "add", "eq"])
def test_resized_out_takes_the_cpu_layout(make, op):
    def strides(d):
        x = make(d)
        y = torch.arange(float(x.size(-1)), device=d)
        call = {"neg": lambda o: torch.neg(x, out=o), "add": lambda o: torch.add(x, y, out=o),
                "eq": lambda o: torch.eq(y, x, out=o)}[op]
        out = torch.empty(0, device=d, dtype=torch.bool if op == "eq" else torch.float32)
        result = call(out)
        return result.stride(), result.cpu().tolist()
    assert strides("tpu") == strides("cpu")
