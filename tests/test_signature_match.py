"""A cached kernel's later calls are checked against its signature by a
matcher (torch_tpu/ops/signature_match.py): what it accepts must be exactly
what the signature allows, in strict and fused mode, or a call would run an
executable built for another geometry."""
import threading

import pytest
import torch

from torch_tpu import native
from torch_tpu.eager import fusion
from torch_tpu.eager.fusion import LazyBuffer
from torch_tpu.ops import registry, signature_match
from torch_tpu.storage import numbers

MODES = ["strict", "fused"]


def _kernel(op):
    return registry.KERNELS[op]


def _matcher_answers(monkeypatch):
    """From now on, whether each matcher asked took its call (a list, in order).
    (The native kernel entry is made to call each matcher's check instead of
    making its checks in C++: test_straight_line_matchers_answer_as_the_
    generic_check and test_native_leaf_check_answers_as_the_python_loop hold
    the two to the same answers.)"""
    answers = []
    me = threading.get_ident()  # (a thread an earlier test left running may call kernels too)

    def spied(m):
        check = m.check

        def spy(args, fused):
            found = check(args, fused)
            if threading.get_ident() == me:
                answers.append(found is not None)
            return found
        monkeypatch.setattr(m, "check", spy)
        monkeypatch.setattr(m, "checks", None)
        return m
    kernels = {k for k in registry.KERNELS.values() if isinstance(k, registry.Kernel)}
    for kernel in kernels:  # the matchers there are, and those made later
        for hit in list(kernel.cache.by_fn.values()):
            for m in hit[2]:
                spied(m)
    make = signature_match.make
    monkeypatch.setattr(signature_match, "make", lambda *a: (lambda m: m and spied(m))(make(*a)))
    return answers


def _run(mode, fn, *args):
    with torch.tpu.set_eager_mode(mode):
        out = fn(*args)
        return out.cpu() if isinstance(out, torch.Tensor) else [o.cpu() for o in out]


@pytest.mark.parametrize("mode", MODES)
def test_calls_of_other_geometry_are_not_taken_for_the_cached_one(mode):
    base = torch.randn(6, 6)
    x = base.to("tpu")
    y = torch.randn(6, 6).to("tpu")
    for _ in range(3):  # cache add's signature and its matcher
        _run(mode, torch.add, x, y)
    others = {
        "transposed": (x.t(), base.t()),
        "rows of a larger buffer": (torch.randn(7, 6).to("tpu")[1:], None),
        "negative view": (torch._neg_view(x), torch._neg_view(base)),
        "float64": (x.double(), base.double()),
        "needs grad": (x.clone().requires_grad_(), base.clone()),
        "parameter": (torch.nn.Parameter(x.clone()), base.clone()),
    }
    for name, (a, a_cpu) in others.items():
        if a_cpu is None:
            a_cpu = a.cpu()
        expected = a_cpu.detach() + y.cpu()
        got = _run(mode, torch.add, a, y)
        torch.testing.assert_close(got.detach(), expected, rtol=0, atol=0, msg=name)
        torch.testing.assert_close(_run(mode, torch.add, x, y), base + y.cpu(), rtol=0, atol=0)


@pytest.mark.parametrize("mode", MODES)
def test_a_view_at_another_offset_of_the_same_buffer_reads_its_own_elements(mode):
    base = torch.randn(8, 4)
    big = base.to("tpu")
    y = torch.randn(4, 4).to("tpu")
    for _ in range(3):
        _run(mode, torch.mul, big[:4], y)
    for start in (1, 4, 0):
        torch.testing.assert_close(_run(mode, torch.mul, big[start:start + 4], y), base[start:start + 4] * y.cpu(),
                                   rtol=0, atol=0)


@pytest.mark.parametrize("mode", MODES)
def test_foreach_lists_are_matched_tensor_by_tensor(mode):
    cpu = [torch.randn(3, 4), torch.randn(5), torch.randn(2, 2)]
    tpu = [t.to("tpu") for t in cpu]
    for _ in range(3):
        _run(mode, torch._foreach_mul, tpu, 2.0)
    swapped = [tpu[0], tpu[1].flip(0), tpu[2].t()]  # the same shapes, other geometry
    got = _run(mode, torch._foreach_mul, swapped, 2.0)
    for g, c in zip(got, [cpu[0] * 2, cpu[1].flip(0) * 2, cpu[2].t() * 2]):
        torch.testing.assert_close(g, c, rtol=0, atol=0)
    shorter = _run(mode, torch._foreach_mul, tpu[:2], 2.0)
    assert len(shorter) == 2


def test_strict_checks_against_the_kernels_recent_signatures(monkeypatch):
    # (shapes no other test adds: a signature an earlier test on this worker
    # left, filed by shape or with another matcher, would change which
    # matcher is asked first)
    x, y, w = torch.randn(9, 9).to("tpu"), torch.randn(9, 9).to("tpu"), torch.randn(5, 11).to("tpu")
    kernel = _kernel(torch.ops.aten.add.Tensor)
    with torch.tpu.set_eager_mode("strict"):
        x + y  # its signature: built (or found), remembered first, with a matcher
        hit = kernel.cache.recent[0]
        assert kernel.cache.by_fn[hit[0].fn] is hit and len(hit[2]) >= 1
        answers = _matcher_answers(monkeypatch)
        x + y
        assert answers == [True]
        answers.clear()
        torch.testing.assert_close((w + w).cpu(), w.cpu() * 2, rtol=0, atol=0)
        assert False in answers  # refused: found or built under its own signature
        assert kernel.cache.recent[0] is not hit and kernel.cache.recent[1] is hit
        answers.clear()
        torch.testing.assert_close((x + y).cpu(), x.cpu() + y.cpu(), rtol=0, atol=0)
        assert answers[-1] is True  # the second recent signature's matcher took it
        torch.testing.assert_close((x + y.t()).cpu(), x.cpu() + y.cpu().t(), rtol=0, atol=0)


@pytest.mark.parametrize("mode", MODES)
def test_a_tensor_passed_twice_is_matched_as_the_same_tensor(mode, monkeypatch):
    # PyTorch's tensor check refuses a tensor given twice; the matcher checks
    # the distinct tensors and that each repeat is that same object, so
    # x * x (and AdamW's addcmul of the gradients with themselves) stays on
    # the matched path, and x * y is not taken for x * x nor the other way
    base, other = torch.randn(64, 80), torch.randn(64, 80)  # (past the size buckets: buckets.py)
    x, y = base.to("tpu"), other.to("tpu")
    answers = _matcher_answers(monkeypatch)
    for _ in range(3):
        _run(mode, torch.mul, x, x)
    assert answers and answers[-1] is True
    for a, b, expected in [(x, y, base * other), (x, x, base * base), (y, x, other * base), (y, y, other * other)]:
        torch.testing.assert_close(_run(mode, torch.mul, a, b), expected, rtol=0, atol=0)
    grads = [torch.randn(4).to("tpu") for _ in range(3)]
    state = [torch.zeros(4).to("tpu") for _ in range(3)]
    for _ in range(3):
        answers.clear()
        with torch.tpu.set_eager_mode(mode):
            torch._foreach_addcmul_(state, grads, grads, value=0.5)
    assert answers and answers[-1] is True
    for s, g in zip(state, grads):
        torch.testing.assert_close(s.cpu(), 1.5 * g.cpu() * g.cpu(), rtol=1e-6, atol=0)


@pytest.mark.parametrize("mode", MODES)
def test_a_loop_over_rows_is_matched_at_every_offset(mode, monkeypatch):
    """Rows of one buffer are views read at a run-time offset: one executable
    serves every row, and a matcher made at one row takes the others (its
    entry chosen by the row's offset), so a loop over more rows than a
    kernel keeps recent signatures never builds a signature again; reads
    and in-place writes give the CPU's values."""
    base = torch.arange(48.0).reshape(12, 4)
    x = base.to("tpu")
    slow = []
    fast_key = registry.Kernel._fast_key

    def run():
        acc = x[0] * 1.0
        for t in range(12):
            acc = acc + x[t] * 2.0
        return acc

    with torch.tpu.set_eager_mode(mode):
        for _ in range(3):
            run().cpu()
        monkeypatch.setattr(registry.Kernel, "_fast_key", lambda self, *a: slow.append(self.name) or fast_key(self, *a))
        got = run().cpu()
        assert slow == [], slow
        for _ in range(2):
            for t in range(0, 12, 3):
                x[t].mul_(0.5)
        got_rows = x.cpu()
    want = base[0] * 1.0
    for t in range(12):
        want = want + base[t] * 2.0
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    for t in range(0, 12, 3):
        base[t] *= 0.25
    torch.testing.assert_close(got_rows, base, rtol=0, atol=0)


def test_a_pending_fused_result_passed_in_strict_mode_is_computed_first():
    cpu = [torch.randn(3), torch.randn(3)]
    tpu = [t.to("tpu") for t in cpu]
    with torch.tpu.set_eager_mode("strict"):
        for _ in range(3):
            torch._foreach_add(tpu, tpu)
    with torch.tpu.set_eager_mode("fused"):
        pending = [t * 3 for t in tpu]  # recorded, not run
    with torch.tpu.set_eager_mode("strict"):
        got = torch._foreach_add(pending, tpu)
    for g, c in zip(got, cpu):
        torch.testing.assert_close(g.cpu(), c * 3 + c, rtol=0, atol=0)


def test_compiled_graph_inputs_of_other_geometry_are_not_taken_for_the_cached_ones():
    f = torch.compile(lambda a, b: a * 2 + b, backend="tpu", dynamic=False)
    base, other = torch.randn(4, 4), torch.randn(4, 4)
    x, y = base.to("tpu"), other.to("tpu")
    for _ in range(3):  # the graph's signature and its input matcher
        torch.testing.assert_close(f(x, y).cpu(), base * 2 + other, rtol=0, atol=0)
    cases = {
        "negative view": (torch._neg_view(x), -base),
        "transposed": (x.t(), base.t()),
        "a new tensor": (torch.ones(4, 4).to("tpu"), torch.ones(4, 4)),
        "rows of a larger buffer": (torch.cat([x, x]).reshape(8, 4)[4:], base),
    }
    for name, (a, a_cpu) in cases.items():
        torch.testing.assert_close(f(a, y).cpu(), a_cpu * 2 + other, rtol=0, atol=0, msg=name)
        torch.testing.assert_close(f(x, y).cpu(), base * 2 + other, rtol=0, atol=0, msg=name)


def test_compiled_graph_inputs_that_are_permuted_whole_buffers_are_matched(monkeypatch):
    """A backward's transposed weights and permuted heads: each its storage's
    whole buffer, so a later call is checked by the matcher, not input by
    input, and a call of another layout still runs the graph of its own."""
    from torch_tpu.compile import backend
    f = torch.compile(lambda a, b: a * 2 + b, backend="tpu", dynamic=False)
    base, other = torch.randn(2, 3, 4), torch.randn(4, 2, 3)
    x, y = base.to("tpu"), other.to("tpu")
    z = torch.randn(4, 3, 2)
    want = base.permute(2, 0, 1) * 2 + other
    for _ in range(3):
        torch.testing.assert_close(f(x.permute(2, 0, 1), y).cpu(), want, rtol=0, atol=0)
    slow = []
    real = backend._input_buffer
    monkeypatch.setattr(backend, "_input_buffer", lambda *a, **k: slow.append(1) or real(*a, **k))
    torch.testing.assert_close(f(x.permute(2, 0, 1), y).cpu(), want, rtol=0, atol=0)
    assert not slow  # matched
    cases = {
        "row-major, the same size": (x.permute(2, 0, 1).contiguous(), base.permute(2, 0, 1)),
        "another buffer's transpose": (z.to("tpu").transpose(1, 2), z.transpose(1, 2)),
        "a flat buffer, the same strides": (x.reshape(-1).clone().view(2, 3, 4).permute(2, 0, 1),
                                            base.permute(2, 0, 1)),
        "a permuted part of a larger buffer": (torch.cat([x, x])[2:].permute(2, 0, 1), base.permute(2, 0, 1)),
    }
    for name, (a, a_cpu) in cases.items():
        torch.testing.assert_close(f(a, y).cpu(), a_cpu * 2 + other, rtol=0, atol=0, msg=name)
        torch.testing.assert_close(f(x.permute(2, 0, 1), y).cpu(), want, rtol=0, atol=0, msg=name)


def test_compiled_graph_called_with_lazy_negations_reads_their_values():
    f = torch.compile(lambda a: a + 1, backend="tpu", dynamic=False)
    for _ in range(3):
        base = torch.randn(3, 3)
        torch.testing.assert_close(f(torch._neg_view(base.to("tpu"))).cpu(), -base + 1, rtol=0, atol=0)


@pytest.mark.skipif(native.geometry_guard() is None or signature_match.TensorGuards is None,
                    reason="native helper not built")
def test_native_tensor_check_answers_as_pytorchs_tensor_guards():
    """The native helper's tensor check (native/geometry.cpp), which matchers
    use in place of Dynamo's TensorGuards, says of every pair of these what
    TensorGuards says."""
    base = torch.randn(4, 6).to("tpu")
    tensors = [base, torch.randn(4, 6).to("tpu"), base.t(), base[1:], base[:, ::2], base.double(),
               base.clone().requires_grad_(), torch.nn.Parameter(base.clone()), torch._neg_view(base),
               torch.randn(4, 6, dtype=torch.complex64).to("tpu"),
               torch.randn(4, 6, dtype=torch.complex64).to("tpu").conj(), base.reshape(24), base[0, 0],
               torch.randn(4, 6)]
    made = native.geometry_guard()
    for a in tensors:
        ours = made(a)
        theirs = signature_match.TensorGuards(a, dynamic_dims_sizes=[list(a.shape)],
                                              dynamic_dims_strides=[list(a.stride())])
        for b in tensors:
            assert ours.check(b) == theirs.check(b), (a.shape, a.stride(), a.dtype, b.shape, b.stride(), b.dtype)
    pair = made(base, tensors[1])
    assert pair.check(tensors[1], base) and not pair.check(base) and not pair.check(base, 1.0)
    with pytest.raises(TypeError, match="every argument is a tensor"):
        made(base, 1.0)


@pytest.mark.parametrize("mode", MODES)
def test_without_a_cpp_tensor_check_calls_take_the_slow_way(mode, monkeypatch):
    monkeypatch.setattr(signature_match, "_CAN_GUARD", False)
    base = torch.randn(3, 7)
    x = base.to("tpu")
    kernel = _kernel(torch.ops.aten.sub.Tensor)
    for _ in range(4):
        torch.testing.assert_close(_run(mode, torch.sub, x, x.flip(1)), base - base.flip(1), rtol=0, atol=0)
    torch.testing.assert_close(_run(mode, torch.sub, x.flip(0), x), base.flip(0) - base, rtol=0, atol=0)
    assert all(not hit[2] for hit in kernel.cache.by_fn.values() if hit[1][0][0][1].size == (3, 7))
    f = torch.compile(lambda a: a - 1, backend="tpu", dynamic=False)
    for _ in range(3):
        torch.testing.assert_close(f(x).cpu(), base - 1, rtol=0, atol=0)


def test_strict_finds_a_signature_among_many_of_the_same_shapes(monkeypatch):
    # a training step calls mm with more signatures than the kernel's recent
    # list keeps (forward and backward matmuls, transposed operands); each
    # call is still matched (by its arguments' shapes), never rebuilt
    a, b = torch.randn(8, 8), torch.randn(8, 16)
    x, w = a.to("tpu"), b.to("tpu")
    calls = [(x, w), (x.t(), w), (x, x), (x.t(), x), (x, x.t()), (x.t(), x.t()), (w.t(), x), (w.t(), w)]
    expected = [a @ b, a.t() @ b, a @ a, a.t() @ a, a @ a.t(), a.t() @ a.t(), b.t() @ a, b.t() @ b]
    kernel = _kernel(torch.ops.aten.mm.default)
    slow = []
    fast_key = registry.Kernel._fast_key
    with torch.tpu.set_eager_mode("strict"):
        for _ in range(2):
            for args in calls:
                torch.mm(*args)
        monkeypatch.setattr(registry.Kernel, "_fast_key",
                            lambda self, *a: slow.append(self.name) or fast_key(self, *a))
        for _ in range(2):
            got = [torch.mm(*args).cpu() for args in calls]
    assert len(kernel.cache.recent) < len(calls) and slow == []
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e)


def test_straight_line_matchers_answer_as_the_generic_check(monkeypatch):
    """A call without lists is checked by code made for its signature
    (signature_match._unrolled), and with the native helper by the kernel
    entry in C++ (native/leaves.cpp's matcher_inputs, from the matcher's
    ``checks``): each must take and refuse exactly what the generic loop
    does (in Python, and in C++), with the same inputs."""
    x, y = torch.randn(4, 3).to("tpu"), torch.randn(4, 3).to("tpu")
    with torch.tpu.set_eager_mode("fused"):
        pending = x * 3  # a LazyBuffer in its storage until computed
    other = [x, y, x.t(), x[1:], x.double(), torch.randn(3, 4).to("tpu"), y.clone(), pending,
             x[1], y[2], x[:, 1], 2.0, 2, 3.0, 3, -0.0, float("nan"), 2 ** 70, True, 1j, None]
    calls = {"mul.Tensor": lambda a, b: a * b, "add.Tensor": lambda a, b: a + b,
             "sum.dim_IntList": lambda a, b: a.sum(1)}
    loops = {None, signature_match._match_leaves}
    call_check = native.call_matcher()
    leaf_refs = (LazyBuffer, fusion.resolve, numbers.on_device, numbers._floats, numbers._ints)
    for v in other[11:] * 2:  # each number's device copy made now (on_device keeps it at its second sight)
        numbers.on_device(v)
    seen = native_seen = 0
    for name, call in calls.items():
        for _ in range(3):  # (2.0 and 2 seen thrice: kept on the device)
            call(x, 2.0 if name == "mul.Tensor" else y)
            call(x, 2 if name == "mul.Tensor" else y)
            call(x, x)
            # rows: views read at a run-time offset (any offset passes)
            call(*((x[1:3], y) if name == "sum.dim_IntList" else (x[2], y[1])))
        kernel = registry.KERNELS[registry.resolve(name)]
        matchers = [m for hit in kernel.cache.by_fn.values() for m in hit[2] if m.check != m.match]
        with torch._C._AutoDispatchBelowADInplaceOrView():  # (as inside the dispatcher)
            for m in matchers:
                for a in other[:11]:
                    for b in other:
                        args = (a, b, [1], False, None)[:m.nargs]
                        for fused in (False, True):
                            got = [m.check(args, fused)]
                            if call_check is not None:
                                got.append(call_check(m.checks, args, fused, *leaf_refs))
                                native_seen += 1
                            for loop in loops:  # m.match: the generic loop, its leaves in Python or C++
                                monkeypatch.setattr(signature_match, "_match_leaves", loop)
                                want = m.match(args, fused)
                                seen += 1
                                for g in got:
                                    assert (want is None) == (g is None), (name, m.leaves, args, fused)
                                    if want is not None:
                                        assert len(want) == len(g) and all(
                                            w is v or (type(w) is type(v) and w == v) for w, v in zip(want, g))
    assert seen > 100 * len(loops)
    assert call_check is None or native_seen * len(loops) == seen


@pytest.mark.skipif(signature_match._match_leaves is None, reason="native helper not built")
def test_native_leaf_check_answers_as_the_python_loop(monkeypatch):
    """The per-leaf check in C++ (native/leaves.cpp), and the kernel entry's
    check of a whole call with lists (its matcher_inputs), take and refuse
    exactly what signature_match.match_leaves does, with the same inputs."""
    a, b = torch.randn(4, 3).to("tpu"), torch.randn(5).to("tpu")
    c, d = torch.randn(4, 3).to("tpu"), torch.randn(5).to("tpu")
    with torch.tpu.set_eager_mode("fused"):
        pending = [a * 2, b * 2]  # LazyBuffers in their storages until the next flush
    lists = [[a, b], [c, d], [a, a], [a.t(), b], [a[1:], b], [a.double(), b], [b, a], [a, b[1:]], pending,
             [a, b, a], [a], (a, b)]
    scalars = [2.0, 2, True, [0.5, 0.5], [1, 2], [0.5, 0.5, 0.5]]
    # per op: its call, and the argument tuples to check (lists of tensors and numbers swapped in)
    ops = {
        "_foreach_mul.Scalar": (lambda: torch._foreach_mul([a, b], 2.0),
                                [(xs, s) for xs in lists for s in scalars]),
        "_foreach_add.List": (lambda: torch._foreach_add([a, b], [c, d]),
                              [(xs, ys) for xs in lists for ys in lists]),
        "_foreach_addcdiv_.ScalarList": (lambda: torch._foreach_addcdiv_([a.clone(), b.clone()], [c, d], [c, d],
                                                                         [0.5, 0.5]),
                                         [(xs, ys, ys, s) for xs in lists for ys in lists[:4] for s in scalars]),
        "cat.default": (lambda: torch.cat([a, c], 0), [(xs, dim) for xs in lists for dim in (0, 1, 0.0)]),
    }
    for v in scalars[:2] * 2:  # each number's device copy made now (on_device keeps it at its second sight)
        numbers.on_device(v)
    call_check = native.call_matcher()
    leaf_refs = (LazyBuffer, fusion.resolve, numbers.on_device, numbers._floats, numbers._ints)
    seen = taken = 0
    native_loop = signature_match._match_leaves
    for name, (call, variants) in ops.items():
        kernel = registry.KERNELS[registry.resolve(name)]
        before = {id(m) for hit in kernel.cache.by_fn.values() for m in hit[2]}
        for _ in range(3):
            call()
        matchers = [m for hit in kernel.cache.by_fn.values() for m in hit[2]
                    if id(m) not in before and m.list_lens is not None]
        assert matchers, name
        with torch._C._AutoDispatchBelowADInplaceOrView():  # (as inside the dispatcher)
            for m in matchers:
                for args in variants:
                    for fused in (False, True):
                        monkeypatch.setattr(signature_match, "_match_leaves", None)
                        want = m.match(args, fused)
                        monkeypatch.setattr(signature_match, "_match_leaves", native_loop)
                        got = [m.match(args, fused)]
                        if call_check is not None:  # the kernel entry's check of the whole call
                            got.append(call_check(m.checks, args, fused, *leaf_refs))
                        seen += 1
                        for g in got:
                            assert (want is None) == (g is None), (name, args, fused)
                            if want is not None:
                                assert len(want) == len(g) and all(
                                    w is v or (type(w) is type(v) and w == v) for w, v in zip(want, g))
                        taken += want is not None
    assert seen > 300 and taken > 10, (seen, taken)
    torch.tpu.synchronize()


@pytest.mark.skipif(signature_match._match_leaves is None, reason="native helper not built")
def test_native_graph_input_check_answers_as_the_python_loop(monkeypatch):
    """A compiled graph's input check (GraphMatcher) takes and refuses the
    same calls with the C++ leaf check as with its Python loop, computed
    pending results included."""
    import numpy as np
    a, b = torch.randn(4, 3).to("tpu"), torch.randn(5).to("tpu")
    with torch.tpu.set_eager_mode("fused"):
        pending = [a * 2, b * 2]
    expect = (((4, 3), np.dtype("float32")), ((5,), np.dtype("float32")))
    m = signature_match.graph_matcher((a, b, 3), (0, 1), expect, ((2, 3),))
    assert m is not None
    candidates = [a, b, a.t(), a[1:], a.double(), torch.randn(4, 3).to("tpu"), torch.randn(5).to("tpu"), *pending]
    native_loop = signature_match._match_leaves
    seen = taken = 0
    for x in candidates:
        for y in candidates:
            for n in (3, 4):
                for lazy in (True, False):
                    with torch.tpu.set_eager_mode("fused"):
                        monkeypatch.setattr(signature_match, "_match_leaves", None)
                        want = m.match((x, y, n), lazy)
                        monkeypatch.setattr(signature_match, "_match_leaves", native_loop)
                        got = m.match((x, y, n), lazy)
                    seen += 1
                    assert (want is None) == (got is None)
                    if want is not None:
                        taken += 1
                        assert len(want) == len(got) and all(w is g for w, g in zip(want, got))
    assert taken >= 8 and seen > 100, (seen, taken)


@pytest.mark.parametrize("mode", MODES)
def test_keyword_calls_match_only_their_own_names(mode):
    """searchsorted's out_int32=True and right=True are both one bool after
    the same two tensors: a call's keyword values are matched as leaves only
    against a signature with the same keyword names, or one would run the
    other's executable (int32 where int64 is due, left where right is)."""
    s, v = torch.tensor([1.0, 2.0, 3.0, 4.0]), torch.tensor([2.0, 3.5, 0.5])
    st, vt = s.to("tpu"), v.to("tpu")
    with torch.tpu.set_eager_mode(mode):
        for _ in range(3):
            for kw in ({"out_int32": True}, {"right": True}, {}):
                got, want = torch.searchsorted(st, vt, **kw).cpu(), torch.searchsorted(s, v, **kw)
                assert got.dtype == want.dtype and torch.equal(got, want), (kw, got, want)
