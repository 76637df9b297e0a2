"""_foreach_* ops on the cache-hit path: a list argument is encoded inline
(Kernel._fast_key) with exactly the general path's signature, so both share
one cache entry, and results match the CPU's."""
import numpy as np
import pytest
import torch

import torch_tpu  # noqa: F401
from torch_tpu.ops import registry


def _general_key(kernel, args):
    inputs = []
    pos = tuple(kernel._encode(a, kernel.arg_names[i], inputs) for i, a in enumerate(args))
    groups = registry.written_lists.groups(args) if kernel.writes_list else None
    return (pos, (), groups, torch.get_default_dtype(), registry.precision.current), inputs


def _lists():
    gen = torch.Generator().manual_seed(0)
    cpu = [torch.randn(4, 3, generator=gen), torch.randn(5, generator=gen), torch.randn(2, 2, generator=gen)]
    return cpu, [t.to("tpu") for t in cpu]


@pytest.mark.parametrize("name,extra", [
    ("_foreach_add_.List", "tensors"), ("_foreach_mul_.Scalar", 0.5),
    ("_foreach_div_.ScalarList", [1.5, 2.0, 3.0]), ("_foreach_sqrt.default", None),
])
def test_fast_key_is_the_general_key(name, extra):
    kernel = registry.KERNELS[registry.resolve(name)]
    _, tpu = _lists()
    args = [tpu] if extra is None else [tpu, [t.clone() for t in tpu] if extra == "tensors" else extra]
    inputs = []
    fast = kernel._fast_key(args, inputs)
    general, general_inputs = _general_key(kernel, args)
    assert fast == general
    assert len(inputs) == len(general_inputs)


def test_fast_key_declines_what_it_cannot_encode():
    kernel = registry.KERNELS[registry.resolve("_foreach_add_.List")]
    cpu, tpu = _lists()
    assert kernel._fast_key([tpu, cpu], []) is None  # CPU tensors: the general path's error
    conj = [torch.randn(3, dtype=torch.complex64).to("tpu").conj()]
    assert kernel._fast_key([conj, conj], []) is None  # lazy conjugate: its bits are encoded


def test_foreach_results_match_cpu_with_shared_storages_and_views():
    """Bit for bit, division by a list of numbers included (correctly rounded,
    as the CPU's: XLA would multiply by the reciprocal)."""
    cpu, tpu = _lists()
    base_c, base_t = torch.arange(16.0), torch.arange(16.0).to("tpu")
    # destinations that share one storage (views of one flat buffer), one strided
    dst_c = [base_c[:4], base_c[4:8], base_c[9::2]]
    dst_t = [base_t[:4], base_t[4:8], base_t[9::2]]
    for _ in range(3):  # the cached path, more than once
        torch._foreach_add_(dst_c, [torch.ones(4), torch.full((4,), 2.0), torch.full((4,), 3.0)])
        torch._foreach_add_(dst_t, [torch.ones(4).to("tpu"), torch.full((4,), 2.0).to("tpu"),
                                    torch.full((4,), 3.0).to("tpu")])
        torch._foreach_div_(cpu, [1.5, 2.0, 3.0])
        torch._foreach_div_(tpu, [1.5, 2.0, 3.0])
    torch.testing.assert_close(base_t.cpu(), base_c, rtol=0, atol=0)
    for c, t in zip(cpu, tpu):
        torch.testing.assert_close(t.cpu(), c, rtol=0, atol=0)
    # (XLA's sqrt, like the single-tensor kernel's, may be an ulp off the CPU's)
    torch.testing.assert_close([t.cpu() for t in torch._foreach_sqrt([t.abs() for t in tpu])],
                               torch._foreach_sqrt([c.abs() for c in cpu]))


_CROSSING = {  # written storages read or written again at another position: the CPU loops
    "same tensor twice": lambda b, c: torch._foreach_add_([b[0], b[0]], 1),
    "overlapping views": lambda b, c: torch._foreach_mul_([b[0, :2], b[0, 1:]], 2.0),
    "lists crossed": lambda b, c: torch._foreach_add_([b, c], [c, b]),
    "views crossed": lambda b, c: torch._foreach_add_([b[0], b[1]], [b[1], b[0]], alpha=2),
    "one tensor read at every position": lambda b, c: torch._foreach_mul_([c[0, 0], b], c[0, 0]),
    "addcmul reading the next": lambda b, c: torch._foreach_addcmul_([b, c], [c, b], [c, c], value=0.5),
    # one packed number per position (a CPU tensor), given to each position's call
    "addcmul with packed scalars": lambda b, c: torch._foreach_addcmul_([b, b], [c, c], [c, b],
                                                                        torch.tensor([0.5, 2.0])),
}


@pytest.mark.parametrize("mode", ["strict", "fused"])
@pytest.mark.parametrize("case", list(_CROSSING))
def test_foreach_writes_seen_by_later_positions_as_on_cpu(case, mode):
    """``_foreach_add_([x, x], 1)`` adds 2 on the CPU (it loops ``add_`` per
    tensor): one executable over the list's old values would add 1."""
    def run(device):
        b = (torch.arange(6.0).reshape(2, 3) + 1).to(device)
        c = (torch.arange(6.0).reshape(2, 3) * 0.5 - 1).to(device)
        for _ in range(2):  # the first call and the cached path
            _CROSSING[case](b, c)
        return b.cpu(), c.cpu()
    with torch.tpu.set_eager_mode(mode):
        got = run("tpu")
    torch.testing.assert_close(got, run("cpu"), rtol=0, atol=0)


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_shared_writes_with_a_cached_signature_of_distinct_ones_run_as_on_cpu(mode):
    """A call with the geometry of a cached signature whose written storages
    were all distinct is taken for it (by the native kernel entry too) only
    when its own are: a crossed read or one storage written at two positions
    is checked again, and gives the CPU's result."""
    def run(device):
        b, c = torch.ones(2, 3).to(device), torch.full((2, 3), 2.0).to(device)
        d, e = torch.full((2, 3), 3.0).to(device), torch.full((2, 3), 4.0).to(device)
        for _ in range(3):  # two tensors written, two others read: cached
            torch._foreach_add_([b, c], [d, e])
        torch._foreach_add_([b, c], [c, b])  # each written tensor read at the other position
        torch._foreach_add_([b, b.view(2, 3)], [d, e])  # one storage written at both
        torch._foreach_add_([d, e], [b, c.view(2, 3)])  # (distinct: taken)
        return b.cpu(), c.cpu(), d.cpu(), e.cpu()
    with torch.tpu.set_eager_mode(mode):
        got = run("tpu")
    torch.testing.assert_close(got, run("cpu"), rtol=0, atol=0)


def test_only_crossing_writes_run_position_by_position():
    from torch_tpu.ops import written_lists
    b, c = torch.zeros(2, 3, device="tpu"), torch.zeros(3, device="tpu")
    seq = written_lists.SEQUENTIAL
    assert written_lists.groups([[b[0], b[1], c], [c, b, c]]) == (0, 0, 2, seq)
    assert written_lists.groups([[b[0], b[1], c], [b[0], b[1], c]]) == (0, 0, 2, seq)  # (conservative)
    assert written_lists.groups([[b[0], b[1], c], 2.0]) == (0, 0, 2)  # rows of one storage: one program
    assert written_lists.groups([[b, c], [b, c], [c.clone(), b.clone()]]) == (0, 1)  # read where written
    assert written_lists.groups([[b, c], [1.0, 2.0]]) == (0, 1)
    assert written_lists.groups([[b[:, :2], b[:, 2]], 2.0]) == (0, 0, seq)  # interleaved spans: conservative


@pytest.mark.parametrize("call", [
    lambda c, b: torch._foreach_mul_([c, b], c[0, 0]),  # c *= one of its own elements
    lambda c, b: torch._foreach_add_([c[0, :2]], [c[0, 1:]]),
])
def test_foreach_refuses_a_read_that_partly_overlaps_its_write_as_cpu(call):
    for device in ("cpu", "tpu"):
        c, b = torch.ones(2, 3, device=device), torch.ones(2, 3, device=device)
        with pytest.raises(RuntimeError, match="refer to a single memory location"):
            call(c, b)


_PROMOTING = {  # each position computes in the dtype its operands promote to, as the CPU's per-tensor op
    "int + float number": lambda d: torch._foreach_add([torch.arange(3, device=d)], 1.5),
    "bool + int number": lambda d: torch._foreach_add([torch.ones(3, dtype=torch.bool, device=d)], 1),
    "float + complex number": lambda d: torch._foreach_mul([torch.ones(3, device=d)], 2j),
    "int * float numbers": lambda d: torch._foreach_mul([torch.arange(3, device=d), torch.arange(2, device=d)],
                                                        [1.5, 0.25]),
    "int + float tensors": lambda d: torch._foreach_add([torch.arange(3, device=d)],
                                                        [torch.full((3,), 0.5, device=d)], alpha=2),
    "int clamp_min float": lambda d: torch._foreach_clamp_min([torch.arange(3, device=d)], 1.5),
    "number ** bool": lambda d: torch._foreach_pow(3, [torch.tensor([True, False], device=d)]),
    "float number ** int": lambda d: torch._foreach_pow(2.5, [torch.arange(3, device=d)]),
    # integer pow wraps as the CPU's (by squaring); a negative exponent gives 0 (or +-1 for +-1)
    "int ** big ints": lambda d: torch._foreach_pow([torch.tensor([7, 7, -3], device=d)],
                                                    [torch.tensor([63, 100, 41], device=d)]),
    "int ** -1": lambda d: torch._foreach_pow([torch.tensor([7, 1, -1, 2], device=d)],
                                              [torch.tensor([-1, -1, -1, 3], device=d)]),
    "sign of bools": lambda d: torch._foreach_sign([torch.tensor([True, False], device=d)]),
    "sigmoid of ints": lambda d: torch._foreach_sigmoid([torch.arange(-3, 3, device=d)]),
}


@pytest.mark.parametrize("case", list(_PROMOTING))
def test_foreach_results_in_promoted_dtype_as_cpu(case):
    got = [t.cpu() for t in _PROMOTING[case]("tpu")]
    want = _PROMOTING[case]("cpu")
    assert [t.dtype for t in got] == [t.dtype for t in want]
    torch.testing.assert_close(got, list(want), rtol=0, atol=0)


@pytest.mark.parametrize("op", [torch._foreach_mul_, torch._foreach_add_])
@pytest.mark.parametrize("ok,refused", [
    (True, 8),  # the CPU holds bools * True; bools * 8 is int64
    ([1, 2], [2, 2.5]),
])
def test_foreach_in_place_cast_refusal_after_an_accepted_call(op, ok, refused):
    """A result a position cannot hold: the CPU's RuntimeError, also after a
    call with the same tensors' dtypes was accepted (the refusal then comes
    from the meta kernel, whose wording once failed with a TypeError on a list)."""
    for device in ("cpu", "tpu"):
        # (more elements than dtype_support asks the CPU about exactly)
        xs = [torch.ones(70, 70, dtype=torch.bool, device=device), torch.ones(2, dtype=torch.bool, device=device)]
        if isinstance(ok, list):
            xs = [torch.ones(2, device=device), torch.ones(3, dtype=torch.int64, device=device)]
        op(xs, ok)
        with pytest.raises(RuntimeError, match="can't be cast to the desired output type"):
            op(xs, refused)


@pytest.mark.parametrize("in_place", [False, True])
def test_foreach_broadcast_mismatch_worded_as_cpu(in_place):
    """The CPU's loop names the first position whose sizes clash (tensors
    too large for dtype_support to ask the CPU: the meta kernel's wording)."""
    op = torch._foreach_addcmul_ if in_place else torch._foreach_addcmul
    for device in ("cpu", "tpu"):
        xs = [torch.ones(70, 70, device=device), torch.ones(70, 70, device=device)]
        t1 = [torch.ones(70, 1, device=device), torch.ones(69, 1, device=device)]
        t2 = [torch.ones(1, 70, device=device), torch.ones(1, 69, device=device)]
        with pytest.raises(RuntimeError, match=r"^The size of tensor a \(70\) must match the size of tensor b "
                                               r"\(69\) at non-singleton dimension 0$"):
            op(xs, t1, t2, scalars=[1.0, 2.0])


@pytest.mark.parametrize("dtype,call,error", [
    (torch.int64, torch._foreach_addcdiv, "Integer division with addcdiv is no longer supported"),
    (torch.bool, torch._foreach_addcdiv, "Integer division with addcdiv is no longer supported"),
    (torch.bool, torch._foreach_addcmul, "not implemented for 'Bool'"),
])
def test_foreach_packed_scalars_refusals_as_cpu(dtype, call, error):
    """The CPU's dtype refusals with a packed scalars tensor, for tensors too
    large for dtype_support's exact stand-ins (their scalars stay as given;
    the meta kernel reads them on the CPU)."""
    for device in ("cpu", "tpu"):
        xs = [torch.ones(70, 70, dtype=dtype, device=device) for _ in range(2)]
        with pytest.raises((RuntimeError, NotImplementedError), match=error):
            call(xs, xs, xs, torch.tensor([1, 2]))


@pytest.mark.parametrize("call", [
    lambda f, c: torch._foreach_clamp_min(f, 1j),
    lambda f, c: torch._foreach_clamp_max(f, [1j, 1.0]),
    lambda f, c: torch._foreach_clamp_max_(c, 1j),
    lambda f, c: torch._foreach_clamp_min(c, [1j, 2j]),
    lambda f, c: torch._foreach_maximum(c, [1, 2.0 + 1j]),
    lambda f, c: torch._foreach_minimum_(f, 1j),
    lambda f, c: torch.clamp_min(f[0], 1j),
    lambda f, c: torch.clamp(c[0], max=0.5 + 1j),
], ids=["float-by-complex", "float-by-complex-list", "complex-in-place", "complex-by-complex-list",
        "maximum-by-complex-list", "minimum-by-complex", "single-float-by-complex", "single-complex-by-complex"])
def test_foreach_clamp_by_a_complex_number_refused_as_cpu(call):
    # (the dtype check's float stand-ins fail too with a complex number: it cannot tell;
    # a list's maximum/minimum by numbers is clamp on the CPU, and so is refused as it)
    for device in ("cpu", "tpu"):
        f, c = [torch.ones(2, device=device)] * 2, [torch.ones(2, dtype=torch.complex64, device=device)] * 2
        for _ in range(2):  # a refused signature is refused again
            with pytest.raises(NotImplementedError, match="clamp is not supported for complex types"):
                call(f, c)


def _adam_like_lists(device, n=6):
    gen = torch.Generator().manual_seed(1)
    shapes = [(4, 3), (3,), (2, 2), (5,), (3, 3), (1,)][:n]
    params = [torch.randn(s, generator=gen) for s in shapes]
    denoms = [torch.rand(s, generator=gen) + 0.5 for s in shapes]
    return [t.to(device) for t in params], [t.to(device) for t in denoms]


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_list_numbers_that_change_every_call_match_cpu_with_one_executable(mode):
    """AdamW's step sizes and bias corrections: a list of numbers, new each
    step.  Strict mode packs them into one array per kind
    (ops/list_numbers.py); results stay the CPU's bit for bit, ints and
    floats, and the numbers' values never recompile."""
    cpu_p, cpu_d = _adam_like_lists("cpu")
    tpu_p, tpu_d = _adam_like_lists("tpu")
    kernel = registry.KERNELS[registry.resolve("_foreach_addcdiv_.ScalarList")]
    earlier = set(map(id, kernel.cache.values()))  # (other tests' entries, in this worker)
    with torch.tpu.set_eager_mode(mode):
        for step in range(1, 5):
            sizes = [-1e-3 / (1 - 0.9 ** (step + i)) for i in range(len(cpu_p))]
            counts = [step + i for i in range(len(cpu_p))]  # ints: int64 numbers, weakly typed as before
            for device_p, device_d in ((cpu_p, cpu_d), (tpu_p, tpu_d)):
                torch._foreach_addcdiv_(device_p, device_d, device_d, sizes)
                torch._foreach_div_(device_d, counts)
                torch._foreach_mul_(device_d, [float(c) for c in counts])
        for a, b in zip(cpu_p + cpu_d, tpu_p + tpu_d):
            torch.testing.assert_close(b.cpu(), a, rtol=0, atol=0)
    entries = [e for e in kernel.cache.values()
               if isinstance(e.fn, registry.list_numbers._Packed) and id(e) not in earlier]
    if mode == "strict":  # (the params are updated in place: the donating executable runs)
        assert len(entries) == 1 and entries[0].donor is not None
        assert entries[0].fn.run._cache_size() + entries[0].donor[0].run._cache_size() == 1


def test_list_numbers_reach_the_executable_as_one_array():
    """A strict foreach call with a list of numbers passes the executable its
    tensors and one float64 array (one transfer, not one per number), on the
    native entry's path as on the Kernel's."""
    params, denoms = _adam_like_lists("tpu", n=5)  # (lists no other test passes: a new entry)
    sizes = [0.5 + i for i in range(len(params))]
    kernel = registry.KERNELS[registry.resolve("_foreach_addcdiv_.ScalarList")]
    earlier = set(map(id, kernel.cache.values()))  # (other tests' entries, in this worker)
    with torch.tpu.set_eager_mode("strict"):
        torch._foreach_addcdiv_(params, denoms, denoms, sizes)
        entry, = [e for e in kernel.cache.values() if id(e) not in earlier]
        packed = [entry.fn, entry.donor[0]]  # (copying, donating: the second runs here)
        assert all(isinstance(p, registry.list_numbers._Packed) for p in packed)
        seen, real = [], [p.run for p in packed]
        for p, run in zip(packed, real):
            p.run = lambda *a, run=run: (seen.append(a), run(*a))[1]
        try:
            torch._foreach_addcdiv_(params, denoms, denoms, [s * 2 for s in sizes])
        finally:
            for p, run in zip(packed, real):
                p.run = run
    assert len(seen) == 1
    *arrays, numbers = seen[0]
    assert len(arrays) == 3 * len(params)  # (the written and read lists' buffers)
    assert numbers.dtype == np.float64 and numbers.tolist() == [s * 2 for s in sizes]


def test_few_or_unpackable_list_numbers_stay_arguments():
    # (below list_numbers.MIN_NUMBERS a stand-in costs more than the transfers;
    # bools and complex numbers are passed as they always were)
    for numbers in ([2.0, 3.0], [True, False, True, False], [1j, 2j, 1j, 2j]):
        xs = [torch.ones(2, dtype=torch.complex64) for _ in numbers]
        got = torch._foreach_mul([x.to("tpu") for x in xs], numbers)
        kernel = registry.KERNELS[registry.resolve("_foreach_mul.ScalarList")]
        assert not any(isinstance(e.fn, registry.list_numbers._Packed) for e in kernel.cache.values())
        for a, b in zip(torch._foreach_mul(xs, numbers), got):
            torch.testing.assert_close(b.cpu(), a, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("op,single", [(torch._foreach_add, torch.add), (torch._foreach_sub, torch.sub)],
                         ids=["add", "sub"])
def test_foreach_alpha_read_as_the_single_tensor_kernel_reads_it(op, single, dtype):
    """_foreach_add/_sub(xs, ys, alpha=...) give what add/sub give on each
    pair, bit for bit: alpha rounded to a half result's dtype first, as the
    CPU's add kernel reads it (PyTorch's test_foreach parity found the
    float16/bfloat16 lists computing with alpha unrounded)."""
    gen = torch.Generator().manual_seed(0)
    xs = [torch.randn(20, 20, generator=gen).to(dtype) for _ in range(3)]
    ys = [torch.randn(20, 20, generator=gen).to(dtype) for _ in range(3)]
    tx, ty = [x.to("tpu") for x in xs], [y.to("tpu") for y in ys]
    for alpha in (3.14, 0.1, 1):
        for got, x, y in zip(op(tx, ty, alpha=alpha), tx, ty):
            torch.testing.assert_close(got.cpu(), single(x, y, alpha=alpha).cpu(), rtol=0, atol=0)
        eps = torch.finfo(dtype).eps
        for got, x, y in zip(op(tx, ty, alpha=alpha), xs, ys):  # (the CPU's scalar tail rounds differently: an ulp)
            torch.testing.assert_close(got.cpu(), single(x, y, alpha=alpha), rtol=2 * eps, atol=eps)


_NUMBER = 0.4473744101645425  # (not a float16/bfloat16 value: rounding it first shows)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("name", ["add", "sub", "mul", "div", "pow", "clamp_min", "clamp_max"])
@pytest.mark.parametrize("variant", ["Scalar", "ScalarList", "Tensor"])
def test_foreach_number_read_as_the_single_tensor_kernel_reads_it(variant, name, dtype):
    """A half list and a number (or a 0-d tensor): each position as the
    single-tensor op computes it, bit for bit -- the number rounded to the
    list's dtype first where the CPU's kernel casts it (add, sub, pow, clamp;
    not mul's or div's) -- and add/sub as the CPU's lists (PyTorch's
    test_foreach parity found the lists adding the number unrounded)."""
    gen = torch.Generator().manual_seed(0)
    # (5 tensors: a list of numbers that long is packed, ops/list_numbers.py)
    cpu = [(torch.randn(7, 9, generator=gen).abs() * 8 + 0.1).to(dtype) for _ in range(5)]
    tpu = [x.to("tpu") for x in cpu]
    numbers = [_NUMBER + i for i in range(len(cpu))]
    other = {"Scalar": _NUMBER, "ScalarList": numbers, "Tensor": torch.tensor(_NUMBER)}[variant]
    got = getattr(torch, f"_foreach_{name}")(tpu, other)
    single = getattr(torch, name)
    for i, (g, x) in enumerate(zip(got, tpu)):
        each = numbers[i] if variant == "ScalarList" else other
        torch.testing.assert_close(g.cpu(), single(x, each).cpu(), rtol=0, atol=0)
    if name in ("add", "sub"):
        for g, want in zip(got, getattr(torch, f"_foreach_{name}")(cpu, other)):
            torch.testing.assert_close(g.cpu(), want, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("variant", ["Scalar", "ScalarList"])
def test_foreach_mul_in_place_rounds_its_number_as_cpu(variant, dtype):
    """In place, a half list times a number is the CPU's mul_.Scalar per
    tensor, which rounds the number to the dtype first (out of place: not).
    Every foreach optimizer scales a state list in place (Adam's
    ``_foreach_mul_(exp_avg_sqs, beta2)``): PyTorch's test_optim found a
    float16 Adam's exp_avg_sq an ulp off the CPU's."""
    gen = torch.Generator().manual_seed(0)
    cpu = [(torch.rand(64, generator=gen) * 3).to(dtype) for _ in range(3)]
    numbers = [0.999, 1 / 3, _NUMBER]
    other = numbers if variant == "ScalarList" else 0.9
    tpu = [x.to("tpu") for x in cpu]
    out_of_place = torch._foreach_mul(tpu, other)
    torch._foreach_mul_(tpu, other)
    for i, (got, x) in enumerate(zip(out_of_place, cpu)):
        assert torch.equal(got.cpu(), x * (numbers[i] if variant == "ScalarList" else other))
    torch._foreach_mul_(cpu, other)
    for got, want in zip(tpu, cpu):
        assert torch.equal(got.cpu(), want)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("name", ["addcmul", "addcdiv"])
@pytest.mark.parametrize("in_place", [False, True], ids=["out-of-place", "in-place"])
def test_foreach_pointwise_casts_another_dtype_to_the_list_dtype_as_cpu(in_place, name, dtype):
    """A half list's addcmul/addcdiv by 0-d float32 tensors (ASGD's mus) casts
    them to the half dtype first, as the single-tensor op on each position does
    on the CPU (it multiplied by them unrounded: PyTorch's test_optim found
    ASGD's foreach ax off on half params)."""
    gen = torch.Generator().manual_seed(0)
    xs = [torch.rand(64, generator=gen).to(dtype) for _ in range(3)]
    ys = [torch.rand(64, generator=gen).to(dtype) + 0.5 for _ in range(3)]
    mus = [torch.tensor(v) for v in (0.3, 1 / 3, _NUMBER)]

    def run(device):
        x, y, m = ([t.to(device) for t in ts] for ts in (xs, ys, mus))
        if in_place:
            getattr(torch, f"_foreach_{name}_")(x, y, m)
            return [t.cpu() for t in x]
        return [t.cpu() for t in getattr(torch, f"_foreach_{name}")(x, y, m, 0.7)]
    for got, want in zip(run("tpu"), run("cpu")):
        assert got.dtype == want.dtype and torch.equal(got, want)


@pytest.mark.parametrize("call", [lambda xs: torch._foreach_sub(xs, True), lambda xs: torch._foreach_sub_(xs, True),
                                  lambda xs: torch._foreach_sub([x > 0 for x in xs], [x > 1 for x in xs])],
                         ids=["bool-number", "bool-number-in-place", "bool-lists"])
def test_foreach_sub_of_bools_refused_as_cpu(call):
    for device in ("cpu", "tpu"):
        xs = [torch.ones(3, device=device, dtype=torch.float64) for _ in range(2)]
        with pytest.raises(RuntimeError, match="Subtraction, the `-` operator, with (a bool tensor|two bool tensors) is not"):
            call(xs)


@pytest.mark.parametrize("ord", [0, -1, -0.5, float("-inf"), 0.5, 3, float("inf")])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_foreach_norm_of_any_order_matches_cpu(ord, dtype):
    # clip_grad_norm_'s norm_type reaches _foreach_norm as it is: order 0 counts
    # the nonzeros and -inf takes the smallest magnitude, as linalg.vector_norm
    values = [[1.5, 0.0, -2.0, 0.25], [0.0, -3.0], [4.0]]
    cpu = torch._foreach_norm([torch.tensor(v, dtype=dtype) for v in values], ord)
    tpu = torch._foreach_norm([torch.tensor(v, dtype=dtype, device="tpu") for v in values], ord)
    for c, t in zip(cpu, tpu):
        assert t.dtype == c.dtype
        torch.testing.assert_close(t.cpu(), c, rtol=1e-6 if dtype != torch.bfloat16 else 1e-2, atol=0)
