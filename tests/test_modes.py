"""The three eager modes run the same programs to the same results."""
import math
import os
import subprocess
import sys

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from torch_tpu.eager import fusion
from torch_tpu.storage import buffers

MODES = ["debug", "strict", "fused"]


def test_mode_names_and_aliases():
    M = torch.tpu.EagerMode
    assert M.STRICT is M.DEFER_NEVER
    assert M.DEBUG is M.DEFER_NEVER_AND_LAUNCH_BLOCKING
    assert M.FUSED is M.DEFER_AND_FUSE
    assert torch.tpu.eager_mode is M.STRICT  # the default
    with torch.tpu.set_eager_mode(M.FUSED):
        assert torch.tpu.eager_mode is M.FUSED
        with torch.tpu.set_eager_mode("debug"):
            assert torch.tpu.eager_mode is M.DEBUG
        assert torch.tpu.eager_mode is M.FUSED
    assert torch.tpu.eager_mode is M.STRICT
    torch.tpu.eager_mode = M.DEBUG
    try:
        assert torch.tpu.eager_mode is M.DEBUG
    finally:
        torch.tpu.eager_mode = M.STRICT


@pytest.mark.parametrize("env,expected", [
    ({"TORCH_TPU_DEFER_AND_FUSE": "1"}, "fused"),
    ({"TORCH_TPU_LAUNCH_BLOCKING": "1"}, "debug"),
    ({"TORCH_TPU_EAGER_MODE": "fused"}, "fused"),
    ({"TORCH_TPU_EAGER_MODE": "debug"}, "debug"),
    ({}, "strict"),
])
def test_mode_from_environment(env, expected):
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TORCH_TPU_")}
    r = subprocess.run([sys.executable, "-c", "import torch; print(torch.tpu.eager_mode.value)"],
                       env=dict(clean, **env), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == expected


def _program(x, w):
    """Views, in-place updates through views, reductions, a host read midway."""
    y = (x @ w).relu()
    y[:, 1:3].mul_(2)
    y.t()[0].add_(1)
    s = y.sum().item()
    z = y * s / 100 + x[:, :1]
    z.diagonal().zero_()
    return z, y.amax(dim=1)


@pytest.mark.parametrize("mode", MODES)
def test_program_matches_cpu_in_every_mode(mode):
    torch.manual_seed(0)
    x, w = torch.randn(6, 5), torch.randn(5, 5)
    want = _program(x.clone(), w)
    with torch.tpu.set_eager_mode(mode):
        got = _program(x.to("tpu"), w.to("tpu"))
        got = [g.cpu() for g in got]
    for g, c in zip(got, want):
        torch.testing.assert_close(g, c)


def _train(device, mode, steps=5):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    x, y = torch.randn(32, 8), torch.randint(0, 4, (32,))
    model, x, y = model.to(device), x.to(device), y.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    with torch.tpu.set_eager_mode(mode):
        for _ in range(steps):
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
    return losses, [p.detach().cpu() for p in model.parameters()]


@pytest.mark.parametrize("mode", MODES)
def test_training_matches_cpu_in_every_mode(mode):
    want_losses, want_params = _train("cpu", "strict")
    losses, params = _train("tpu", mode)
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(want_losses))
    for p, q in zip(params, want_params):
        torch.testing.assert_close(p, q)


def test_fused_chains_are_cached_across_steps():
    fusion.clear_cache()
    before = dict(fusion.stats.as_dict())
    _train("tpu", "fused", steps=6)
    after = fusion.stats.as_dict()
    misses = after["misses"] - before["misses"]
    hits = after["hits"] - before["hits"]
    # The first step differs (optimizer state is created), the second launches
    # its forward ahead of the loss read it learned from the first; from then
    # on every step reuses the same two executables.
    assert misses <= 4 and hits >= 6, after
    assert torch.tpu.eager_cache_stats()["hits"] == after["hits"]


def test_fused_defers_until_a_host_read():
    with torch.tpu.set_eager_mode("fused"):
        x = torch.ones(4, device="tpu")
        y = (x + 1) * 3
        assert fusion.pending_ops() >= 2
        assert y.sum().item() == 24.0
        assert fusion.pending_ops() == 0


def test_fused_host_read_runs_the_ops_it_needs_first_then_the_rest():
    with torch.tpu.set_eager_mode("fused"):
        x = torch.arange(4.0, device="tpu")
        h = x * 2
        loss = h.sum()
        later = h.exp() + (x - 1)  # needs h, which only the first chain computes
        del h                       # ... and which nothing holds any more
        before = fusion.stats.flushes
        assert loss.item() == 12.0
        assert fusion.stats.flushes - before == 2  # loss's chain, then the rest
        assert fusion.pending_ops() == 0
        torch.testing.assert_close(later.cpu(), torch.arange(4.0).mul(2).exp() + torch.arange(4.0) - 1)


def test_fused_launches_a_repeated_host_read_ahead_of_time():
    """A loop that reads the same value each iteration: from the second
    iteration the ops that value needs start when it is recorded, and the ops
    recorded after it stay pending, wired to the values just launched."""
    def iteration(x):
        h = x * 2
        loss = h.sum()
        launched = buffers.get_buffer(loss.untyped_storage()).value is not None
        later = h.exp() + (x - 1)  # reads h, which the early chain computed
        del h
        return loss, later, launched

    fusion.clear_cache()  # forget the read points earlier tests taught
    x0 = torch.arange(4.0)
    with torch.tpu.set_eager_mode("fused"):
        x = x0.to("tpu")
        before = fusion.stats.early_launches
        seen = []
        for _ in range(3):
            loss, later, launched = iteration(x)
            seen.append(launched)
            assert loss.item() == 12.0
            assert fusion.pending_ops() == 0  # the read started the rest too
            torch.testing.assert_close(later.cpu(), x0.mul(2).exp() + x0 - 1)
        assert seen == [False, True, True]
        assert fusion.stats.early_launches - before == 2


def test_fused_predicts_both_the_first_op_and_the_op_after_an_early_launch(monkeypatch):
    """A step whose loss read is launched ahead of time leaves no op pending
    twice: at its start (after the last read) and right after the early
    launch.  The two places are remembered apart, so from the third step on
    every op is the one recording predicts (none takes the slow path)."""
    from torch_tpu.ops import registry

    def step(x, w):
        loss = (x * w).sum()  # launched when recorded, from the second step on
        out = (w * 3 - x).mul(2)  # recorded after that launch
        loss.item()  # runs the rest
        return out

    fusion.clear_cache()
    slow = []
    fast_key = registry.Kernel._fast_key
    with torch.tpu.set_eager_mode("fused"):
        x, w = torch.randn(8).to("tpu"), torch.randn(8).to("tpu")
        for _ in range(3):
            step(x, w)
        monkeypatch.setattr(registry.Kernel, "_fast_key", lambda self, *a: slow.append(self.name) or fast_key(self, *a))
        before = fusion.stats.early_launches
        for _ in range(2):
            out = step(x, w)
        assert fusion.stats.early_launches - before == 2
        torch.testing.assert_close(out.cpu(), (w.cpu() * 3 - x.cpu()) * 2)
    assert slow == []


def test_fused_chain_packs_python_numbers_and_keeps_their_weak_types():
    """A chain's Python numbers travel packed (one array per kind): each keeps
    the weak type a Python number has, so half and int tensors stay half and
    int as in strict mode, and new values reuse the same executable."""
    def program(h, i, scale, shift):
        a = h * scale + shift        # float16 with Python floats: stays float16
        b = (i + shift) * 3          # int64 with a float: the default dtype; with an int: int64
        c = i * 7 - 2
        return a, b, c, a.float() * scale

    h0, i0 = torch.randn(5, generator=torch.Generator().manual_seed(0)).half(), torch.arange(5)
    misses = []
    for scale, shift in [(1.5, 0.25), (-3.0, 2.0 ** -20), (0.1, 7.0), (1e-3, -1e10)]:
        want = program(h0, i0, scale, shift)
        with torch.tpu.set_eager_mode("fused"):
            got = program(h0.to("tpu"), i0.to("tpu"), scale, shift)
            got = [t.cpu() for t in got]
        misses.append(fusion.stats.misses)
        for g, w in zip(got, want):
            assert g.dtype == w.dtype
            torch.testing.assert_close(g, w, rtol=0, atol=0)
    assert misses[-1] == misses[-3]  # (the second run launches ahead of its learned reads) new numbers, same chains


def test_fused_recording_of_a_repeated_program_checks_each_op_against_last_time():
    """An op recorded where the same program had an op before is checked
    against that op input by input: a program that starts the same and then
    is wired differently (another array, the same array twice, an int where a
    float was, a pending result of another op) still computes its own values."""
    gen = torch.Generator().manual_seed(0)
    a0, b0 = torch.randn(6, generator=gen), torch.randn(6, generator=gen)

    def learned(a, b):
        z = a * 2 + b
        return torch.clamp(z, -0.5, 2.0) + b, z * 3.0

    variants = [
        learned,
        lambda a, b: (lambda z: (torch.clamp(z, -0.5, 2.0) + a, z * 3.0))(a * 2 + a),   # a twice
        lambda a, b: (lambda z: (torch.clamp(z, -0.5, 2) + b, z * 3))(b * 2 + a),      # ints, swapped
        lambda a, b: (lambda z: (torch.clamp(z, -1, 2.0) + z, a * 3.0))(a * 2 + b),    # other results
        learned,
    ]
    for program in variants:
        want = program(a0, b0)
        with torch.tpu.set_eager_mode("fused"):
            for _ in range(2):  # the second time as a repeated program
                got = [t.cpu() for t in program(a0.to("tpu"), b0.to("tpu"))]
        for g, w in zip(got, want):
            assert g.dtype == w.dtype
            torch.testing.assert_close(g, w, rtol=0, atol=0)


def test_fused_predicted_op_is_checked_against_its_signature(monkeypatch):
    """An op that recording predicts (it followed the same program point last
    time) reuses that op's signature only if its arguments match it: another
    stride, offset, dtype, conjugate bit, number type, static
    argument or default dtype, in a list too (and a written list whose
    tensors share a storage), takes
    the full encoding and computes its own values."""
    from torch_tpu.ops import registry
    outcomes = []
    matched = registry.Kernel._matched

    def spy(self, hit, args, inputs, fused, names=()):
        entry = matched(self, hit, args, inputs, fused, names)
        outcomes.append(entry is not None)
        return entry
    monkeypatch.setattr(registry.Kernel, "_matched", spy)
    # (with the native helper a matched call never reaches Kernel._matched:
    # native/entry.cpp checks it; a refused one does, and then builds its key)
    slow, fast_key = [], registry.Kernel._fast_key
    monkeypatch.setattr(registry.Kernel, "_fast_key", lambda self, *a: slow.append(self.name) or fast_key(self, *a))
    gen = torch.Generator().manual_seed(0)
    sq, big, i0 = torch.randn(6, 6, generator=gen), torch.randn(5, 6, generator=gen), torch.arange(24).reshape(4, 6)
    cz = torch.complex(*torch.randint(-3, 4, (2, 6, 6), generator=gen).float())  # (small integers: mm exact)

    def scaled(a):
        return torch.tril(a * 2.0, 1)

    def doubled(tensors):
        return torch._foreach_mul(tensors, 2.0)

    def written_rows(pair):  # row 0 of one tensor and row 1 of the other (or of the same) doubled
        torch._foreach_mul_([pair[0][0], pair[1][1]], 2.0)
        return list(pair)

    # each learned program, then one that differs from it in one thing only
    variants = [
        (scaled, lambda d: sq.to(d)), (scaled, lambda d: sq.to(d).t()),                      # stride
        (scaled, lambda d: big.to(d)[:4]), (scaled, lambda d: big.to(d)[1:]),                 # offset
        (scaled, lambda d: big.to(d)), (scaled, lambda d: big.to(d).view(torch.int32)),       # dtype
        (scaled, lambda d: i0.to(d)), (lambda a: torch.tril(a * 2, 1), lambda d: i0.to(d)),   # an int
        (scaled, lambda d: sq.to(d)), (lambda a: torch.tril(a * 2.0, -1), lambda d: sq.to(d)),  # a static argument
        (lambda a: a * 1.5, lambda d: i0.to(d)), (lambda a: a * 1.5, lambda d: i0.to(d), torch.float64),  # default dtype
        # lists: a tensor's stride in a list, a dim list, a written list's tensors sharing a storage
        (doubled, lambda d: [sq.to(d), sq.to(d) + 1]), (doubled, lambda d: [sq.to(d), (sq.to(d) + 1).t()]),
        (lambda a: a.amax([0]), lambda d: sq.to(d)), (lambda a: a.amax([1]), lambda d: sq.to(d)),
        (written_rows, lambda d: (big.clone().to(d), big.clone().to(d))), (written_rows, lambda d: (big.clone().to(d),) * 2),
        # a conjugate bit (mm reads conjugate views as they are; the check asks only complex tensors)
        (lambda a: torch.mm(a, a), lambda d: cz.to(d)), (lambda a: torch.mm(a, a), lambda d: cz.to(d).conj()),
        (scaled, lambda d: sq.to(d)),
    ]
    default = torch.get_default_dtype()
    for program, make, *dtype in variants:
        try:
            torch.set_default_dtype(dtype[0] if dtype else default)
            want = program(make("cpu"))
            want = list(want) if isinstance(want, (list, tuple)) else want
            for _ in range(2):  # the second time as a repeated program
                outcomes.clear()
                slow.clear()
                fused_before = fusion.stats.ops_fused
                with torch.tpu.set_eager_mode("fused"):
                    got = program(make("tpu"))
                    got = [t.cpu() for t in got] if isinstance(got, (list, tuple)) else got.cpu()
                torch.testing.assert_close(got, want, rtol=0, atol=0)  # (dtypes too)
        finally:
            torch.set_default_dtype(default)
    # the learned program again: every op predicted, checked and recorded
    assert all(outcomes) and not slow and fusion.stats.ops_fused > fused_before


def test_fused_flushes_on_synchronize_and_size_limit(monkeypatch):
    with torch.tpu.set_eager_mode("fused"):
        x = torch.ones(4, device="tpu") + 1
        torch.tpu.synchronize()
        assert fusion.pending_ops() == 0
        monkeypatch.setattr(fusion, "MAX_PENDING_OPS", 10)
        for _ in range(25):
            x = x + 1
        assert fusion.pending_ops() < 10
        assert x.cpu().tolist() == [27.0] * 4


def test_debug_mode_reports_the_failing_op(monkeypatch):
    from torch_tpu.eager import modes
    x = torch.ones(3, device="tpu")
    with torch.tpu.set_eager_mode("debug"):
        assert (x * 2).cpu().tolist() == [2.0] * 3

        def device_failure(results):
            raise RuntimeError("INTERNAL: simulated device fault")
        monkeypatch.setattr(modes.jax, "block_until_ready", device_failure)
        with pytest.raises(RuntimeError, match=r"aten\.mul\.Tensor failed on the device: INTERNAL"):
            x * 3


def test_strict_launch_failure_names_the_op_on_the_cached_path():
    """A cached op whose executable fails at run time (XLA refusing it) raises
    the named failure, whichever entry took the call (the native one hands a
    failed launch to the Kernel, which runs it again and names it), and the
    op's next call builds afresh."""
    from torch_tpu.ops import registry
    x = torch.ones(3, device="tpu")
    with torch.tpu.set_eager_mode("strict"):
        for _ in range(3):
            assert (x * 2.5).cpu().tolist() == [2.5] * 3
        kernel = registry.KERNELS[torch.ops.aten.mul.Tensor]
        entry = kernel.cache.recent[0][0]
        real = entry.fn

        def refused(*inputs):
            raise RuntimeError("INTERNAL: simulated refusal")
        entry.fn = refused
        try:
            with pytest.raises(RuntimeError, match=r"mul\.Tensor failed on the device: INTERNAL: simulated refusal"):
                x * 2.5
        finally:
            entry.fn = real
        assert (x * 2.5).cpu().tolist() == [2.5] * 3


def test_a_failing_fused_chain_loses_no_other_result():
    # a chain that fails when it runs (here one recorded op's program made to
    # fail, as XLA refusing it would) keeps every result that does not need
    # that op; reading one that does raises the chain's error
    import jax

    def refused(*args):
        raise ValueError("simulated refusal")
    x = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    t = x.to("tpu")
    with torch.tpu.set_eager_mode("fused"):
        before = t + 1
        victim = t.sin()
        needs_victim = victim * 2
        after = t * 3
        lazy = victim.untyped_storage()._tpu_buf
        fusion._nodes[lazy.node].fn = jax.jit(refused)
        with pytest.raises(RuntimeError, match="fused chain of .* failed on the device: simulated refusal") as failed:
            victim.cpu()
        assert torch.equal(before.cpu(), x + 1) and torch.equal(after.cpu(), x * 3)
        with pytest.raises(RuntimeError) as read_later:
            needs_victim.cpu()
    assert str(read_later.value) == str(failed.value)
    assert fusion.pending_ops() == 0


def test_leaving_fused_mode_runs_pending_work():
    with torch.tpu.set_eager_mode("fused"):
        x = torch.zeros(3, device="tpu")
        x.add_(5)
    assert fusion.pending_ops() == 0
    assert x.cpu().tolist() == [5.0] * 3


def test_fused_autograd_matches_strict():
    def grads(mode):
        torch.manual_seed(1)
        w = torch.randn(4, 3).to("tpu").requires_grad_()
        with torch.tpu.set_eager_mode(mode):
            loss = (w.tanh() @ w.t()).sum()
            loss.backward()
            return w.grad.cpu()
    torch.testing.assert_close(grads("fused"), grads("strict"))


def test_changing_python_numbers_reuse_executables():
    # t / 3.5 passes 3.5 in a Tensor position (a "wrapped number"); an
    # optimizer's bias correction changes it every step.
    from torch_tpu.ops import registry
    div = registry.KERNELS[torch.ops.aten.div.Tensor]
    x = torch.arange(1.0, 4.0, device="tpu")
    (x / 2.0).cpu()
    entries = len(div.cache)
    for v in (3.0, 4.5, 1e-3, 7):
        torch.testing.assert_close((x / v).cpu(), torch.arange(1.0, 4.0) / v, rtol=0, atol=0)
    assert len(div.cache) == entries + 1  # the int 7: one more signature (int), not one per value


def test_fused_copy_into_a_fresh_tensor_then_a_view_of_it():
    # A language model's shifted labels: .contiguous() copies a slice into a
    # new storage, .view(-1) flattens it, and cross_entropy's target check
    # reads it while the copy is still pending (the pending buffer once
    # claimed the storage's flat shape and the reader got the 2-d value).
    logits = torch.randn(30, 8)
    ids = torch.randint(0, 8, (2, 16))
    expected = F.cross_entropy(logits, ids[..., 1:].contiguous().view(-1))
    with torch.tpu.set_eager_mode("fused"):
        target = ids.to("tpu")[..., 1:].contiguous().view(-1)
        loss = F.cross_entropy(logits.to("tpu"), target)
        assert target.cpu().shape == (30,)
        torch.testing.assert_close(loss.cpu(), expected)


@pytest.mark.parametrize("mode", MODES)
def test_index_checks_raise_at_the_op_in_debug_and_at_the_next_wait_otherwise(mode):
    """An index on the device is checked like a CUDA device-side assert: debug
    raises at the op; strict and fused at the next host read or synchronize,
    before the value, and only once.  Type and message are the CPU's."""
    table = torch.randn(5, 3, device="tpu")
    # "+ 0": indices computed on the device (host-built ones are checked at the op: host_mirror)
    bad, good = torch.tensor([1, 7], device="tpu") + 0, torch.tensor([4, 0], device="tpu")
    with torch.tpu.set_eager_mode(mode):
        if mode == "debug":
            with pytest.raises(IndexError, match="index out of range in self"):
                F.embedding(bad, table)
            return
        rows = F.embedding(bad, table)  # returns at once
        with pytest.raises(IndexError, match="index out of range in self"):
            rows.sum().item()
        torch.tpu.synchronize()  # reported once
        logits = torch.randn(2, 5, device="tpu")
        F.cross_entropy(logits, torch.tensor([1, 5], device="tpu") + 0)
        with pytest.raises(IndexError, match="Target 5 is out of bounds."):
            torch.tpu.synchronize()
        torch.testing.assert_close(F.embedding(good, table).cpu(), table.cpu()[[4, 0]])


@pytest.mark.parametrize("mode", ["debug", "strict", "fused"])
def test_host_known_targets_are_checked_at_the_loss(mode):
    """Targets copied from the CPU keep their values known on the host
    (host_mirror): a class out of bounds raises at the loss, as on the CPU,
    with no device read; ignore_index is not a class."""
    logits = torch.randn(2, 5)
    with torch.tpu.set_eager_mode(mode):
        with pytest.raises(IndexError, match="Target 5 is out of bounds."):
            F.cross_entropy(logits.to("tpu"), torch.tensor([1, 5]).to("tpu"))
        with pytest.raises(IndexError, match="Target -1 is out of bounds."):
            F.nll_loss(logits.to("tpu"), torch.tensor([-1, 2], device="tpu"))
        torch.tpu.synchronize()  # (nothing left to report)
        kept = torch.tensor([4, -100])
        torch.testing.assert_close(F.cross_entropy(logits.to("tpu"), kept.to("tpu")).cpu(),
                                   F.cross_entropy(logits, kept))


def test_index_checks_do_not_cut_a_fused_chain():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(10, 8), nn.Flatten(), nn.Linear(24, 10)).to("tpu")
    tokens, targets = torch.randint(0, 10, (4, 3), device="tpu"), torch.randint(0, 10, (4,), device="tpu")
    with torch.tpu.set_eager_mode("fused"):
        torch.tpu.synchronize()
        before = fusion.stats.flushes
        loss = F.cross_entropy(model(tokens), targets)
        loss.backward()
        assert fusion.stats.flushes == before  # the embedding's and the loss's index checks are recorded too
        assert math.isfinite(loss.item())


def test_a_loop_that_never_reads_keeps_few_index_checks():
    from torch_tpu.eager import checks
    table, index = torch.randn(5, 3, device="tpu"), torch.tensor([1, 2], device="tpu")
    for _ in range(400):
        F.embedding(index, table)
    torch.tpu.synchronize()
    for _ in range(400):
        F.embedding(index, table)
    assert len(checks._pending) <= 5 * checks._LIMIT
