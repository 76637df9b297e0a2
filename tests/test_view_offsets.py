"""An op on a view reads the view's storage offset at run time: a loop over
rows, columns, windows or cache slots (``for i in range(n): f(x[i])``) builds
one executable, not one per ``i``, in every eager mode; and every offset
gives the CPU's result bit for bit.  Counted, not timed:
``benchmarks/view_loops.py`` times these loops."""
import pytest
import torch

import torch_tpu  # noqa: F401
from torch_tpu import profiler
from torch_tpu.eager import checks
from torch_tpu.ops import registry
from helpers import assert_same, sample, strict  # noqa: F401  (no CPU fallback)

OFFSETS = 20
K = 4

# name -> fn(x, i, extras): one loop iteration over offset i of x (OFFSETS + K rows);
# each loop has its own width below, so no executable is shared between loops.
LOOPS = {
    "sin(x[i])": lambda x, i, e: torch.sin(x[i]),
    "x[i] + y": lambda x, i, e: x[i] + e["y"],
    "x[:, i] * 2": lambda x, i, e: x[:, i] * 2,
    "x[i:i+k].sum()": lambda x, i, e: x[i:i + K].sum(),
    "narrow @ w": lambda x, i, e: x.narrow(0, i, K) @ e["w"],
    "x[i].sort()": lambda x, i, e: x[i].sort(),
    "cat([x[i], x[i + 1]])": lambda x, i, e: torch.cat([x[i], x[i + 1]]),  # (views in a list)
    "x[i].mul_(2)": lambda x, i, e: x[i].mul_(2),
    "x[i] = v": lambda x, i, e: x.__setitem__(i, e["v"]),
    "x[:, i] = c": lambda x, i, e: x[:, i].copy_(e["c"]),
    "add(out=x[i])": lambda x, i, e: torch.add(e["y"], 1, out=x[i]),
    "x[i, ::2].add_(1)": lambda x, i, e: x[i, ::2].add_(1),
    "batch_norm_stats (no meta kernel)": lambda x, i, e: _batch_norm_stats(x.narrow(0, i, K)),
}


def _batch_norm_stats(x):
    if x.device.type == "cpu":  # (no CPU kernel: its definition)
        return x.mean(0), (x.var(0, unbiased=False) + 1e-5).rsqrt()
    return torch.batch_norm_stats(x, 1e-5)
WIDTHS = {name: 33 + n for n, name in enumerate(LOOPS)}
# loops whose op may round otherwise than the CPU's kernel (checked to PyTorch's tolerances)
INEXACT = {"sin(x[i])", "x[i:i+k].sum()", "narrow @ w", "batch_norm_stats (no meta kernel)"}


def _extras(width):
    return {"y": sample(width), "w": sample(width, 3), "v": sample(width) + 1, "c": sample(OFFSETS + K) - 1}


def _run(name, x, extras):
    """The loop's results (and x after it): one list per device."""
    out = [LOOPS[name](x, i, extras) for i in range(OFFSETS)]
    return [o for o in out if o is not None] + [x]


@pytest.mark.parametrize("mode", ["strict", "fused", "debug"])
@pytest.mark.parametrize("name", list(LOOPS))
def test_loop_over_offsets_compiles_once(name, mode):
    width = WIDTHS[name] + {"strict": 0, "fused": 100, "debug": 200}[mode]  # a shape of its own
    x, extras = sample(OFFSETS + K, width), _extras(width)
    expected = _run(name, x.clone(), extras)
    dev_x, dev_extras = x.to("tpu"), {k: v.to("tpu") for k, v in extras.items()}
    torch.tpu.synchronize()
    with torch.tpu.set_eager_mode(mode):
        before = profiler.xla_compiles()
        got = []
        for i in range(OFFSETS):
            out = LOOPS[name](dev_x, i, dev_extras)
            if out is not None:
                got.append(tuple(t.cpu() for t in out) if isinstance(out, tuple) else out.cpu())
        compiles = profiler.xla_compiles() - before
    got.append(dev_x.cpu())
    # one executable for the op; fused mode builds its chain (one) around it
    assert compiles <= 2, compiles
    for g, e in zip(got, expected, strict=True):
        assert_same(g, e, exact=name not in INEXACT)


def test_whole_buffer_views_keep_a_static_offset():
    """A view spanning its whole buffer (the tensor itself, a transpose) has
    one possible offset: its signature keeps it, and its op gets no offset
    argument (a chain of ops on whole tensors passes nothing more)."""
    x = torch.ones(6, 5).to("tpu")
    for t in (x, x.t(), x.view(30)):
        spec, offset = registry.views.split_offset((tuple(x.shape), x.untyped_storage()._tpu_buf.dtype,
                                                    tuple(t.shape), t.stride(), t.storage_offset(),
                                                    x.untyped_storage()._tpu_buf.dtype))
        assert offset is None and spec[4] == 0
    kernel = registry.KERNELS[torch.ops.aten.sin.default]
    before = set(kernel.cache)
    torch.sin(x.t())
    new = [kernel.cache[k] for k in kernel.cache if k not in before]
    assert len(new) == 1 and new[0].offsets == ()


def test_lazy_bits_bitcast_and_lists_at_offsets():
    """Views read at run-time offsets through a lazy conjugate, a bitcast
    dtype view, and a list of views of one buffer written in place."""
    z = torch.complex(sample(8, 6), sample(8, 6) + 1)
    dz = z.to("tpu")
    f = sample(8, 6)
    df = f.to("tpu")
    for i in range(1, 4):
        assert torch.equal((dz[i].conj() * 2).cpu(), z[i].conj() * 2)
        assert torch.equal((df.view(torch.int32)[i] + 1).cpu(), f.view(torch.int32)[i] + 1)
    flat = sample(30)
    dflat = flat.to("tpu")
    for i in range(3):
        torch._foreach_mul_([flat[i:i + 5], flat[i + 10:i + 15]], 3.0)
        torch._foreach_mul_([dflat[i:i + 5], dflat[i + 10:i + 15]], 3.0)
        assert torch.equal(dflat.cpu(), flat)


def test_random_op_on_views_at_offsets():
    """An op that draws random numbers reads its key after the offsets."""
    x = torch.zeros(10, 7).to("tpu")
    torch.empty(3, device="tpu").uniform_()  # the words' draw compiles once per process (random_bits.py)
    torch.tpu.synchronize()
    before = profiler.xla_compiles()
    for i in range(1, 6):
        x[i].uniform_()
        torch.tpu.synchronize()
    assert profiler.xla_compiles() - before == 1
    host = x.cpu()
    assert (host[0] == 0).all() and (host[6:] == 0).all()
    assert ((host[1:6] > 0) & (host[1:6] < 1)).all()
    assert not torch.equal(host[1], host[2])


def test_entries_per_offset_are_bounded(monkeypatch):
    """A loop over more positions than the bound keeps at most the bound's
    entries (the executable stays: no new compile) and right results."""
    monkeypatch.setattr(registry, "_MAX_OFFSET_ENTRIES", 3)
    x = sample(12, 9)
    dx = x.to("tpu")
    kernel = registry.KERNELS[torch.ops.aten.neg.default]
    before = profiler.xla_compiles()
    for i in range(12):
        assert torch.equal((-dx[i]).cpu(), -x[i])
        assert sum(1 for e in kernel.cache.values() if e.offsets) <= 3
    assert profiler.xla_compiles() - before == 1


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_device_index_check_of_rows_compiles_once(mode, monkeypatch):
    """The device check of an index row ``idx[i]`` (too large or unfinished
    for the host check) reads the row's offset at run time too, and still
    raises for the row that is out of range."""
    monkeypatch.setattr(checks, "_HOST_NUMEL", 0)
    a = sample(10, 3)
    idx = torch.randint(0, 10, (6, 50), generator=torch.Generator().manual_seed(0))
    idx[5, 7] = 10  # out of range, in the last row only
    da, didx = a.to("tpu"), idx.to("tpu")
    torch.tpu.synchronize()
    with torch.tpu.set_eager_mode(mode):
        before = profiler.xla_compiles()
        for i in range(5):
            assert torch.equal(da[didx[i]].cpu(), a[idx[i]])
        assert profiler.xla_compiles() - before <= 3  # the gather, its check (fused: and their chain)
        with pytest.raises(IndexError, match="index 10 is out of bounds"):
            da[didx[5]].cpu()
