"""The tpu device itself: registration, torch.tpu, storage and views, copies,
serialization, AMP, dtypes and errors, checked against PyTorch's CPU."""
import copy
import gc
import io
import os
import pickle
import subprocess
import sys
import threading

import jax
import ml_dtypes
import numpy as np
import pytest
import torch
import torch.nn as nn

import torch_tpu

from helpers import assert_same, run_both, to_cpu

TPU = torch.device("tpu")


# ---- registration ----------------------------------------------------------------

def _python(code, **env):
    full_env = dict(os.environ, **env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=full_env, timeout=300)


def test_autoload_with_plain_import_torch():
    r = _python("import torch; t = torch.ones(2, device='tpu'); "
                "print(torch.accelerator.current_accelerator().type, t.is_tpu, t.device)")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["tpu", "True", "tpu:0"]


def test_autoload_can_be_turned_off():
    r = _python("import torch; print(torch.accelerator.current_accelerator())",
                TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "None"


def test_accelerator_and_conversion_methods():
    assert torch.accelerator.current_accelerator().type == "tpu"
    assert torch.accelerator.device_count() == 1
    assert torch.accelerator.current_device_index() == 0
    torch.accelerator.set_device_index(0)
    torch.accelerator.synchronize()
    assert torch.get_device_module("tpu") is torch.tpu
    t = torch.ones(3).tpu()
    assert t.is_tpu and t.device == torch.device("tpu", 0)
    m = nn.Linear(2, 2).tpu()
    assert m.weight.is_tpu


def test_device_module_names():
    names = ["is_available", "device_count", "current_device", "set_device", "device", "device_of",
             "get_device_name", "get_device_properties", "synchronize", "manual_seed",
             "manual_seed_all", "seed", "initial_seed", "get_rng_state", "set_rng_state",
             "empty_cache", "memory_allocated", "max_memory_allocated", "memory_stats",
             "reset_peak_memory_stats", "Stream", "Event", "current_stream", "stream",
             "is_initialized", "mem_get_info", "get_amp_supported_dtype"]
    missing = [n for n in names if not hasattr(torch.tpu, n)]
    assert not missing
    assert torch.tpu.is_available() and torch.tpu.device_count() == 1
    torch.ones(1, device="tpu")
    assert torch.tpu.is_initialized()
    assert torch.tpu.get_device_name() == "XLA CPU"  # this machine runs the CPU platform
    assert torch.tpu.get_device_properties().total_memory > 0
    free, total = torch.tpu.mem_get_info()
    assert 0 < free <= total
    with torch.tpu.device(0), torch.tpu.device_of(torch.ones(1, device="tpu")):
        assert torch.tpu.current_device() == 0


def test_memory_figures_are_live_bytes():
    torch.tpu.synchronize()
    before = torch.tpu.memory_allocated()
    t = torch.empty(1000, 250, device="tpu")  # 1 MB of float32
    assert torch.tpu.memory_allocated() - before == 1_000_000
    assert torch.tpu.max_memory_allocated() >= torch.tpu.memory_allocated()
    assert torch.tpu.memory_stats()["allocated_bytes.all.current"] == torch.tpu.memory_allocated()
    del t
    assert torch.tpu.memory_allocated() == before
    torch.tpu.reset_peak_memory_stats()
    assert torch.tpu.max_memory_allocated() == before
    assert torch.accelerator.memory_allocated() == before


def test_peak_counts_storages_that_died_before_an_allocation_as_freed():
    """A storage's death is queued (storage/memory.py) and applied at the next
    allocation: a tensor dropped, on this thread or another, before the next
    one is made never counts toward the peak with it."""
    import threading
    torch.tpu.synchronize()
    base = torch.tpu.memory_allocated()
    torch.tpu.reset_peak_memory_stats()
    t = torch.empty(1000, 250, device="tpu")
    del t
    u = torch.empty(1000, 250, device="tpu")
    holder = [u]
    del u
    dropper = threading.Thread(target=holder.clear)
    dropper.start()
    dropper.join()
    v = torch.empty(1000, 250, device="tpu")
    assert torch.tpu.max_memory_allocated() - base == 1_000_000
    assert torch.tpu.memory_allocated() - base == 1_000_000
    del v
    assert torch.tpu.memory_allocated() == base
    assert torch.tpu.memory_stats()["allocation.all.freed"] == torch.tpu.memory_stats()["allocation.all.allocated"] - (
        torch.tpu.memory_stats()["allocation.all.current"])


@pytest.mark.parametrize("swap", [True, False], ids=["swapped-storage", "set_"])
def test_op_outputs_made_either_way_are_the_same(swap, monkeypatch):
    """A cached op's row-major output is made at its shape with its storage
    swapped in (or, without that private method, through set_): same values,
    geometry, addresses, storage and byte accounting either way."""
    from torch_tpu.storage import buffers
    monkeypatch.setattr(buffers, "_SWAP_STORAGE", swap)
    gc.collect()  # (an earlier test's tensors in a reference cycle freed mid-test would skew the count)
    torch.tpu.synchronize()
    before = torch.tpu.memory_allocated()
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(5, 7, generator=g), torch.randn(5, 7, generator=g)
    ta, tb = a.to(TPU), b.to(TPU)
    for _ in range(3):  # the first call builds the entry, the later ones take the cached path
        outs = [ta * 1.5 + tb, ta.sum(), ta.new_zeros(0, 3) + 1, ta.t() * 2,
                ta.max(dim=1).values, torch.sigmoid(ta)]
    ref = [a * 1.5 + b, a.sum(), a.new_zeros(0, 3) + 1, a.t() * 2, a.max(dim=1).values, torch.sigmoid(a)]
    for t, r in zip(outs, ref):
        assert t.shape == r.shape and t.stride() == r.stride() and t.storage_offset() == 0
        assert t.untyped_storage().nbytes() == r.untyped_storage().nbytes()
        assert_same(t, r)
    assert len({t.data_ptr() for t in outs if t.numel()}) == len([t for t in outs if t.numel()])
    z = outs[0]
    v = z[1:]
    v.add_(1)  # a view writes through the output's own storage
    assert_same(z, torch.cat([(a * 1.5 + b)[:1], (a * 1.5 + b)[1:] + 1]))
    z.resize_(10, 10)
    assert z.shape == (10, 10) and z.untyped_storage().nbytes() == 400
    del outs, z, v, t
    torch.tpu.synchronize()
    assert torch.tpu.memory_allocated() - before == ta.untyped_storage().nbytes() + tb.untyped_storage().nbytes()


def test_invalid_device_index():
    with pytest.raises(RuntimeError, match="Invalid device index"):
        torch.zeros(2, device="tpu:1")
    with pytest.raises(RuntimeError, match="Invalid device index"):
        torch.ones(2).to("tpu:3")
    with pytest.raises(RuntimeError, match="Invalid device index"):
        torch.tpu.set_device(2)


def test_events_time_device_work():
    start, end = torch.tpu.Event(enable_timing=True), torch.tpu.Event(enable_timing=True)
    x = torch.randn(64, 64, device="tpu")
    start.record()
    for _ in range(3):
        x = x + 1
    end.record()
    end.synchronize()
    assert start.elapsed_time(end) >= 0.0


# ---- storage and views ----------------------------------------------------------

def test_unique_fake_data_pointers_and_view_offsets():
    a, b = torch.zeros(3, 4, device="tpu"), torch.zeros(3, 4, device="tpu")
    assert a.data_ptr() != b.data_ptr()
    assert a[1:].data_ptr() - a.data_ptr() == 16
    assert a[:, 1].data_ptr() - a.data_ptr() == 4
    assert a.t().untyped_storage().data_ptr() == a.untyped_storage().data_ptr()


@pytest.mark.parametrize("view", [
    lambda x: x.t(), lambda x: x[1:, 1:3], lambda x: x[:, ::2], lambda x: x[1],
    lambda x: x[:, :1].expand(3, 4), lambda x: x.diagonal(), lambda x: x.unfold(1, 2, 1),
    lambda x: x.as_strided((3, 3), (1, 1), 1), lambda x: x.view(4, 3), lambda x: x.unsqueeze(0),
    lambda x: x.view(torch.int32), lambda x: x.flatten()[2:9],
])
def test_views_read_like_cpu(view):
    x = torch.arange(12.).reshape(3, 4)
    run_both(lambda t: view(t).clone(), x, exact=True)
    got = view(x.to("tpu"))
    assert got.stride() == view(x).stride() and got.storage_offset() == view(x).storage_offset()


@pytest.mark.parametrize("mutate", [
    lambda x: x.add_(1), lambda x: x[1:].mul_(2), lambda x: x.t().copy_(torch.ones(4, 3)),
    lambda x: x[:, 1].mul_(10), lambda x: x[1].zero_(), lambda x: x[:, ::2].fill_(7),
    lambda x: x.diagonal().add_(100), lambda x: x.view(-1)[3:7].sub_(5),
])
def test_inplace_on_views_updates_base(mutate):
    def f(x):
        x = x.clone()
        mutate(x)
        return x
    run_both(f, torch.arange(12.).reshape(3, 4), exact=True)


def test_out_argument_and_resize():
    a, b = torch.randn(3, 4), torch.randn(4)
    out = torch.empty(0, device="tpu")
    result = torch.add(a.to("tpu"), b.to("tpu"), out=out)
    assert result is out
    assert_same(out, a + b, exact=True)


def test_version_counter_and_saved_tensor_check():
    w = torch.randn(3, device="tpu", requires_grad=True)
    a = w.clone()
    assert a._version == 0
    a[0].mul_(2)
    assert a._version == 1
    y = w.exp()
    y.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


def test_view_inplace_autograd_matches_cpu():
    def f(w):
        a = w.clone()
        a[0].mul_(2)
        a.sum().backward()
        return w.grad
    w = torch.randn(3, 4)
    run_both(f, w.requires_grad_(), exact=True)


# ---- copies and host values -----------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64,
                                   torch.int8, torch.int16, torch.int32, torch.int64,
                                   torch.uint8, torch.bool, torch.complex64])
def test_round_trip_every_dtype(dtype):
    x = (torch.randn(5, 3) * 50).to(dtype)
    t = x.to("tpu")
    assert t.dtype == dtype and t.device.type == "tpu"
    assert torch.equal(t.cpu(), x)


def test_round_trip_past_numpys_64_dims():
    # PyTorch and XLA take tensors of more than 64 dims; NumPy, between them, does not
    x = torch.arange(6.).reshape([1] * 63 + [2, 1, 3])
    t = x.to("tpu")
    assert t.dim() == 66 and torch.equal(t.cpu(), x)
    assert torch.equal(t.transpose(63, 65).cpu(), x.transpose(63, 65))  # a view read back
    assert torch.equal((t * 2).int().cpu(), (x * 2).int())


def test_dtype_conversions_on_device():
    x = torch.randn(4, 5) * 100
    for dtype in (torch.int32, torch.bfloat16, torch.float16, torch.bool, torch.uint8, torch.float64):
        run_both(lambda t: t.to(dtype), x, exact=True)


def test_non_contiguous_sources_and_flags():
    x = torch.randn(6, 4)
    assert torch.equal(x.t().to("tpu").cpu(), x.t())
    assert torch.equal(x[:, ::2].to("tpu", non_blocking=True).cpu(), x[:, ::2])
    assert torch.equal(x.pin_memory().to("tpu").cpu() if torch.cuda.is_available() else x.to("tpu").cpu(), x)
    t = x.to("tpu")
    assert torch.equal(t.t().cpu(), x.t())
    back = torch.empty(4, 6)
    back.copy_(t.t())
    assert torch.equal(back, x.t())


def test_copies_keep_layouts_like_cpu():
    # copies keep a dense tensor's strides (channels_last, a transpose), as PyTorch's do
    cl = torch.channels_last
    x = torch.randn(2, 3, 4, 5).to(memory_format=cl)
    t = x.to("tpu")
    assert t.stride() == x.stride() and torch.equal(t.cpu(), x)
    assert t.cpu().stride() == x.stride()
    assert t.double().stride() == x.double().stride()
    assert t.contiguous().stride() == x.contiguous().stride()
    plain = torch.randn(2, 3, 4, 5, device="tpu")
    assert plain.to(memory_format=cl).stride() == plain.cpu().to(memory_format=cl).stride()
    assert plain.contiguous(memory_format=cl).is_contiguous(memory_format=cl)
    assert torch.equal(plain.to(memory_format=cl).cpu(), plain.cpu())
    # channels_last lets a permute be viewed flat, as on the CPU
    assert torch.equal(t.permute(0, 2, 3, 1).view(-1, 3).cpu(), x.permute(0, 2, 3, 1).view(-1, 3))
    y = torch.randn(4, 5).t()
    assert y.to("tpu").stride() == y.stride() and torch.equal(y.to("tpu").cpu(), y)
    # a view that is not dense comes back row-major (or channels_last), as PyTorch copies it
    assert x[:, :, ::2].to("tpu").cpu().stride() == x[:, :, ::2].clone().stride()


def test_host_copies_are_private_and_resolve_lazy_views():
    x = torch.randn(3, 4)
    before = x.clone()
    t = x.to("tpu")
    x.add_(1)  # the source changing afterwards changes nothing on the device
    assert torch.equal(t.cpu(), before)
    z = torch.randn(3, 4, dtype=torch.complex64)
    assert torch.equal(z.conj().to("tpu").cpu(), z.conj().resolve_conj())
    assert torch.equal(torch._neg_view(z).to("tpu").cpu(), -z)
    f8 = torch.randn(5).to(torch.float8_e4m3fn)
    assert torch.equal(f8.to("tpu").cpu().view(torch.uint8), f8.view(torch.uint8))
    empty = torch.tensor([], device="tpu")
    assert empty.shape == (0,) and empty.dtype == torch.float32 and empty.cpu().numel() == 0


@pytest.mark.parametrize("fast", [True, False])
def test_host_transfers_match_jax_device_put(fast, monkeypatch):
    from torch_tpu.storage import transfer
    transfer.put(np.zeros(1))  # (the fast path set up, or not, on first use)
    if not fast:
        monkeypatch.setattr(transfer, "_target", False)  # JAX's own device_put
    assert bool(transfer._target) == fast
    device = torch_tpu.runtime.jax_device()
    for host in (np.arange(6, dtype=np.int64).reshape(2, 3), np.float32(2.5), np.zeros((0, 4), np.bool_),
                 np.ones(3, ml_dtypes.bfloat16)):
        got, want = transfer.put(host), jax.device_put(host, device)
        assert (got.shape, got.dtype, got.committed, got.devices()) == \
            (want.shape, want.dtype, want.committed, want.devices())
        assert np.array_equal(np.asarray(got), np.asarray(want))
    x = torch.arange(5.)
    assert torch.equal(x.to("tpu").cpu(), x)


def test_host_values():
    assert torch.tensor([1, 2, 3], device="tpu").tolist() == [1, 2, 3]
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = torch.from_numpy(a).to("tpu")
    assert np.array_equal(t.cpu().numpy(), a)
    assert torch.tensor(2.5, device="tpu").item() == 2.5
    assert bool(torch.tensor(True, device="tpu"))
    assert float(torch.tensor(3.0, device="tpu")) == 3.0
    with pytest.raises(TypeError):
        t.numpy()


@pytest.mark.parametrize("value", [torch.arange(6.).reshape(2, 3), torch.tensor([1, -2, 3]),
                                   torch.tensor([True, False]), torch.tensor(3.25),
                                   torch.randn(3, 4, dtype=torch.bfloat16), torch.arange(2000.)])
def test_repr_matches_cpu(value):
    cpu_repr = repr(value)
    tpu_repr = repr(value.to("tpu"))
    assert "device='tpu:0'" in tpu_repr
    # The suffix can move a line break; the numbers and their layout must match.
    assert tpu_repr.replace(", device='tpu:0'", "").split() == cpu_repr.split() or \
        "".join(tpu_repr.replace(", device='tpu:0'", "").split()) == "".join(cpu_repr.split())


# ---- modules, parameters, threads ---------------------------------------------------------

def test_module_to_keeps_tied_parameters():
    m = nn.Module()
    m.a, m.b = nn.Linear(3, 3), nn.Linear(3, 3)
    m.b.weight = m.a.weight
    w = m.a.weight
    m.to("tpu")
    assert m.a.weight is m.b.weight is w and w.device.type == "tpu"
    before = w.detach().cpu()
    m.to("cpu")
    assert m.a.weight is m.b.weight and torch.equal(m.a.weight.detach(), before)


def test_parameter_keeps_device():
    p = nn.Parameter(torch.ones(2, device="tpu"))
    assert p.device.type == "tpu" and p.requires_grad


def test_cpu_to_tpu_copies_are_thread_safe():
    src = [torch.randn(64, 64) for _ in range(48)]
    out = [None] * len(src)

    def work(i):
        for j in range(i, len(src), 4):
            out[j] = src[j].to("tpu")
    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(torch.equal(o.cpu(), s) for o, s in zip(out, src))
    assert len({o.data_ptr() for o in out}) == len(src)


# ---- serialization ---------------------------------------------------------------------

def test_save_load_round_trip_and_map_location():
    x = torch.randn(2, 3).to("tpu")
    buf = io.BytesIO()
    torch.save({"x": x, "row": x[1]}, buf)
    for loc in (None, "tpu", "cpu"):
        buf.seek(0)
        d = torch.load(buf, map_location=loc)
        want = "cpu" if loc == "cpu" else "tpu"
        assert d["x"].device.type == want
        assert torch.equal(to_cpu(d["x"]), x.cpu())
        if want == "tpu":  # views still share their storage
            assert d["row"].untyped_storage().data_ptr() == d["x"].untyped_storage().data_ptr()


def test_state_dict_load_onto_tpu():
    m = nn.Linear(4, 2)
    buf = io.BytesIO()
    torch.save(m.state_dict(), buf)
    buf.seek(0)
    m2 = nn.Linear(4, 2).to("tpu")
    m2.load_state_dict(torch.load(buf, map_location="tpu"))
    assert torch.equal(m2.weight.detach().cpu(), m.weight.detach())


def test_pickle_deepcopy_storage_clone_legacy_format():
    x = torch.arange(6.).reshape(2, 3).to("tpu")
    assert torch.equal(pickle.loads(pickle.dumps(x)).cpu(), x.cpu())
    assert torch.equal(copy.deepcopy(x).cpu(), x.cpu())
    s = x.untyped_storage().clone()
    assert s.device.type == "tpu" and s.nbytes() == 24 and s.data_ptr() != x.data_ptr()
    buf = io.BytesIO()
    torch.save(x, buf, _use_new_zipfile_serialization=False)
    buf.seek(0)
    assert torch.equal(torch.load(buf).cpu(), x.cpu())
    assert torch.UntypedStorage(16, device="tpu").nbytes() == 16


# ---- AMP ---------------------------------------------------------------------------------

def test_autocast_casts_like_cuda():
    x = torch.randn(4, 8, device="tpu")
    w = torch.randn(3, 8, device="tpu")
    for dtype in (torch.bfloat16, torch.float16):
        with torch.autocast("tpu", dtype=dtype):
            assert (x @ w.t()).dtype == dtype
            assert torch.nn.functional.linear(x, w).dtype == dtype
            assert x.to(dtype).exp().dtype == torch.float32  # float32 policy
    assert torch.float16 in torch.tpu.get_amp_supported_dtype()


# ---- dtypes and promotion ---------------------------------------------------------------

_PROMO_DTYPES = [torch.bool, torch.uint8, torch.int8, torch.int32, torch.int64,
                 torch.float16, torch.bfloat16, torch.float32, torch.float64]


@pytest.mark.parametrize("a_dtype", _PROMO_DTYPES)
@pytest.mark.parametrize("b_dtype", _PROMO_DTYPES)
def test_type_promotion_matches_cpu(a_dtype, b_dtype):
    a = (torch.arange(6).reshape(2, 3) % 3).to(a_dtype)
    b = (torch.arange(3) % 2 + 1).to(b_dtype)
    if a_dtype == b_dtype == torch.bool:
        run_both(torch.mul, a, b, exact=True)
    else:
        run_both(torch.add, a, b, exact=True)
    run_both(lambda x: x * 2.5, a, exact=True)
    run_both(lambda x, y: x * y, a, torch.tensor(3, dtype=b_dtype), exact=True)


# ---- bad input -------------------------------------------------------------------------

def test_device_mismatch_error():
    a = torch.ones(3, device="tpu")
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        a + torch.ones(3)
    assert torch.equal((a + torch.tensor(2.0)).cpu(), torch.full((3,), 3.0))  # 0-dim CPU scalar


def test_shape_mismatch_error():
    with pytest.raises(RuntimeError, match="size|broadcast"):
        torch.ones(3, device="tpu") + torch.ones(4, device="tpu")


_MISTAKES = {
    "matmul shapes": lambda d: torch.randn(2, 3, device=d) @ torch.randn(4, 5, device=d),
    "addmv sizes": lambda d: torch.addmv(torch.ones(4, device=d), torch.ones(3, 2, device=d), torch.ones(2, device=d)),
    "addmv int sizes": lambda d: torch.addmv(*(torch.ones(n, dtype=torch.int64, device=d) for n in [(4,), (3, 2), (2,)]),
                                             beta=0.6),
    "linear in_features": lambda d: torch.nn.functional.linear(torch.randn(3, 5, device=d), torch.randn(2, 4, device=d)),
    "conv channels": lambda d: torch.nn.functional.conv2d(torch.randn(1, 2, 8, 8, device=d), torch.randn(4, 3, 3, 3, device=d)),
    "broadcast": lambda d: torch.randn(2, 3, device=d) * torch.randn(4, device=d),
    "where broadcast": lambda d: torch.where(torch.ones(2, dtype=torch.bool, device=d), torch.randn(3, device=d), 0.0),
    "float @ double": lambda d: torch.randn(2, 2, device=d) @ torch.randn(2, 2, dtype=torch.float64, device=d),
    "addmm dtypes": lambda d: torch.addmm(torch.randn(2, dtype=torch.float64, device=d), torch.randn(2, 2, device=d),
                                          torch.randn(2, 2, device=d)),
    "bmm dtypes": lambda d: torch.bmm(torch.randn(1, 2, 2, device=d), torch.randn(1, 2, 2, dtype=torch.float64, device=d)),
    "dot dtypes": lambda d: torch.dot(torch.randn(2, device=d), torch.randn(2, dtype=torch.float64, device=d)),
    "softmax dim": lambda d: torch.randn(2, 3, device=d).softmax(2),
    "log_softmax dim": lambda d: torch.randn(2, 3, device=d).log_softmax(-3),
    "index_put value shape": lambda d: torch.zeros(3, 4, device=d).__setitem__(
        (slice(None), torch.tensor([0, 1], device=d)), torch.zeros(3, 3, device=d)),
    "unique_consecutive of a 0-d tensor along a dim": lambda d: torch.unique_consecutive(torch.tensor(3, device=d), dim=0),
    "class targets as floats": lambda d: torch.nn.functional.cross_entropy(torch.randn(3, 4, device=d),
                                                                           torch.tensor([1.0, 2.0, 3.0], device=d)),
}


@pytest.mark.parametrize("mistake", list(_MISTAKES))
def test_common_mistakes_raise_the_cpus_error(mistake):
    # the same exception type and words as on the CPU: never a silent
    # promotion or wrap-around, never the meta kernel's own phrasing
    with pytest.raises(Exception) as on_cpu:
        _MISTAKES[mistake]("cpu")
    with pytest.raises(type(on_cpu.value)) as on_tpu:
        _MISTAKES[mistake]("tpu")
    assert str(on_tpu.value) == str(on_cpu.value)


def test_unsupported_dtype_error():
    with pytest.raises(NotImplementedError, match="does not support dtype"):
        torch.ones(3, device="tpu").to(torch.complex32)
    # views that reinterpret float16 as complex32 are refused at the op, not at the first read
    halves = torch.ones(3, 2, dtype=torch.float16, device="tpu")
    with pytest.raises(NotImplementedError, match="view_as_complex: .*does not support dtype torch.complex32"):
        torch.view_as_complex(halves)
    with pytest.raises(NotImplementedError, match="view: .*does not support dtype torch.complex32"):
        halves.view(torch.complex32)
    assert torch.view_as_complex(halves.float()).dtype == torch.complex64


def test_bad_inplace_cast_error():
    with pytest.raises(RuntimeError):
        torch.ones(3, dtype=torch.int32, device="tpu").add_(2.5)


def test_no_kernel_hides_a_composite_ops_autograd():
    """A tpu kernel registered for a CompositeImplicitAutograd op takes the
    composite away from autograd too: without an autograd kernel of its own
    the op's gradients are silently None (true_divide was)."""
    hidden = [name for name in torch._C._dispatch_get_registrations_for_dispatch_key("PrivateUse1")
              if torch._C._dispatch_has_kernel_for_dispatch_key(name, "CompositeImplicitAutograd")
              and not any(torch._C._dispatch_has_kernel_for_dispatch_key(name, key)
                          for key in ("Autograd", "AutogradPrivateUse1"))]
    assert hidden == []
    x, y = torch.tensor(2.0, requires_grad=True), torch.tensor(3.0, requires_grad=True)
    expected = torch.autograd.grad(torch.true_divide(x, y), [x, y])
    tx, ty = (t.detach().to("tpu").requires_grad_() for t in (x, y))
    assert_same(torch.autograd.grad(torch.true_divide(tx, ty), [tx, ty]), expected)


@pytest.mark.parametrize("args", [[], [0], [16], [[1, 2, 3, 255]], [(7, 8)]])
def test_untyped_storage_from_bytes_or_size_as_the_cpu(args):
    """torch.UntypedStorage on tpu from a sequence of byte values (it took only a size)."""
    tpu = torch.UntypedStorage(*args, device="tpu")
    cpu = torch.UntypedStorage(*args, device="cpu")
    assert tpu.device.type == "tpu" and tpu.nbytes() == cpu.nbytes()
    if args and isinstance(args[0], (list, tuple)):
        assert tpu.tolist() == cpu.tolist()
