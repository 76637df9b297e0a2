"""Writes into part of a large storage (a view, out= into a slice, x[i] = v)
update the buffer in place when nothing else holds it (its buffer is donated
to the executable), and keep it when something does.  Counted, not timed:
``access.donations`` counts the writes that donated."""
import collections
import subprocess
import sys

import pytest
import torch

import torch_tpu
from torch_tpu.eager import access, pending
from torch_tpu.storage import buffers

N = access.DONATE_BYTES // 4  # float32 elements of a storage just large enough to donate


def _pair(n=N, shape=None):
    """A CPU tensor and its tpu copy, with the tpu one owning its own buffer."""
    cpu = torch.arange(n, dtype=torch.float32)
    if shape is not None:
        cpu = cpu.reshape(shape)
    return cpu, cpu.to("tpu") * 1  # a computed buffer, not a host transfer's


def _donations(fn):
    before = access.donations
    fn()
    return access.donations - before


def _writes(t):
    """The view writes of the test, applied to ``t`` (CPU or tpu)."""
    dev = t.device
    src = torch.full((100,), 7.0, device=dev)
    t[100:200].copy_(src)
    torch.mul(src, 0.5, out=t[300:400])
    t[500:600] = src
    t[700:800].add_(1)
    t[900] = 3.0


def test_view_writes_donate_and_match_cpu():
    cpu, tpu = _pair()
    _writes(tpu)  # compiles
    assert _donations(lambda: _writes(tpu)) == 5
    _writes(cpu)
    _writes(cpu)
    torch.testing.assert_close(tpu.cpu(), cpu, rtol=0, atol=0)


def test_strided_and_bitcast_views_donate_and_match_cpu():
    cpu, tpu = _pair(shape=(N // 64, 64))

    def writes(t):
        t[:, 3] = torch.ones(N // 64, device=t.device)
        t[2:10, ::2].mul_(2)
        t.view(torch.int32)[5, 1:4] = 12345

    writes(tpu)
    assert _donations(lambda: writes(tpu)) == 3
    writes(cpu)
    writes(cpu)
    torch.testing.assert_close(tpu.cpu(), cpu, rtol=0, atol=0)


def test_small_storage_is_copied_not_donated():
    _, tpu = _pair(n=1024)
    assert _donations(lambda: tpu[10:20].copy_(torch.ones(10, device="tpu"))) == 0


def test_a_buffer_held_elsewhere_is_not_donated():
    cpu, tpu = _pair()
    _writes(tpu)
    _writes(cpu)
    held = torch_tpu.to_jax(tpu)  # the storage's own array, handed out
    assert _donations(lambda: tpu[100:200].copy_(torch.zeros(100, device="tpu"))) == 0
    torch.testing.assert_close(torch.from_numpy(held.__array__().copy()), cpu, rtol=0, atol=0)
    assert _donations(lambda: _writes(tpu)) == 5  # the storage's new buffer is its own
    cpu[100:200] = 0
    _writes(cpu)
    torch.testing.assert_close(tpu.cpu(), cpu, rtol=0, atol=0)


def test_storages_sharing_one_array_keep_it():
    # fresh storages of one size may share one zero-filled array
    a, b = torch.zeros(N, device="tpu"), torch.zeros(N, device="tpu")
    a[10:20] = 1.0
    assert b.sum().item() == 0 and a.sum().item() == 10


def test_source_in_the_same_storage_and_pending_readers():
    cpu, tpu = _pair()
    for t in (cpu, tpu):
        t[0:100].copy_(t[200:300])  # a read of the buffer written
    doubled = tpu * 2  # launched, maybe not finished: reads the old buffer
    assert _donations(lambda: tpu[1000:1100].fill_(-1.0)) == 1
    torch.testing.assert_close(doubled.cpu(), cpu * 2, rtol=0, atol=0)
    cpu[1000:1100] = -1.0
    torch.testing.assert_close(tpu.cpu(), cpu, rtol=0, atol=0)


def test_views_of_one_storage_see_the_write():
    cpu, tpu = _pair()
    views_ = [t[N // 2:] for t in (cpu, tpu)]
    for t in (cpu, tpu):
        t[N // 2 + 5:N // 2 + 15] = 2.0
    torch.testing.assert_close(views_[1].cpu(), views_[0], rtol=0, atol=0)


def test_access_write_into_a_view_donates():
    cpu, tpu = _pair()
    value = torch_tpu.to_jax(torch.full((100,), 5.0, device="tpu"))
    access.write(tpu[200:300], value)  # compiles
    assert _donations(lambda: access.write(tpu[200:300], value)) == 1
    cpu[200:300] = 5.0
    torch.testing.assert_close(tpu.cpu(), cpu, rtol=0, atol=0)


def test_fused_mode_records_without_donating():
    cpu, tpu = _pair()
    with torch.tpu.set_eager_mode("fused"):
        assert _donations(lambda: _writes(tpu)) == 0
        _writes(cpu)
        torch.testing.assert_close(tpu.cpu(), cpu, rtol=0, atol=0)
    _writes(tpu)  # after: the storage may still hold the recorded (now computed) buffer
    _writes(cpu)
    torch.testing.assert_close(tpu.cpu(), cpu, rtol=0, atol=0)


class _CountedQueue(collections.deque):
    """pending's launch queue, counting the launches noted in it: appended,
    or replacing the newest note (the native entry's, for a launch reading it)."""
    launches = 0

    def append(self, x):
        self.launches += 1
        super().append(x)

    def __setitem__(self, i, x):
        self.launches += 1
        super().__setitem__(i, x)


def _launches(fn, monkeypatch):
    """Executables ``fn`` launches (each launch notes its results as pending,
    from Python or from the native entry)."""
    queue = _CountedQueue(pending._pending)
    monkeypatch.setattr(pending, "_pending", queue)
    fn()
    monkeypatch.undo()
    pending._pending.extend(queue)
    return queue.launches


def test_out_into_a_view_is_one_launch_and_matches_cpu(monkeypatch):
    cpu, tpu = _pair(shape=(N // 64, 64))

    def writes(t):
        dev = t.device
        grad = torch.arange(640.0, device=dev).reshape(10, 64)
        # DDP's gradient into its bucket: at::mul_out(bucket_view, grad, wrapped CPU scalar)
        yield lambda: torch.mul(grad, torch.tensor(0.5), out=t[20:30])
        yield lambda: torch.add(grad[:, :8], 1, out=t[40:50, ::8])  # a strided destination
        yield lambda: torch.neg(t[60:70], out=t[60:70])  # the destination is the input too
        yield lambda: torch.mul(t[0:10], 3, out=t[80:90])  # another view of its storage is

    for w in writes(tpu):
        w()  # compiles
    counts = [_launches(w, monkeypatch) for w in writes(tpu)]
    assert counts == [1, 1, 1, 1]
    for _ in range(2):
        for w in writes(cpu):
            w()
    torch.testing.assert_close(tpu.cpu(), cpu, rtol=0, atol=0)
    assert _donations(lambda: torch.mul(torch.ones(64, device="tpu"), 2, out=tpu[5])) == 1


def test_out_that_needs_a_cast_or_resize_still_copies():
    src = torch.arange(6.0)
    for dev in ("cpu", "tpu"):
        wide = torch.zeros(10, dtype=torch.float64, device=dev)
        torch.mul(src.to(dev), 2, out=wide[2:8])  # float32 result into float64
        empty = torch.empty(0, device=dev)
        torch.add(src.to(dev), 1, out=empty)  # resized
        conj = torch.zeros(6, dtype=torch.complex64, device=dev).conj()
        torch.mul(src.to(dev).to(torch.complex64), 1j, out=conj)  # a lazy conjugate view
        if dev == "cpu":
            expected = (wide, empty, conj.resolve_conj())
        else:
            got = (wide.cpu(), empty.cpu(), conj.resolve_conj().cpu())
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.int64, torch.complex64])
def test_other_dtypes(dtype):
    cpu = torch.arange(access.DONATE_BYTES // 2).to(dtype)
    tpu = cpu.to("tpu") * 1
    for t in (cpu, tpu):
        t[3:9] = torch.ones(6, dtype=dtype, device=t.device)
        t[20:40:2].add_(torch.ones(10, dtype=dtype, device=t.device))
    torch.testing.assert_close(tpu.cpu(), cpu, rtol=0, atol=0)
    assert buffers.get_buffer(tpu.untyped_storage()).shape == (access.DONATE_BYTES // 2,)


def test_importing_torch_tpu_leaves_the_jax_runtime_unstarted():
    # jax.distributed.initialize (tpu_dist's init_process_group) must be able to run first
    code = ("import torch_tpu\nfrom jax._src import xla_bridge\n"
            "assert not xla_bridge.backends_are_initialized()\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)


@pytest.mark.parametrize("offset", [0, None])  # None: a dynamic-offset view's window (a loop over rows)
def test_stepped_write_ending_before_its_block_updates_the_block_not_by_scatter(offset):
    # x[:, ::2] of a 47-element buffer: its dense block (4 x 6 x 2) runs one element past the
    # buffer's end, as every stepped view's window does.  A scatter there built an int64 index of
    # every element (64x the bytes of an int8 view: PyTorch's test_gather_large ran out of memory).
    import jax
    import numpy as np
    from torch_tpu.storage import views
    size, stride = (4, 6), (12, 2)
    spec = ((47,), np.dtype(np.int8), size, stride, offset, np.dtype(np.int8))
    buf = np.arange(47, dtype=np.int8)
    value = -np.arange(1, 25, dtype=np.int8).reshape(size)
    args = (buf, value) if offset is not None else (buf, value, 0)
    jaxpr = str(jax.make_jaxpr(views.writer(spec))(*args))
    assert "scatter" not in jaxpr
    expect = buf.copy()
    np.lib.stride_tricks.as_strided(expect, size, stride, writeable=True)[...] = value
    np.testing.assert_array_equal(np.asarray(views.writer(spec)(*args)), expect)
    cpu = torch.arange(47, dtype=torch.int8)
    tpu = cpu.to("tpu")
    for t in (cpu, tpu):
        for i in range(3):  # rows at offsets 0, 12, 24 of stepped views ending before their blocks
            t[i * 12:].as_strided((2, 6), (12, 2))[...] = i - 5
        t.as_strided(size, stride).add_(torch.ones(size, dtype=torch.int8, device=t.device))
    torch.testing.assert_close(tpu.cpu(), cpu, rtol=0, atol=0)


def test_pending_holds_counts_the_queues_references():
    # can_donate explains a buffer's extra references as the launch queue's
    x, y = torch.ones(4, device="tpu") * 1, torch.ones(4, device="tpu") * 1
    buf = buffers.get_buffer(x.untyped_storage())
    pending.note(buf)
    pending.note(buf)
    assert pending.holds(buf, 2) and not pending.holds(buf, 3)
    other = buffers.get_buffer(y.untyped_storage())
    assert pending.holds(object(), 0) and not pending.holds(object(), 1)
    torch.tpu.synchronize()
    assert not pending.holds(buf, 1) and not pending.holds(other, 1)  # synchronize emptied the queue
