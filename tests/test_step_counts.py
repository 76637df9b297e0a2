"""An optimizer's step counts, bumped on the host (compile/step_counts.py):
the same counts, updated in place, and the same values in the executable,
as PyTorch's own program."""
import torch

from torch_tpu.compile import backend, step_counts


def _bump_and_scale(counts, x):
    torch._foreach_add_(counts, 1)
    return x * counts[0], x + counts[1]


def _graphs(monkeypatch):
    made = []
    real_init = backend.CompiledGraph.__init__

    def keep(self, gm, name, **kwargs):
        real_init(self, gm, name, **kwargs)
        made.append(self)
    monkeypatch.setattr(backend.CompiledGraph, "__init__", keep)
    return made


def test_counts_are_bumped_in_place_and_packed_like_pytorchs_program(monkeypatch):
    graphs = _graphs(monkeypatch)
    f = torch.compile(_bump_and_scale, backend="tpu", dynamic=False)
    x = torch.randn(5)
    counts, want_counts = [torch.tensor(0.5), torch.tensor(2.0)], [torch.tensor(0.5), torch.tensor(2.0)]
    for _ in range(3):
        versions = [c._version for c in counts]
        got = f(counts, x.to("tpu"))
        want = _bump_and_scale(want_counts, x)
        for g, w in zip(got, want):
            torch.testing.assert_close(g.cpu(), w, rtol=0, atol=0)
        assert [c.item() for c in counts] == [c.item() for c in want_counts]
        assert all(c._version > v for c, v in zip(counts, versions))  # written in place
    assert [g.host._counts is not None for g in graphs if g.host] == [True]


def test_counts_that_share_memory_are_left_to_the_generic_program():
    """(AOTAutograd gives aliased inputs that a graph mutates a base of their
    own, so a graph never sees this; the foreach add would bump it twice.)"""
    base = torch.zeros(2)
    counts = step_counts.StepCounts([0, 1], [0, 1], 1, torch.float32)
    assert counts([base[0], base[0]]) is None and base.tolist() == [0.0, 0.0]
    pack = counts([base[0], base[1]])
    assert pack.dtype == "float32" and pack.tolist() == [1.0, 1.0] and base.tolist() == [1.0, 1.0]


def test_counts_elsewhere_in_memory_are_written_there():
    # the views over the counts' memory are made again when the counts move
    # (a new optimizer state, a reloaded checkpoint): never a stale address
    counts = step_counts.StepCounts([0, 1], [1, 0], 1, torch.int64)
    first = [torch.tensor(3), torch.tensor(7)]
    assert counts(first).tolist() == [8, 4] and [c.item() for c in first] == [4, 8]
    second = [torch.tensor(10), torch.tensor(20)]
    assert counts(second).tolist() == [21, 11] and [c.item() for c in second] == [11, 21]
    assert [c.item() for c in first] == [4, 8]
    assert counts(first).tolist() == [9, 5]


def test_float32_counts_add_in_float32_as_the_cpu_kernel():
    big = torch.tensor(16777216.0)  # 2**24: float32 cannot hold 2**24 + 1
    counts = step_counts.StepCounts([0], [0], 1, torch.float32)
    pack = counts([big])
    want = torch.tensor(16777216.0).add_(1)
    assert pack.dtype == "float32" and pack.tolist() == [want.item()] and big.item() == want.item()
