"""Every OpInfo entry that supports ``out=``, called with ``out=`` on tpu
against the same call with ``out=`` on the CPU (float32, its first three
samples with one tensor result): a fresh ``out`` of the result's shape, and a
view at an offset into a larger buffer whose other elements must stay
untouched, each three times (the first call builds the signature, the next
ones take the cached path: in strict mode the written-out program entered from
C++).  The default run covers a spread of common entries; ``--runslow`` runs
all of them.  Random ops (values differ by design), factories (their samples
pass device="cpu") and sparse inputs are left out."""
import warnings

import pytest
import torch
from torch.testing._internal.common_methods_invocations import op_db

from helpers import strict  # noqa: F401  (no CPU fallback)

_NOT_COMPARED = {"bernoulli", "normal", "multinomial", "randn", "rand", "randint", "empty", "arange", "eye",
                 "full", "linspace", "logspace", "ones", "zeros", "sparse.sampled_addmm"}
# out= overloads with no tpu kernel yet (their functional forms have one): the
# CPU fallback, which the tests forbid (TORCH_TPU_STRICT=1)
NO_OUT_KERNEL = {"mvlgamma", "narrow_copy", "hash_tensor", "linalg.eigvals", "linalg.ldl_solve"}
DEFAULT = {"add", "mul", "sub", "div", "neg", "exp", "abs", "clamp", "where", "sum", "mean", "mm", "addmm",
           "cumsum", "remainder", "fft.ihfftn"}


def _entries():
    params = []
    for op in op_db:
        if not op.supports_out or op.name in _NOT_COMPARED or torch.float32 not in op.supported_dtypes("cpu"):
            continue
        name = op.name + ("." + op.variant_test_name if op.variant_test_name else "")
        marks = () if op.name in DEFAULT else (pytest.mark.slow,)
        if op.name in NO_OUT_KERNEL:
            marks += (pytest.mark.xfail(strict=True, raises=NotImplementedError, reason="no out= kernel on tpu"),)
        params.append(pytest.param(op, id=name, marks=marks))
    return params


def _to(x, device):
    if isinstance(x, torch.Tensor):
        return x.to(device)
    if isinstance(x, (list, tuple)):
        return type(x)(_to(e, device) for e in x)
    if isinstance(x, dict):
        return {k: _to(v, device) for k, v in x.items()}
    return x


@pytest.mark.parametrize("op", _entries())
def test_out_matches_the_cpus_out(op):
    warnings.simplefilter("ignore")
    compared = 0
    for sample in list(op.sample_inputs("cpu", torch.float32))[:3]:
        args, kwargs = (sample.input, *sample.args), sample.kwargs
        try:
            result = op(*args, **kwargs)
        except Exception:  # noqa: BLE001 -- a sample the CPU refuses: nothing to compare
            continue
        if not isinstance(result, torch.Tensor) or result.layout != torch.strided:
            continue
        # (the CPU's own out= as the reference: fft.ihfftn with s= leaves out untouched there)
        cpu_out = torch.full_like(result, 7)
        op(*args, **kwargs, out=cpu_out)
        tpu_args, tpu_kwargs = _to(args, "tpu"), _to(kwargs, "tpu")
        base = torch.full((result.numel() + 7,), 7, dtype=result.dtype, device="tpu")
        view = base[7:].view(result.shape)
        for _ in range(3):
            whole = torch.full_like(result, 7, device="tpu")
            op(*tpu_args, **tpu_kwargs, out=whole)
            op(*tpu_args, **tpu_kwargs, out=view)
            for got in (whole, view):
                torch.testing.assert_close(got.cpu(), cpu_out, equal_nan=True, atol=1e-4, rtol=1e-4,
                                           check_stride=False)
        assert torch.equal(base[:7].cpu(), torch.full((7,), 7, dtype=result.dtype))
        compared += 1
    if compared == 0:
        pytest.skip("no sample with one tensor result")
