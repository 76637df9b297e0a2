"""Dtypes an op's CPU kernel is not built for are refused on tpu as on the CPU
(ops/dtype_support.py), with the CPU's error type and message; never computed
silently and never a JAX message.  The CPU is the oracle."""
import re

import pytest
import torch

from torch_tpu.ops import dtype_support

COMPLEX = torch.tensor([[1 + 2j, 3 - 1j], [0.5 + 0j, 1j]])
BOOL = torch.tensor([[True, False], [True, True]])
LONG = torch.tensor([[1, 2], [3, 4]])
HALF = torch.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=torch.float16)

CASES = {
    # silently computed on tpu before
    "sort": (COMPLEX, lambda x: torch.sort(x)),
    "argsort": (COMPLEX, lambda x: torch.argsort(x)),
    "topk": (COMPLEX, lambda x: torch.topk(x, 1)),
    "max": (COMPLEX, lambda x: x.max()),
    "amax": (COMPLEX, lambda x: x.amax()),
    "cummax": (COMPLEX, lambda x: torch.cummax(x, 0)),
    "gt": (COMPLEX, lambda x: x > x),
    "clamp": (COMPLEX, lambda x: x.clamp(0, 1)),
    "sign": (COMPLEX, lambda x: x.sign()),
    "softmax": (COMPLEX, lambda x: x.softmax(0)),
    "nansum": (COMPLEX, lambda x: x.nansum()),
    "mm bool": (BOOL, lambda x: x @ x),
    "bmm bool": (BOOL, lambda x: torch.bmm(x[None], x[None])),
    "dot bool": (BOOL, lambda x: torch.dot(x[0], x[0])),
    "abs bool": (BOOL, lambda x: x.abs()),
    "floor bool": (BOOL, lambda x: x.floor()),
    "lerp long": (LONG, lambda x: torch.lerp(x, x, 0.5)),
    "frac long": (LONG, lambda x: x.frac()),
    "hypot long": (LONG, lambda x: torch.hypot(x, x)),
    # a JAX message before
    "floor complex": (COMPLEX, lambda x: x.floor()),
    "erf complex": (COMPLEX, lambda x: x.erf()),
    "gelu long": (LONG, lambda x: torch.nn.functional.gelu(x)),
    "cross bool": (BOOL, lambda x: torch.linalg.cross(torch.cat([x, x[:1]]).T, torch.cat([x, x[:1]]).T)),
    "bitwise_and half": (HALF, lambda x: x & x),
    "det half": (HALF, lambda x: torch.linalg.det(x)),
    "frac bool": (BOOL, lambda x: x.frac()),
    "log_softmax bool": (BOOL, lambda x: x.log_softmax(0)),
}


def _on_tpu(cpu_message):
    """The CPU's message as tpu gives it: a kernel's name ends _tpu, not _cpu ("index_add_tpu_",
    "scatter_gather_tensor_tpu_reduce_mean")."""
    return re.sub(r"_cpu((?:_\w*)?['\"])", r"_tpu\1", cpu_message).replace("on CPU", "on TPU")


def _outcome(fn, x):
    try:
        fn(x)
    except Exception as e:
        return type(e), str(e)
    return None


@pytest.mark.parametrize("name", list(CASES))
def test_refused_as_on_cpu(name):
    x, fn = CASES[name]
    cpu = _outcome(fn, x)
    assert cpu is not None, "the CPU accepts this: the case is wrong"
    tpu = _outcome(fn, x.to("tpu"))
    assert tpu is not None, f"{name}: computed on tpu, refused on the CPU: {cpu}"
    assert tpu[0] is cpu[0], (tpu, cpu)
    assert tpu[1] == _on_tpu(cpu[1])


# (det of float16: JAX refuses LAPACK's half precision when it lowers the op, so a
# recorded op with a decomposition of a half-precision input is lowered too)
FUSED_CASES = ["bitwise_and half", "det half", "floor complex", "gelu long", "sort", "erf complex"]


@pytest.mark.parametrize("name", FUSED_CASES)
def test_refused_at_the_op_in_fused_mode(name):
    # fused mode records ops: a kernel that cannot take the inputs must still
    # fail at the op (not at a later host read, in JAX's words) and lose no
    # other pending result
    x, fn = CASES[name]
    cpu = _outcome(fn, x)
    with torch.tpu.set_eager_mode("fused"):
        t = x.to("tpu")
        pending = t.abs() if not t.dtype.is_complex and t.dtype != torch.bool else t + 0
        tpu = _outcome(fn, t)
        kept = pending.cpu()
    assert tpu is not None and tpu[0] is cpu[0], (tpu, cpu)
    assert tpu[1] == _on_tpu(cpu[1])
    assert torch.equal(kept, x.abs() if not x.dtype.is_complex and x.dtype != torch.bool else x + 0)


def test_float16_beyond_the_cpu_is_kept():
    # the CPU has no float16 cdist; TPUs compute in half precision, so tpu keeps it
    x = HALF.to("tpu")
    assert torch.cdist(x, x).dtype == torch.float16


@pytest.mark.parametrize("name, fn", [
    ("index_add", lambda x, s, i: x.index_add(0, i, s)),
    ("scatter_add", lambda x, s, i: x.scatter_add(0, i[:, None].expand(6, 4), s)),
    ("scatter_reduce prod", lambda x, s, i: x.scatter_reduce(0, i[:, None].expand(6, 4), s, "prod")),
    ("scatter_reduce sum", lambda x, s, i: x.scatter_reduce(0, i[:, None].expand(6, 4), s, "sum",
                                                             include_self=False)),
    ("scatter multiply", lambda x, s, i: x.scatter(0, i[:, None].expand(6, 4), s, reduce="multiply")),
])
def test_bool_scatter_reductions_are_or_and_and(name, fn):
    # XLA has no bool add/multiply scatter; the CPU's bool sum is or, its product and
    g = torch.Generator().manual_seed(0)
    x = torch.rand(5, 4, generator=g) > 0.6
    src = torch.rand(6, 4, generator=g) > 0.5
    idx = torch.tensor([0, 2, 2, 4, 0, 2])
    assert torch.equal(fn(x.to("tpu"), src.to("tpu"), idx.to("tpu")).cpu(), fn(x, src, idx))


def test_a_string_or_flag_argument_picks_the_kernel_as_a_dtype_does():
    # the CPU sums bools in scatter_reduce but has no bool mean; the answer for "sum" was kept
    # for the op and its dtypes, so a later "mean" of bools computed on tpu
    idx = torch.tensor([[0, 1], [1, 1]])
    for reduce in ("sum", "amax", "mean"):
        fn = lambda x: x.scatter_reduce(0, idx.to(x.device), x, reduce)  # noqa: E731
        cpu, tpu = _outcome(fn, BOOL), _outcome(fn, BOOL.to("tpu"))
        if cpu is None:
            assert torch.equal(fn(BOOL.to("tpu")).cpu(), fn(BOOL))
        else:
            assert tpu is not None and tpu[0] is cpu[0] and tpu[1] == _on_tpu(cpu[1]), (tpu, cpu)
    assert reduce == "mean" and "scatter_gather_tensor_tpu_reduce_mean" in tpu[1]
    # a flag likewise: complex products with include_self=True only
    for include_self in (True, False):
        fn = lambda x: x.index_reduce(0, idx[0].to(x.device), x, "prod", include_self=include_self)  # noqa: E731
        cpu, tpu = _outcome(fn, COMPLEX), _outcome(fn, COMPLEX.to("tpu"))
        assert (cpu is None) == include_self
        if cpu is not None:
            assert tpu is not None and tpu[0] is cpu[0] and tpu[1] == _on_tpu(cpu[1]), (tpu, cpu)


def test_asked_once_per_op_and_dtypes(monkeypatch):
    calls = []
    run = dtype_support._run
    monkeypatch.setattr(dtype_support, "_run", lambda *a: calls.append(a[0]) or run(*a))
    op = torch.ops.aten.bitwise_xor.Tensor
    for n in (3, 4, 5):  # three signatures, one dtype pair
        x = torch.arange(n, dtype=torch.int16).to("tpu")
        assert (x ^ x).tolist() == [0] * n
    assert calls.count(op) <= 1
