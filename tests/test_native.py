"""The native helper (torch_tpu/native): PyTorch's view kernels registered for
the tpu key from C++, with the pure-Python kernels as its fallback, and the
tpu device's guard in C++, with PyTorch's Python-backed guard as its
fallback.  Both paths must give the same tensors; where the helper is built,
it must be what PyTorch calls (no crossing into Python per view or per guard
question)."""
import json
import os
import pathlib
import subprocess
import sys

import pytest
import torch

from torch_tpu import native

# built, and not turned off for this run (TORCH_TPU_NATIVE=0 runs the suite on the Python fallbacks)
BUILT = (any(pathlib.Path(native.__file__).parent.glob("_native*.so"))
         and os.environ.get("TORCH_TPU_NATIVE", "1") != "0")

# views of every kind the helper serves, each with what makes it distinct
VIEWS_SCRIPT = r"""
import json, torch
import torch_tpu
x = torch.arange(24.0, device="tpu").reshape(2, 3, 4)
z = torch.complex(torch.ones(3, device="tpu"), torch.arange(3.0, device="tpu"))
views = {
    "view": x.view(6, 4), "t": x[0].t(), "transpose": x.transpose(0, 2), "permute": x.permute(2, 0, 1),
    "as_strided": x.as_strided((3, 2), (1, 5), 2), "unfold": x.unfold(2, 2, 1), "alias": torch.ops.aten.alias(x),
    "unsafe_view": torch.ops.aten._unsafe_view(x, (4, 6)), "reshape_alias": torch.ops.aten._reshape_alias(x, (6, 4), (4, 1)),
    "view_as_real": torch.view_as_real(z), "select_slice": x[1, :, 1:3], "expand": x[:, :1].expand(2, 5, 4),
}
w = torch.ones(3, 4, device="tpu", requires_grad=True)
(w.t() @ torch.ones(3, 2, device="tpu")).sum().backward()  # views in autograd's graph too
out = {k: [list(v.shape), list(v.stride()), v.storage_offset(), v.cpu().tolist(),
           v.untyped_storage().data_ptr() == (x if k != "view_as_real" else z).untyped_storage().data_ptr()]
       for k, v in views.items()}
out["grad"] = w.grad.cpu().tolist()
# what PyTorch asks the device guard (autograd asks it per result and per backward node)
out["guard"] = [str(torch.accelerator.current_stream()), torch.accelerator.device_count(),
                str(torch.accelerator.current_accelerator()), str(w.grad.device)]
print(json.dumps(out))
"""


def _run_views(native_on):
    env = dict(os.environ, TORCH_TPU_NATIVE="1" if native_on else "0")
    done = subprocess.run([sys.executable, "-c", VIEWS_SCRIPT], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _tpu_kernel(op):
    return next(line for line in torch._C._dispatch_dump(op).splitlines() if line.startswith("PrivateUse1:"))


@pytest.mark.skipif(not BUILT, reason="native helper not built (a pure-Python install: see README, Install)")
def test_native_views_give_the_python_kernels_tensors():
    on, off = _run_views(True), _run_views(False)
    assert on == off
    assert all(entry[-1] for name, entry in on.items() if name not in ("grad", "guard")), \
        "a view left its base's storage"


@pytest.mark.skipif(not BUILT, reason="native helper not built (a pure-Python install: see README, Install)")
def test_built_helper_serves_the_views():
    assert native.status().startswith("C++"), native.status()
    for op in ("aten::view", "aten::as_strided", "aten::_unsafe_view", "aten::unfold"):
        assert "views.cpp" in _tpu_kernel(op), _tpu_kernel(op)
    # (not a view: a Python kernel, called from the helper's boxed kernel)
    assert "boxed.cpp" in _tpu_kernel("aten::set_.source_Storage")


def test_without_the_helper_python_serves_the_views():
    code = ("import torch, torch_tpu; from torch_tpu import native; "
            "x = torch.arange(6.0, device='tpu'); "  # (the first tpu tensor loads the kernels)
            "print(native.status()); "
            "print([l for l in torch._C._dispatch_dump('aten::view').splitlines() if l.startswith('PrivateUse1:')][0]); "
            "print(x.view(2, 3).t().cpu().tolist())")
    env = dict(os.environ, TORCH_TPU_NATIVE="0")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    status, kernel, values = done.stdout.strip().splitlines()[-3:]
    assert status == "Python (TORCH_TPU_NATIVE=0)"
    assert "registry.py" in kernel
    assert values == "[[0.0, 3.0], [1.0, 4.0], [2.0, 5.0]]"


def test_helper_for_another_torch_is_not_loaded(monkeypatch):
    # C++ kernels are bound to the ABI of the torch they were built with
    class Built:
        torch_version = "0.0.1"

        @staticmethod
        def register_views():
            raise AssertionError("registered kernels built for another torch")

        @staticmethod
        def register_device_guard():
            raise AssertionError("registered a guard built for another torch")
    monkeypatch.setenv("TORCH_TPU_NATIVE", "1")
    monkeypatch.setitem(sys.modules, "torch_tpu.native._native", Built)
    monkeypatch.setattr(native, "_native", Built, raising=False)
    monkeypatch.setattr(native, "_why_not", None)
    assert native.register_views() == frozenset()
    assert native.register_device_guard() is False
    assert "built for torch 0.0.1" in native.status()


def _python_guard_calls(fn):
    """How many times PyTorch's Python-backed device guard calls into Python while ``fn()`` runs."""
    from torch_tpu.device import registration
    calls = [0]
    original = registration._Guard.type_

    def counted(self):
        calls[0] += 1
        return original(self)
    registration._Guard.type_ = counted
    try:
        fn()
    finally:
        registration._Guard.type_ = original
    return calls[0]


def _forward_backward():
    w = torch.ones(3, 4, device="tpu", requires_grad=True)
    ((w * 2).t() @ torch.ones(3, 2, device="tpu")).relu().sum().backward()
    assert w.grad.cpu().eq(4).all()


@pytest.mark.skipif(not BUILT, reason="native helper not built (a pure-Python install: see README, Install)")
def test_built_helper_guards_the_device_without_python():
    assert _python_guard_calls(_forward_backward) == 0


def test_without_the_helper_the_python_guard_serves_the_device():
    # (the fallback's path, counted: that the count above can fail)
    code = ("import torch, torch_tpu, tests.test_native as t; "
            "print(t._python_guard_calls(t._forward_backward))")
    env = dict(os.environ, TORCH_TPU_NATIVE="0")
    root = pathlib.Path(__file__).resolve().parent.parent
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300, cwd=root)
    assert done.returncode == 0, done.stderr[-3000:]
    assert int(done.stdout.strip().splitlines()[-1]) > 10


@pytest.mark.skipif(not BUILT, reason="native helper not built (a pure-Python install: see README, Install)")
def test_native_output_tensors_are_the_python_paths(monkeypatch):
    """An op's output made by the helper (native/tensors.cpp, storages.cpp)
    is the tensor the Python path makes: geometry, storage, keys, values,
    accounting."""
    import jax
    import numpy as np

    from torch_tpu.storage import buffers
    arr = jax.device_put(np.arange(12, dtype=np.float32).reshape(4, 3))
    metas = [(torch.float32, 48, (4, 3), None), (torch.float32, 48, (3, 4), (1, 3)), (torch.float32, 4, (), ())]
    made = {}
    for native_on, owner, many in ((True, buffers._own_new, buffers._own_many), (False, None, None)):
        monkeypatch.setattr(buffers, "_own_new", owner)
        monkeypatch.setattr(buffers, "_own_many", many)
        outs = [buffers.wrap_as(arr if m[2] else arr[0, 0], *m) for m in metas]
        outs += buffers.OutputTensors(metas)([arr, arr, arr[0, 0]])
        made[native_on] = []
        for t in outs:
            st = t.untyped_storage()
            assert st._tpu_buf is not None  # (kept on the storage's one Python object)
            made[native_on].append((tuple(t.shape), t.stride(), t.storage_offset(), t.dtype, str(t.device),
                                    st.nbytes(), st.resizable(), str(torch._C._dispatch_keys(t)), t.requires_grad,
                                    t.cpu().tolist()))
    assert made[True] == made[False]
    before = torch.tpu.memory_allocated()
    t = buffers.wrap_as(arr, *metas[0])
    assert torch.tpu.memory_allocated() == before + 48
    del t
    assert torch.tpu.memory_allocated() == before


def _made_up_program():
    """(program, swaps): ops as (fn, inputs), each input an array, a number,
    ("out", k) for op k's first result, or another object; and the inputs a
    replay tries at each position instead."""
    import jax
    import numpy as np

    from torch_tpu.eager import fusion
    a, b = jax.device_put(np.ones(3, np.float32)), jax.device_put(np.zeros(3, np.float32))
    host = np.ones(2)  # (an input that is not a jax.Array: never interned by id)
    done = fusion.LazyBuffer((3,), np.float32, 0, 0)
    done.value = b  # a fused result already computed: passed as its array
    f, g, h = (lambda *x: x), (lambda *x: x), (lambda *x: x)
    program = [(f, [a, 1.5]), (g, [("out", 0), a, 2]), (h, [("out", 1), 0.5, ("out", 0), b, done, 2 ** 70]),
               (f, [7, a, a, host, True, 3.0]), (g, [("out", 3), 7])]
    return program, [b, 2.5, 4, ("out", 0), a, done, host, 2 ** 70, 1.0, True]


def _recording_trace(record, program, swaps):
    """Every state fusion keeps after each ``record`` call of ``program``
    recorded again and again (learnt, replayed, then with one input changed
    at each position), with no op run: what the native and the Python
    recorder must agree on."""
    import numpy as np

    from torch_tpu.eager import fusion
    outs = [((3,), np.dtype("float32"))]
    trace = []

    def snapshot(results):
        nodes = [(n.fn, n.refs, n.prefix, n.urgent,
                  [(o.shape, o.dtype, o.node, o.slot, o.value is None, o.early) for o in map(lambda w: w(), n.outputs)
                   if o is not None]) for n in fusion._nodes]
        guess = fusion._guess
        trace.append((nodes, [id(x) for x in fusion._external], sorted(fusion._external_index.items()),
                      [list(p) for p in fusion._numbers], guess and (guess[0], guess[1], guess[2]),
                      [(o.shape, o.dtype, o.node, o.slot) for o in results]))

    def run(changed=None):
        results = []
        for k, (fn, inputs) in enumerate(program):
            inputs = list(inputs)
            if changed is not None and changed[0] == k:
                inputs[changed[1]] = changed[2]
            inputs = [results[x[1]][0] if type(x) is tuple else x for x in inputs]
            results.append(record(fn, inputs, outs * (2 if fn is program[2][0] else 1)))
            snapshot(results[-1])
        fusion._take_pending()  # (dropped unrun)
    run()
    run()
    for k, (_, inputs) in enumerate(program):
        for p in range(len(inputs)):
            for swap in swaps:
                if type(swap) is tuple and swap[1] >= k:
                    continue  # (not recorded yet)
                run((k, p, swap))
                run()
    return trace


@pytest.mark.skipif(not BUILT, reason="native helper not built (a pure-Python install: see README, Install)")
def test_native_fused_recording_is_the_python_paths():
    """fusion.record in C++ (native/recorder.cpp) leaves exactly the state the
    Python ``_record`` leaves -- nodes, refs, prefix hashes, interned arrays
    and numbers, the next prediction -- for predicted ops and for each input
    changed against the prediction; and it records the predicted ones itself."""
    from torch_tpu.eager import fusion
    fusion.flush()
    saved = dict(fusion._next), set(fusion._read_points)
    program, swaps = _made_up_program()
    traces, calls = {}, [0]
    try:
        for name in ("python", "native"):
            fusion._next.clear()
            fusion._read_points.clear()
            fusion._take_pending()

            def counted(*args, **kwargs):
                calls[0] += 1
                return fusion._record(*args, **kwargs)
            record = fusion._record if name == "python" else native.fused_recorder(vars(fusion), counted)
            traces[name] = _recording_trace(record, program, swaps)
    finally:
        fusion._next.clear()
        fusion._next.update(saved[0])
        fusion._read_points.clear()
        fusion._read_points.update(saved[1])
        fusion._take_pending()
    python, made = traces["python"], traces["native"]
    assert len(made) == len(python) > 1000
    for k, (x, y) in enumerate(zip(made, python)):
        assert x == y, f"record call {k}: native {x} != python {y}"
    assert calls[0] < len(made) / 2  # (the predicted calls did not go to Python)


LEDGER_SCRIPT = r"""
import json, threading, torch
import torch_tpu
from torch_tpu.storage import buffers, memory
import jax, numpy as np
torch.tpu.synchronize()
start = memory.stats()
rows = []

def row(tag, *tensors):
    now = memory.stats()
    rows.append([tag, {k: now[k] - start.get(k, 0) for k in now if "peak" not in k},
                 torch.tpu.max_memory_allocated() - start["allocated_bytes.all.current"],
                 [t.untyped_storage().data_ptr() % 64 for t in tensors]])
a = torch.empty(1000, 25, device="tpu"); row("empty", a)
b = a * 2 + 1; row("ops", b)
c = torch.empty(0, device="tpu"); row("empty storage", c)
torch.tpu.reset_peak_memory_stats(); row("reset peak")
del a; row("death")
holder = [b]
del b
t = threading.Thread(target=holder.clear); t.start(); t.join(); row("death on another thread")
arr = jax.device_put(np.ones((4, 3), np.float32))
outs = buffers.OutputTensors([(torch.float32, 48, (4, 3), None), (torch.float32, 48, (3, 4), (1, 3))])([arr, arr])
row("graph outputs", *outs)
d = buffers.wrap_as(arr, torch.float32, 48, (3, 4), (1, 3)); row("strided output", d)
addrs = [o.untyped_storage().data_ptr() for o in outs] + [d.untyped_storage().data_ptr()]
rows.append(["address steps", [y - x for x, y in zip(addrs, addrs[1:])]])
del outs, d, c; row("all dead")
rows.append(type(memory.allocate).__name__)  # (which ledger counted)
print(json.dumps(rows))
"""


def test_native_ledger_counts_as_the_python_one():
    """The device ledger in C++ (native/storages.cpp) gives the counts, the
    peak and the address spacing the Python one (storage/memory.py) gives,
    deaths on other threads included."""
    runs = []
    for flag in ("1", "0"):
        env = dict(os.environ, TORCH_TPU_NATIVE=flag)
        done = subprocess.run([sys.executable, "-c", LEDGER_SCRIPT], env=env, capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    assert [run.pop() for run in runs] == ["builtin_function_or_method", "function"]
    assert runs[0] == runs[1]
    assert runs[0][-1][1]["allocated_bytes.all.current"] == 0


@pytest.mark.skipif(not BUILT, reason="native helper not built (a pure-Python install: see README, Install)")
@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_built_helper_enters_a_cached_op_without_the_kernels_python(mode):
    """The dispatcher enters a plain kernel through native/entry.cpp: a cached
    call runs its matcher and launch without Kernel.__call__; a call with
    keywords (or anything it does not take) still reaches the Kernel."""
    from torch_tpu.ops import registry
    frames = []

    def profile(frame, event, arg):
        if event == "call" and frame.f_code.co_filename == registry.__file__:
            frames.append(frame.f_code.co_name)
    x, y = torch.ones(4, device="tpu"), torch.full((4,), 2.0, device="tpu")
    with torch.tpu.set_eager_mode(mode):
        for _ in range(3):  # (read each time: a fused program repeats between host reads)
            torch.add(x * y, y).cpu()
        sys.setprofile(profile)
        try:
            z = torch.add(x * y, y)
            cached = list(frames)
            z = torch.add(x * y, y, alpha=2)  # (alpha: a keyword the entry hands to the Kernel)
        finally:
            sys.setprofile(None)
        assert z.cpu().tolist() == [6.0] * 4
    assert cached == [], cached
    assert "__call__" in frames[len(cached):]


@pytest.mark.skipif(not BUILT, reason="native helper not built (a pure-Python install: see README, Install)")
@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_entry_takes_a_cached_signature_only_under_its_default_dtype(mode):
    """The entry reads PyTorch's default dtype itself (no call of
    torch.get_default_dtype): an integer tensor times a float takes the
    default dtype of the moment, as on the CPU, cached or not."""
    x = torch.arange(3, device="tpu")
    saved = torch.get_default_dtype()
    try:
        with torch.tpu.set_eager_mode(mode):
            for dtype in (torch.float32, torch.float64, torch.float32, torch.float64):
                torch.set_default_dtype(dtype)
                for _ in range(3):  # (cached after the first)
                    y = x * 0.5
                    assert y.dtype == (torch.arange(3) * 0.5).dtype == dtype
                    assert y.cpu().tolist() == [0.0, 0.5, 1.0]
    finally:
        torch.set_default_dtype(saved)


@pytest.mark.skipif(not BUILT, reason="native helper not built (a pure-Python install: see README, Install)")
def test_entry_notes_strict_launches_in_the_bounded_queue():
    """A cached strict op's launch is appended to pending's queue in C++
    (no pending.note frame), and the queue is pruned past its limit as
    note prunes it: synchronize still waits for every launch."""
    from torch_tpu.eager import pending
    frames = []

    def profile(frame, event, arg):
        if event == "call" and frame.f_code.co_filename == pending.__file__:
            frames.append(frame.f_code.co_name)
    x = torch.ones(64, 64, device="tpu")
    with torch.tpu.set_eager_mode("strict"):
        y = x + 1
        torch.tpu.synchronize()
        before = len(pending._pending)
        sys.setprofile(profile)
        try:
            y = y + 1
        finally:
            sys.setprofile(None)
        assert frames == [] and len(pending._pending) == before + 1
        for _ in range(3 * pending._LIMIT):
            y = y + 1
        assert len(pending._pending) <= pending._LIMIT
        torch.tpu.synchronize()
        assert not pending._pending
    assert torch.equal(y.cpu(), torch.full((64, 64), 3.0 + 3 * pending._LIMIT))


@pytest.mark.skipif(not BUILT, reason="native helper not built (a pure-Python install: see README, Install)")
def test_a_launch_reading_the_newest_noted_result_replaces_it():
    """A chain of strict ops holds one queue entry (each launch reads the one
    before it, so waiting for the last waits for all: none is pruned one by
    one); launches that do not read the newest are each kept; synchronize
    still leaves every result computed."""
    from torch_tpu.eager import pending
    x, y = torch.ones(64, 64, device="tpu"), torch.full((64, 64), 2.0, device="tpu")
    with torch.tpu.set_eager_mode("strict"):
        z = x * y
        for _ in range(2):  # (compiled and cached: the native entry's path from now on)
            z = z * 1.5 + y
        torch.tpu.synchronize()
        z = z * 1.5 + y
        assert len(pending._pending) == 1
        for _ in range(48):
            z = z * 1.5 + y
        assert len(pending._pending) == 1
        newest = pending._pending[-1]
        a, b = x + 1, y + 1  # (b reads nothing a wrote: both kept)
        assert len(pending._pending) == 3 and pending._pending[0] is newest
        results = list(pending._pending)
        torch.tpu.synchronize()
        assert not pending._pending and all(r.is_ready() for r in results)
    expected = torch.full((64, 64), 2.0)
    for _ in range(51):
        expected = expected * 1.5 + 2.0
    assert torch.equal(z.cpu(), expected)
    assert torch.equal(a.cpu(), torch.full((64, 64), 2.0)) and torch.equal(b.cpu(), torch.full((64, 64), 3.0))


@pytest.mark.skipif(native.call_matcher() is None, reason="native helper not built")
@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_entry_takes_views_at_run_time_offsets_and_strict_shapes_past_the_recent_ones(mode):
    """Rows of one buffer (an executable reading the rows' offsets at run
    time) and, in strict mode, a kernel's sixth signature back (found by its
    arguments' shapes, past the four recent ones) run through the native
    entry without the Kernel's Python, and give the CPU's values."""
    from torch_tpu.ops import registry
    frames = []

    def profile(frame, event, arg):
        if event == "call" and frame.f_code.co_filename == registry.__file__:
            frames.append(frame.f_code.co_name)
    base = torch.arange(12.0).reshape(3, 4)
    rows = base.to("tpu")
    mats = [torch.randn(k, 3) for k in range(2, 8)]  # six shapes of mm: past the recent four
    weight = torch.randn(3, 2)
    tpu_mats, tpu_weight = [m.to("tpu") for m in mats], weight.to("tpu")

    at = range(3)

    def run():
        out = [torch.mul(rows[i], 2.0) for i in at] + [torch.add(rows[2], rows[0])]
        return out + [torch.mm(m, tpu_weight) for m in tpu_mats]
    with torch.tpu.set_eager_mode(mode):
        for _ in range(3):
            [t.cpu() for t in run()]
        sys.setprofile(profile)
        try:
            got = run()
        finally:
            sys.setprofile(None)
        got = [t.cpu() for t in got]
    assert frames == [], frames
    want = [base[i] * 2.0 for i in at] + [base[2] + base[0]] + [m @ weight for m in mats]
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)


# ---- kernels called from the helper's boxed kernel (native/boxed.cpp) ----

_PROBE_SCHEMA = ("(Tensor x, Tensor? other=None, Scalar s=1, int[] sizes=[], *, ScalarType? dtype=None, "
                 "Layout? layout=None, MemoryFormat? memory_format=None, float scale=1.0) -> (Tensor, Tensor)")
_probe_lib = None


def _probes():
    """Two ops of one schema, their tpu kernels recording what they are
    called with: one registered through the helper, one through torch.library."""
    global _probe_lib
    seen = {}

    def recorder(tag):
        def kernel(*args, **kwargs):
            if kwargs.get("scale") == -1.0:
                raise ValueError(f"probe {tag} refused")
            described = [("tensor", tuple(a.shape)) if isinstance(a, torch.Tensor) else a for a in args]
            seen[tag] = (described, {k: type(v).__name__ + repr(v) for k, v in kwargs.items()},
                         [type(a).__name__ for a in args])
            return args[0], args[0] * 2
        return kernel
    if _probe_lib is None:
        _probe_lib = [torch.library.Library("tpu_native_probe", "DEF"),
                      torch.library.Library("tpu_native_probe", "IMPL")]
        for name in ("boxed", "holder"):
            _probe_lib[0].define(name + _PROBE_SCHEMA)
    from torch_tpu.ops import registry
    registry._native_register(torch.ops.tpu_native_probe.boxed.default, recorder("boxed"))
    _probe_lib[1].impl("holder", recorder("holder"), "PrivateUse1")
    return seen


@pytest.mark.skipif(not BUILT, reason="native helper not built (a pure-Python install: see README, Install)")
@pytest.mark.parametrize("args, kwargs", [
    ((), {}),
    ((None, 2.5), {}),                                  # a defaulted argument before a given one stays
    (("other", 1, [2, 3]), {}),                         # a trailing argument equal to its default is left out
    ((None, True), {"dtype": torch.float16, "scale": 0.5}),
    ((None, 1 + 2j), {"layout": torch.strided, "memory_format": torch.channels_last}),
    ((None, 3), {"scale": 1.0}),                        # a keyword at its default is left out
], ids=["tensor", "scalar", "list", "dtype", "layout-format", "default-keyword"])
def test_boxed_kernel_calls_python_kernels_as_torch_library_does(args, kwargs):
    seen = _probes()
    x = torch.ones(2, 3, device="tpu")
    args = tuple(x[0] if a == "other" else a for a in args)
    boxed = torch.ops.tpu_native_probe.boxed(x, *args, **kwargs)
    holder = torch.ops.tpu_native_probe.holder(x, *args, **kwargs)
    assert seen["boxed"] == seen["holder"]
    assert "boxed.cpp" in _tpu_kernel("tpu_native_probe::boxed")
    for got, want in zip(boxed, holder):
        assert torch.equal(got.cpu(), want.cpu())


@pytest.mark.skipif(not BUILT, reason="native helper not built (a pure-Python install: see README, Install)")
def test_boxed_kernel_raises_the_python_kernels_error():
    _probes()
    x = torch.ones(2, device="tpu")
    for op in (torch.ops.tpu_native_probe.boxed, torch.ops.tpu_native_probe.holder):
        with pytest.raises(ValueError, match="refused"):
            op(x, scale=-1.0)


@pytest.mark.skipif(not BUILT, reason="native helper not built (a pure-Python install: see README, Install)")
def test_registered_kernels_are_called_from_the_helper():
    # (torch.library's holder costs ~2 us a call, ~3 us more a Python number in a tensor position)
    for op in ("aten::mul.Tensor", "aten::add.Tensor", "aten::_foreach_add_.List", "aten::index.Tensor"):
        assert "boxed.cpp" in _tpu_kernel(op), _tpu_kernel(op)


@pytest.mark.parametrize("dtype", [torch.int32, torch.float16, torch.bool, torch.bfloat16, torch.complex64])
def test_python_numbers_in_tensor_positions_keep_their_kind(dtype):
    # ``x * 2`` passes a "wrapped number" tensor: the kernel must see the
    # number's Python type (int, float, bool, complex), which decides the
    # result's dtype
    x = torch.tensor([1, 0, 3], dtype=dtype)
    numbers = (2, 2.5, True, -3) + ((1 + 2j,) if dtype != torch.float16 else ())  # (complex32: not on tpu)
    for number in numbers:
        subtracts = dtype != torch.bool and not isinstance(number, bool)  # (PyTorch refuses bool subtraction)
        for fn in (torch.mul, torch.add) + ((torch.sub,) if subtracts else ()):
            want = fn(x, number)
            got = fn(x.to("tpu"), number)
            assert got.dtype == want.dtype, (fn, number)
            torch.testing.assert_close(got.cpu(), want)
