"""OpInfo conformance: every entry of PyTorch's ``op_db`` on tpu against the CPU.

For each entry (OpInfo name + "." + variant), the harness (tests/tools/opinfo_harness.py,
its docstring has the details) draws ``op.sample_inputs("cpu", dtype)``, runs the op on
the CPU and on a tpu copy of the sample, and requires, for the first 8 samples:
  * the same output structure, dtypes, shapes, strides and values (dtype-appropriate
    tolerances, widened by the OpInfo's own hints);
  * no op ran through the CPU fallback (``torch_tpu.fallback_ops()`` unchanged);
  * tpu outputs on tpu.
test_gradient compares vector-Jacobian products for the first 3 samples; test_bfloat16,
test_float16, test_complex64 and test_float64 repeat the forward check in that dtype
for every entry that supports it on the CPU (a spread of common ones by default), and
test_complex_gradient the gradient check in complex64.

Known failures are listed in tests/opinfo_expected_failures.py and run as
xfail(strict=True): an entry that starts passing fails the run until it is removed
from that file, so the count of passing entries only goes up.

The default run covers a fixed spread of ~110 common entries (harness.DEFAULT_ENTRIES);
``--runslow`` runs all of op_db.  ``python -m tests.tools.opinfo_report`` summarises a sweep.
"""
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "tools"))
sys.path.insert(0, HERE)

import opinfo_expected_failures as expected  # noqa: E402
import opinfo_harness as H  # noqa: E402

_DEFAULT = set(H.DEFAULT_ENTRIES)
_HOW = "delete it from tests/opinfo_expected_failures.py (or run tests/tools/update_opinfo_expectations.py)"


def _params(names, known, default=_DEFAULT):
    params = []
    for name in names:
        marks = [] if name in default else [pytest.mark.slow]
        reason = known.get(name)
        if reason is not None:
            if reason.startswith(("crash", "timeout")):
                marks.append(pytest.mark.skip(reason=f"known {reason} (would take pytest down)"))
            else:
                marks.append(pytest.mark.xfail(strict=True, reason=f"{reason} -- if this passes now, {_HOW}"))
        params.append(pytest.param(name, id=name, marks=marks))
    return params


_ALL = list(H.ops())


def _check(check, name):
    r = H.run_check(check, name)
    if r.status == "skip":
        pytest.skip(r.reason)
    assert r.status == "pass", f"{name} [{r.check} {r.dtype}] {r.kind}: {r.reason}"


def _dtype_params(check, default):
    """A dtype check's entries: those whose OpInfo supports the dtype on the CPU;
    ``default`` runs without --runslow, and ``expected.<CHECK>`` holds its known failures."""
    return _params([n for n in _ALL if H.applies(check, n)], getattr(expected, check.upper()), default=set(default))


@pytest.mark.parametrize("name", _params(_ALL, expected.FORWARD))
def test_forward(name):
    _check("forward", name)


@pytest.mark.parametrize("name", _params([n for n in _ALL if H.ops()[n].supports_autograd], expected.GRADIENT))
def test_gradient(name):
    _check("gradient", name)


@pytest.mark.parametrize("name", _dtype_params("bfloat16", H.BF16_DEFAULT_ENTRIES))
def test_bfloat16(name):
    _check("bfloat16", name)


@pytest.mark.parametrize("name", _dtype_params("float16", H.FLOAT16_DEFAULT_ENTRIES))
def test_float16(name):
    _check("float16", name)


@pytest.mark.parametrize("name", _dtype_params("complex64", H.COMPLEX_DEFAULT_ENTRIES))
def test_complex64(name):
    _check("complex64", name)


@pytest.mark.parametrize("name", _dtype_params("float64", H.FLOAT64_DEFAULT_ENTRIES))
def test_float64(name):
    _check("float64", name)


@pytest.mark.parametrize("name", _dtype_params(H.COMPLEX_GRADIENT, H.COMPLEX_DEFAULT_ENTRIES + ["sigmoid"]))
def test_complex_gradient(name):
    _check(H.COMPLEX_GRADIENT, name)


def test_expectations_name_real_entries():
    """Every name in the expectations file and the subsets is an op_db entry."""
    ops = H.ops()
    for var in ("FORWARD", "GRADIENT", "BFLOAT16", "FLOAT16", "COMPLEX64", "FLOAT64", "COMPLEX_GRADIENT"):
        stale = sorted(set(getattr(expected, var)) - set(ops))
        assert not stale, f"{var} in tests/opinfo_expected_failures.py names unknown entries: {stale}"
    assert not set(H.DEFAULT_ENTRIES) - set(ops)
    assert not set(H.COMPLEX_DEFAULT_ENTRIES) - set(ops)
    assert not set(H.FLOAT64_DEFAULT_ENTRIES) - set(ops)
    assert not set(H.BF16_DEFAULT_ENTRIES) - set(ops)
    assert not set(H.FLOAT16_DEFAULT_ENTRIES) - set(ops)


def test_tie_order_rule_accepts_only_indices_of_equal_values():
    from torch.testing._internal.opinfo.core import SampleInput
    x = H.torch.tensor([1.0, 2.0, 1.0, 3.0, float("nan")])
    cpu = H.torch.sort(x)                   # values [1, 1, 2, 3, nan], indices [0, 2, 1, 3, 4]
    values, idx = cpu.values, cpu.indices

    def same(name, sample, got, expected):
        return H._same_up_to_tie_order(name, sample, got, expected, 0, 0)
    swapped = H.torch.tensor([2, 0, 1, 3, 4])  # the two 1.0s in the other order
    assert same("sort", SampleInput(x), (values, swapped), (values, idx))
    assert same("argsort", SampleInput(x), swapped, idx)
    assert not same("sort", SampleInput(x, kwargs={"stable": True}), (values, swapped), (values, idx))
    assert not same("sort", SampleInput(x), (values, H.torch.tensor([0, 0, 1, 3, 4])), (values, idx))  # 0 twice
    assert not same("sort", SampleInput(x), (values, H.torch.tensor([0, 2, 3, 1, 4])), (values, idx))  # 3.0 for 2.0
    assert not same("sort", SampleInput(x), (values.flip(0), swapped), (values, idx))  # wrong values
    assert not same("max", SampleInput(x), (values, swapped), (values, idx))  # not a tie-order op
    rows = H.torch.tensor([[5.0, 7.0, 5.0], [1.0, 1.0, 2.0]])
    mode = H.torch.mode(rows, dim=1)
    other = H.torch.tensor([2, 1]) - mode.indices  # the other 5.0 (index 0 or 2), the other 1.0 (0 or 1)
    assert same("mode", SampleInput(rows, args=(1,)), (mode.values, other), tuple(mode))
    assert not same("mode", SampleInput(rows, args=(1,)), (mode.values, H.torch.tensor([1, 2])), tuple(mode))


def test_half_rule_accepts_only_results_no_further_from_float64():
    from torch.testing._internal.opinfo.core import SampleInput
    torch = H.torch
    op = H.ops()["add"]
    g = torch.Generator().manual_seed(0)
    x, y = (torch.randn(64, generator=g).to(torch.bfloat16) for _ in range(2))
    sample = SampleInput(x, args=(y,))
    parts = H._sample_parts(sample)
    cpu = x + y                                    # correctly rounded: the best bfloat16 can do
    rtol, atol = H.tolerance(op, torch.bfloat16)

    def accepted(got, dtype=torch.bfloat16):
        return H._no_further_from_float64(op, sample, parts, got, cpu, dtype, rtol, atol)
    assert accepted(cpu.clone())
    far = cpu.clone()
    far[3] += 1                                    # one element well past the CPU's error and the tolerance
    assert not accepted(far)
    assert not accepted(cpu.clone(), dtype=torch.float32)  # the rule is for half dtypes only
    assert not accepted(cpu.float())                       # a wrong dtype is never excused


def test_tolerances_are_principled():
    ops = H.ops()
    f32 = H.tolerance(ops["add"], H.torch.float32)
    assert f32 == (1.3e-6, 1e-5)                       # assert_close's float32 default
    assert H.tolerance(ops["exp"], H.torch.float32) == (1e-5, 1e-5)   # transcendental: relaxed
    assert H.tolerance(ops["bitwise_and"], H.torch.int64) == (0.0, 0.0)   # integers: exact
    for name in ops:
        rtol, atol = H.tolerance(ops[name], H.torch.float32)
        assert rtol <= 1e-3 and atol <= 1e-3, name
