"""The first call of an op with an input shape never seen before builds one
XLA executable, the op's own, as a bare ``jax.jit`` of it would: no
executable for allocating its result (``empty``) and none for a device check
of an index or divisor that is already computed (``eager.checks`` looks at
those on the host).  Counted, not timed: ``benchmarks/first_call.py`` times it."""
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import torch_tpu  # noqa: F401
from torch_tpu import profiler
from torch_tpu.eager import checks
from helpers import strict  # noqa: F401  (no CPU fallback)

_rows = itertools.count(3001)  # a shape no other test uses


def _fresh(*tail, dtype=torch.float32):
    return torch.ones(next(_rows), *tail, dtype=dtype).to("tpu")


def _device_index(n, high):
    """An index computed on the device (its values unknown to the host), finished."""
    idx = torch.arange(n).remainder(high).to("tpu") + 0
    torch.tpu.synchronize()
    return idx


# name -> fn(a, idx): ``a`` of a fresh shape (n, 5), ``idx`` a finished device index into its rows
OPS = {
    "add": lambda a, idx: a + a,
    "sum(dim)": lambda a, idx: a.sum(1),
    "t().contiguous()": lambda a, idx: a.t().contiguous(),
    "mm": lambda a, idx: a @ a.t(),
    "empty": lambda a, idx: torch.empty(a.shape[0], 3, device=a.device),
    "zeros": lambda a, idx: torch.zeros(a.shape[0], 3, device=a.device),
    "new_zeros": lambda a, idx: a.new_zeros(a.shape[0] + 1),
    "index (device index)": lambda a, idx: a[idx],
    "index_select": lambda a, idx: a.index_select(0, idx),
}
EXECUTABLES = {"empty": 0, "zeros": 0, "new_zeros": 0}  # others: 1, the op's own
# a small zeros' first call takes a host-made zero buffer; its second compiles the cached fill
AGAIN = {"zeros": 1, "new_zeros": 1}


@pytest.mark.parametrize("mode", ["strict", "debug"])
@pytest.mark.parametrize("name", list(OPS))
def test_first_call_builds_only_the_ops_executable(name, mode):
    op = OPS[name]
    for _ in range(2):  # (JAX's one-time casts of Python scalars, on both zeros paths)
        torch.zeros(2, device="tpu")
    a = _fresh(5)
    idx = _device_index(a.shape[0] // 2, a.shape[0])
    with torch.tpu.set_eager_mode(mode):
        before = profiler.xla_compiles()
        out = op(a, idx)
        torch.tpu.synchronize()
        assert profiler.xla_compiles() - before == EXECUTABLES.get(name, 1)
        before = profiler.xla_compiles()
        op(a, idx)  # the same shape again: nothing new
        torch.tpu.synchronize()
        assert profiler.xla_compiles() - before == AGAIN.get(name, 0)
        before = profiler.xla_compiles()
        op(a, idx)
        torch.tpu.synchronize()
        assert profiler.xla_compiles() == before
    if name != "empty":
        assert torch.equal(out.cpu(), op(a.cpu(), idx.cpu()))


@pytest.mark.parametrize("host", [True, False], ids=["host", "device"])
def test_index_check_raises_at_the_next_host_wait(host, monkeypatch):
    """An out-of-range device index raises PyTorch's IndexError at the next
    host wait, whether its range was read on the host (a small, computed
    index) or summarized on the device (a larger or unfinished one)."""
    if not host:
        monkeypatch.setattr(checks, "_HOST_NUMEL", 0)
    a = torch.ones(4, 2).to("tpu")
    idx = torch.tensor([0, 1, 2, 3]).to("tpu") + 2  # 5 is out of range
    torch.tpu.synchronize()
    out = a[idx]  # no error yet: strict mode does not wait for the device at the op
    assert isinstance(checks._pending[-1][0], np.ndarray) == host  # host: the summary is already a host value
    with pytest.raises(IndexError, match="index 5 is out of bounds for dimension 0 with size 4"):
        out.cpu()
    assert not checks._pending


@pytest.mark.parametrize("host", [True, False], ids=["host", "device"])
def test_divisor_check_raises_in_debug_mode_at_the_op(host, monkeypatch):
    if not host:
        monkeypatch.setattr(checks, "_HOST_NUMEL", 0)
    x = torch.tensor([4, 6]).to("tpu")
    d = torch.tensor([2, 1]).to("tpu") - 1  # [1, 0]: computed on the device
    torch.tpu.synchronize()
    with torch.tpu.set_eager_mode("debug"), pytest.raises(RuntimeError, match="ZeroDivisionError"):
        x // d


def test_host_check_reads_a_view_through_its_strides():
    """The host reads the view, not its whole buffer: an in-range view of a
    storage holding out-of-range values passes."""
    a = torch.ones(3, 2).to("tpu")
    base = torch.tensor([9, 0, 9, 2, 9, 1]).to("tpu") + 0
    torch.tpu.synchronize()
    idx = base[1::2]  # [0, 2, 1]
    assert torch.equal(a[idx].cpu(), torch.ones(3, 2))
    with pytest.raises(IndexError, match="index 9 is out of bounds"):
        a[base[0::2]].cpu()


VIEWS = {
    "slice": lambda a: a[1:3, ::2],
    "transpose": lambda a: a.t(),
    "row": lambda a: a[2],
    "column": lambda a: a[:, 3],
    "expand": lambda a: a[:1].expand(3, 5),
    "flat slice": lambda a: a.view(-1)[7:9],
}


@pytest.mark.parametrize("name", list(VIEWS))
def test_reading_a_view_to_the_host_compiles_nothing(name):
    """``.cpu()`` of a view and ``.item()`` of one element cut the view on the
    host: no executable per view shape and offset (a loop of ``x[i].item()``
    once built one per ``i``)."""
    x = torch.randn(next(_rows), 5)
    view = VIEWS[name]
    t = view(x.to("tpu"))
    torch.tpu.synchronize()
    before = profiler.xla_compiles()
    host = t.cpu()
    places = [np.unravel_index(k, t.shape) for k in range(2)]
    items = [t[p].item() for p in places]  # 0-dim views at three offsets
    assert profiler.xla_compiles() == before
    assert torch.equal(host, view(x))
    assert items == [view(x)[p].item() for p in places]


def test_reading_a_large_tensor_element_by_element_compiles_once():
    """Past the host-cut size, the second small read of one buffer moves the
    buffer once (``for v in t`` / ``all(t)`` compiled a reader per offset);
    a write makes a new buffer, so no stale value is read."""
    from torch_tpu.eager import access
    n = access._HOST_VIEW_NUMEL * 2
    t = torch.arange(n, dtype=torch.float32, device="tpu") * 2
    t[0].item()  # the jitted reader, once
    before = profiler.xla_compiles()
    got = [t[k].item() for k in (1, 5, n - 1, 12345)] + [t[3:6].tolist()]
    assert profiler.xla_compiles() == before
    assert got == [2.0, 10.0, 2.0 * (n - 1), 24690.0, [6.0, 8.0, 10.0]]
    t[5] = -1.0
    assert t[5].item() == -1.0 and t[6].item() == 12.0


# -- cheaper XLA:CPU compile options for small exact programs ------------------

def _options_of(fn, *shapes):
    import jax
    from torch_tpu import runtime
    return runtime.compile_options(jax.make_jaxpr(fn)(*[np.zeros(s, np.float32) for s in shapes]))


def test_compile_options_only_for_small_exact_programs(monkeypatch):
    """The cheaper options go to a program of exact primitives (arithmetic,
    comparisons, casts, indexing, reductions) whose every array has at most
    FAST_COMPILE_MAX_ELEMENTS elements; transcendental functions (whose
    approximations differ between XLA's emitters) and large programs keep
    XLA's defaults; TORCH_TPU_FAST_COMPILE=0 turns them off, "all" drops the size bound."""
    import jax.numpy as jnp
    from torch_tpu import runtime
    limit = runtime.FAST_COMPILE_MAX_ELEMENTS
    exact = [lambda x: x * 2 + 1, lambda x: x.sum(0), lambda x: jnp.where(x > 0, x, -x)[::2],
             lambda x: jnp.cumsum(x.astype(jnp.int64), 0), lambda x: x @ x[:8], lambda x: x[jnp.array([3, 1])]]
    for fn in exact:
        assert _options_of(fn, (256, 8)) == runtime.FAST_COMPILE_OPTIONS  # above the level-0 tier's bound
    for fn in [jnp.sin, jnp.exp, jnp.tanh, lambda x: x ** 0.5 + 1, lambda x: jnp.log(x).sum(),
               lambda x: x.T + 1, lambda x: x.at[jnp.array([1, 1])].add(1.0)]:  # slower launches: see runtime
        assert _options_of(fn, (256, 8)) is None  # (a scatter this small gets the level-0 tier: below)
    assert _options_of(lambda x: x + 1, (limit,)) is not None
    assert _options_of(lambda x: x + 1, (limit + 1,)) is None
    assert _options_of(lambda x: jnp.broadcast_to(x, (2, limit)).sum(0), (limit,)) is None  # an intermediate counts
    monkeypatch.setenv("TORCH_TPU_FAST_COMPILE", "all")
    assert _options_of(lambda x: x + 1, (limit + 1,)) == runtime.TINY_COMPILE_OPTIONS
    assert _options_of(lambda x: x * 2 + 1, (limit + 1,)) == runtime.FAST_COMPILE_OPTIONS
    monkeypatch.setenv("TORCH_TPU_FAST_COMPILE", "emitters")
    assert _options_of(lambda x: x + 1, (8,)) == runtime.FAST_COMPILE_OPTIONS
    assert _options_of(jnp.sin, (8,)) is None
    monkeypatch.setenv("TORCH_TPU_FAST_COMPILE", "0")
    assert _options_of(lambda x: x + 1, (8,)) is None


@pytest.mark.parametrize("mode", ["strict", "debug"])
def test_eager_kernels_get_the_options_only_where_intended(mode, monkeypatch):
    """The registry's first call builds the kernel with the cheaper options
    exactly when its traced program qualifies (seen from what
    ``runtime.small_program_jit`` returns: a jit whose ``nestable`` is another)."""
    from torch_tpu import runtime
    built = []
    real = runtime.small_program_jit

    def spy(fn, fun, args):
        out = real(fn, fun, args)
        built.append((fun.__name__, runtime.nestable(out) is not out))
        return out
    monkeypatch.setattr(runtime, "small_program_jit", spy)
    small, large = _fresh(5), torch.ones(runtime.FAST_COMPILE_MAX_ELEMENTS + next(_rows)).to("tpu")
    torch.tpu.synchronize()
    with torch.tpu.set_eager_mode(mode):
        for out in (small + small, torch.sin(small), large + large, small.sum(0)):
            out.cpu()
    assert [f for _, f in built] == [True, False, False, True], built


def test_a_kernel_built_with_options_runs_inside_a_fused_chain():
    """A jit with compile options cannot be nested in another trace: the
    fused chain calls the same kernel's plain jit (``runtime.nestable``), and
    the result is the strict one, bit for bit."""
    a = _fresh(7) * 1.5
    torch.tpu.synchronize()
    strict_out = ((a + a) * 3 - a).sum(1).cpu()  # builds the kernels, with the options
    with torch.tpu.set_eager_mode("fused"):
        fused_out = ((a + a) * 3 - a).sum(1).cpu()
    assert torch.equal(strict_out, fused_out)


# Exact programs over the primitives EXACT_PRIMITIVES lists: same bits with
# and without the cheaper options (float64 and reduced floats included).
EXACT_PROGRAMS = {
    "arith": lambda x, y: (x * y + x - y / (jnp.abs(y) + 1), -x, jnp.maximum(x, y), jnp.minimum(x, y)),
    "round": lambda x, y: (jnp.floor(x), jnp.ceil(x), jnp.round(x), jnp.sign(x), jnp.sqrt(jnp.abs(x))),
    "rem": lambda x, y: (jnp.fmod(x, y + 3), jnp.remainder(x, y + 3), x ** 3),
    "compare": lambda x, y: (jnp.where(x > y, x, y * 2), x == y, jnp.isfinite(x / y), jnp.clip(x, -1, 1)),
    "cast": lambda x, y: ((x * 1000).astype(jnp.int32), (x * 1000).astype(jnp.int64) >> 3, x.astype(jnp.float16)),
    "reduce": lambda x, y: (x.sum(), x.sum(0), x.sum(1), x.max(1), x.min(0), x.argmax(1), x.prod(1), (x * x).mean(0)),
    "scan": lambda x, y: (jnp.cumsum(x, 0), jnp.cumsum(x, 1), jnp.cumprod(x / 4 + 1, 1)),
    "index": lambda x, y: (x[jnp.array([3, 0, 5, 3])], x[::-2, 1::3] + 1, jnp.concatenate([x, y], 1)),
    "matmul": lambda x, y: (x @ y.reshape(70, 33), jnp.sort(x, 1)),
}


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
def test_cheaper_options_give_the_same_bits(dtype):
    import jax
    from torch_tpu import runtime
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((33, 70)) * 5, dtype)
    y = jnp.asarray(rng.standard_normal((33, 70)), dtype)
    for name, fn in EXACT_PROGRAMS.items():
        assert runtime.compile_options(jax.make_jaxpr(fn)(x, y)) == runtime.FAST_COMPILE_OPTIONS, name
        default = jax.jit(fn)(x, y)
        fast = jax.jit(fn, compiler_options=runtime.FAST_COMPILE_OPTIONS)(x, y)
        for a, b in zip(jax.tree.leaves(default), jax.tree.leaves(fast)):
            assert np.asarray(a).tobytes() == np.asarray(b).tobytes(), (name, dtype)


def test_an_out_kernel_built_with_options_writes_through_out():
    """out= into a tpu tensor composes the op's kernel with the write in one
    program: a kernel with compile options enters it through its plain jit."""
    a = _fresh(6) + 0.5
    out = torch.empty(a.shape[0], 6).to("tpu")
    torch.add(a, a, out=out)
    assert torch.equal(out.cpu(), a.cpu() * 2)
    torch.mul(a[:, :3], 3, out=out[:, :3])  # into a view of out
    assert torch.equal(out.cpu()[:, :3], a.cpu()[:, :3] * 3)


# -- the level-0 tier for tiny programs -----------------------------------------

def _tier(fn, *args):
    import jax
    from torch_tpu import runtime
    options = runtime.compile_options(jax.make_jaxpr(fn)(*args))
    return {None: "default", "fast": "fast", "tiny": "tiny"}[
        options and ("tiny" if options == runtime.TINY_COMPILE_OPTIONS else "fast")]


def test_level0_tier_bounds_and_contraction_guard():
    """Level 0 goes to tiny exact programs (scans: tinier) with no float
    product that can reach a float add in the same program (LLVM would fuse
    the pair into one FMA at level 2, not at 0) and no complex numbers."""
    from torch_tpu import runtime
    n, scan_n = runtime.TINY_COMPILE_MAX_ELEMENTS, runtime.TINY_SCAN_MAX_ELEMENTS
    f32 = lambda *shape: np.zeros(shape, np.float32)  # noqa: E731
    tiny = [lambda x: x + 1, lambda x: x * 2, lambda x: jnp.abs(x).max(), lambda x: x.sum(0) / 3,
            lambda x: (x.astype(jnp.int64) * 3 + 1), lambda x: jnp.where(x > 0, x, -x)[::2] - 1,
            lambda x: x[jnp.array([3, 1])] + x[0], lambda x: x.mean(), lambda x: (x * 2).max(0)]
    for fn in tiny:
        assert _tier(fn, f32(8, 16)) == "tiny"
        assert _tier(fn, f32(n // 8 + 1, 8)) == "fast"  # over the bound
    for fn in [lambda x: x * 2 + 1, lambda x: 1 - x / 3, lambda x: (x * x).sum(), lambda x: -(x * 2) + x,
               lambda x: jnp.where(x > 0, x * 2, x) + 1, lambda x: x.mean() + 1, lambda x: jnp.cumsum(x ** 2),
               lambda x: x @ x[:4].reshape(16, 4)]:  # a product reaching an add
        assert _tier(fn, f32(8, 16)) == "fast"
    assert _tier(lambda x: (x * 2).astype(jnp.int32) + 1, f32(8, 16)) == "tiny"  # an integer add: exact
    assert _tier(lambda x, y: x + y * 1.0, f32(8, 16), f32(8, 16)) == "tiny"  # add's alpha: y * 1 is y
    assert _tier(lambda x, y: x - y * -1.0, f32(8, 16), f32(8, 16)) == "tiny"
    assert _tier(lambda x, y: x + y * 1.5, f32(8, 16), f32(8, 16)) == "fast"
    assert _tier(lambda x: x + 1, np.zeros((8,), np.complex64)) == "fast"
    scatter_add = lambda x, v: x.at[jnp.array([1, 1, 3])].add(v)  # noqa: E731  (tiny tier only)
    assert _tier(scatter_add, f32(n), f32(3)) == "tiny"
    assert _tier(scatter_add, f32(n + 1), f32(3)) == "default"
    assert _tier(lambda x, v: x.at[jnp.array([1, 1, 3])].add(v * 2), f32(8), f32(3)) != "tiny"  # a product added
    assert _tier(lambda x: jnp.cumsum(x), f32(scan_n)) == "tiny"
    assert _tier(lambda x: jnp.cumsum(x), f32(scan_n + 1)) == "fast"


def test_level0_would_change_a_contracted_result():
    """Why the guard exists: ``x * y + z`` is one FMA at level 2 and two
    roundings at level 0, and some elements differ; the guard keeps such a
    program at level 2, whose bits are today's."""
    import jax
    from torch_tpu import runtime
    rng = np.random.default_rng(1)
    x, y, z = (jnp.asarray(rng.standard_normal(256), jnp.float32) for _ in range(3))
    fn = lambda x, y, z: x * y + z  # noqa: E731
    default = np.asarray(jax.jit(fn)(x, y, z))
    level0 = np.asarray(jax.jit(fn, compiler_options=runtime.TINY_COMPILE_OPTIONS)(x, y, z))
    assert (default != level0).any()  # if XLA ever stops contracting, the guard may go
    assert _tier(fn, x, y, z) == "fast"
    fast = np.asarray(jax.jit(fn, compiler_options=runtime.FAST_COMPILE_OPTIONS)(x, y, z))
    assert default.tobytes() == fast.tobytes()


# Programs the level-0 tier admits, over every kind of primitive EXACT_PRIMITIVES
# lists (x, y of shape (6, 10)): same bits as XLA's defaults.
TINY_PROGRAMS = {
    "arith": lambda x, y: (x + y - 1, x * y, x / (jnp.abs(y) + 1), -x, jnp.maximum(x, y), jnp.minimum(x, y),
              x + y * 1.0, x - y * -1.0),
    "round": lambda x, y: (jnp.floor(x), jnp.ceil(x), jnp.round(x), jnp.sign(x), jnp.sqrt(jnp.abs(x))),
    "rem": lambda x, y: (jnp.fmod(x, y + 3), jnp.remainder(x, y + 3), x ** 3, x * x),
    "compare": lambda x, y: (jnp.where(x > y, x, y - 2), x == y, jnp.isfinite(x / y), jnp.clip(x, -1, 1)),
    "cast": lambda x, y: ((x * 1000).astype(jnp.int32), (x * 1000).astype(jnp.int64) >> 3, x.astype(jnp.float16),
                          x.astype(jnp.int64) * 7 + 3, jax.lax.bitcast_convert_type(x, jnp.uint8 if x.dtype.itemsize == 1
                                                                                   else jnp.int16 if x.dtype.itemsize == 2
                                                                                   else jnp.int32 if x.dtype.itemsize == 4 else jnp.int64)),
    "reduce": lambda x, y: (x.sum(), x.sum(0), x.sum(1), x.max(1), x.min(0), x.argmax(1), x.argmin(0), x.prod(1),
                            x.mean(0), (x > 0).any(1), (x > 0).all(0)),
    "scan": lambda x, y: (jnp.cumsum(x, 0), jnp.cumsum(x[:2], 1), jnp.cumprod(jnp.abs(x[:2]) + 0.5, 1),
                          jax.lax.cummax(x, 0), jax.lax.cummin(x, 1)),
    "index": lambda x, y: (x[jnp.array([3, 0, 5, 3])], x[::-2, 1::3] + 1, jnp.concatenate([x, y], 1),
                           jnp.pad(x, 1), x[::-1], jax.lax.dynamic_slice(x, (1, 2), (2, 3)),
                           jax.lax.dynamic_update_slice(x, y[:2, :2], (1, 1)), jnp.sort(x, 1), jnp.argsort(x[0])),
    "iota": lambda x, y: (jnp.arange(60, dtype=x.dtype).reshape(6, 10) - x, jnp.eye(6, 10, dtype=x.dtype) + y),
    "scatter": lambda x, y: (x.reshape(-1).at[jnp.array([3, 3, 0, 59, 3, -1])].add(y.reshape(-1)[:6]),
                             x.at[jnp.array([1, 1, 4])].set(y[:3]), jnp.zeros(7, x.dtype).at[jnp.array([2, 2, 2])].add(x[0, 3:6])),
    "int": lambda x, y: ((x * 100).astype(jnp.int64) % 7, (x * 100).astype(jnp.int32) // 3,
                         jnp.cumsum((x * 9).astype(jnp.int64), 1), ((x * 9).astype(jnp.int32) & 5) ^ 3),
}


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
def test_level0_tier_gives_the_same_bits(dtype):
    import jax
    from torch_tpu import runtime
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((6, 10)) * 5, dtype)
    y = jnp.asarray(rng.standard_normal((6, 10)), dtype)
    x = x.at[0, :3].set(jnp.asarray([np.inf, -np.inf, np.nan], dtype))  # special values too
    for name, fn in TINY_PROGRAMS.items():
        assert _tier(fn, x, y) == "tiny", name
        default = jax.jit(fn)(x, y)
        level0 = jax.jit(fn, compiler_options=runtime.TINY_COMPILE_OPTIONS)(x, y)
        for k, (a, b) in enumerate(zip(jax.tree.leaves(default), jax.tree.leaves(level0))):
            assert np.asarray(a).tobytes() == np.asarray(b).tobytes(), (name, k, dtype)


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_level0_tier_in_eager_modes_matches_the_cpu(mode, monkeypatch):
    """Tiny eager ops (kernels at level 0) and a fused chain of them give
    PyTorch's CPU bits.  (A float cumsum is left out: the CPU accumulates
    float32 in double, XLA does not, at every level; a float sum is
    summed in another order: both compared across tiers above.)"""
    from torch_tpu import runtime
    tiers, real = [], runtime.compile_options

    def spy(jaxpr):
        out = real(jaxpr)
        tiers.append(out == runtime.TINY_COMPILE_OPTIONS)
        return out
    monkeypatch.setattr(runtime, "compile_options", spy)
    a = torch.randn(7, 9 + mode.startswith("f")) * 4  # a shape of its own per mode: compiled here
    b = torch.randn(a.shape)
    ta, tb = a.to("tpu"), b.to("tpu")
    with torch.tpu.set_eager_mode(mode):
        got = [(ta + tb - 1).cpu(), ta.abs().amax(1).cpu(), ta.long().cumsum(0).cpu(), (ta / (tb.abs() + 1)).cpu(),
               ta.long().sum(0).cpu(), ta.long().cpu(), torch.where(ta > tb, ta, tb).cpu(), ta.max().cpu()]
    want = [a + b - 1, a.abs().amax(1), a.long().cumsum(0), a / (b.abs() + 1), a.long().sum(0), a.long(),
            torch.where(a > b, a, b), a.max()]
    for k, (g, w) in enumerate(zip(got, want)):
        assert torch.equal(g, w), k
    assert any(tiers), tiers  # the level-0 tier was used


def test_executables_are_released_near_the_memory_map_limit(monkeypatch, caplog):
    # a process that builds thousands of programs would reach vm.max_map_count
    # (each XLA:CPU executable holds memory maps) and die of SIGSEGV: past a
    # share of the limit the cached executables are dropped, and calls go on
    from torch_tpu.ops import map_limit, registry
    if not map_limit._read_limit():
        pytest.skip("no vm.max_map_count here (not Linux)")
    assert 0 < map_limit.map_count() < map_limit._read_limit()
    x = torch.randn(5, 7).to("tpu")
    (x * 3).cpu()
    kernel = registry.KERNELS[torch.ops.aten.mul.Tensor]
    assert len(kernel.cache) > 0
    monkeypatch.setattr(map_limit, "CHECK_BUILDS", 1)
    monkeypatch.setattr(map_limit, "SHARE", 0.0)  # "near the limit" at every build
    releases = map_limit.releases
    with caplog.at_level("WARNING", logger="torch_tpu"):
        y = torch.randn(3, 11).to("tpu")
        got = (y.sin() + 1).cpu()
    assert map_limit.releases > releases
    assert "cached executables were released" in caplog.text
    assert len(kernel.cache) == 0  # (mul's signatures went with the others; it has not run since)
    torch.testing.assert_close(got, y.cpu().sin() + 1)
    monkeypatch.setattr(map_limit, "SHARE", 2.0)  # (never, as in a normal run)
    torch.testing.assert_close((x * 3).cpu(), x.cpu() * 3, rtol=0, atol=0)  # built again after the release
