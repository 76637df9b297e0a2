"""Which PJRT platform backs the ``tpu`` device, and starting it lazily.

A real TPU (libtpu installed) wins; otherwise ``TORCH_TPU_PLATFORM`` names one
(``cpu`` or ``gpu``/``cuda``); otherwise the CPU.  Each process drives one
chip, exposed as ``tpu:0``, as Google's torch_tpu does.
"""
import os
import threading

import jax
from jax.extend.core import Literal, Var, jaxprs_in_params
import numpy as np
import torch

from . import loading
from .platforms import platform_installed, platform_name  # noqa: F401  (runtime's names for them)

# int64 indices and float64 must be exact, as on PyTorch's CPU (on a TPU XLA
# emulates them: see tpu_dtypes.py).
jax.config.update("jax_enable_x64", True)


def cache_dir() -> str:
    """Where compiled XLA executables persist across processes."""
    default = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
                           "torch_tpu", "xla")
    return os.environ.get("TORCH_TPU_CACHE_DIR", default)


def _configure_persistent_cache() -> None:
    # JAX's persistent compilation cache, on by default, for every executable:
    # a per-op kernel is a few KB on disk and loads in a quarter of its compile
    # time (benchmarks/first_call.py), which a second run with the same shapes
    # (a test suite) pays for every op.  TORCH_TPU_CACHE_DIR="" turns it off.
    path = cache_dir()
    if not path:
        return
    try:
        os.makedirs(path, exist_ok=True)
    except OSError:
        return
    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs",
                      float(os.environ.get("TORCH_TPU_CACHE_MIN_COMPILE_SECS", "0")))
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


_configure_persistent_cache()

_lock = threading.Lock()
_device = None


def jax_device():
    """The jax.Device behind tpu:0, started on first use."""
    global _device
    if _device is None:
        with _lock:
            if _device is None:
                name = platform_name()
                try:
                    # Local devices: after jax.distributed.initialize, jax.devices()
                    # lists every process's devices.
                    devices = jax.local_devices(backend=name)
                except RuntimeError as e:
                    raise RuntimeError(
                        f"torch_tpu could not start the JAX platform {name!r}: {e}") from None
                device = devices[_local_index(len(devices))]
                # Factories (zeros, randn) run jitted functions with no inputs:
                # they land on the default device, which must be ours.
                jax.config.update("jax_default_device", device)
                from . import tpu_dtypes
                tpu_dtypes.started(device.platform)  # 64-bit types on a TPU: see tpu_dtypes.py
                _device = device
    return _device


def _local_index(n: int) -> int:
    # Under torchrun every process owns one chip: LOCAL_RANK picks it when the
    # platform exposes several devices to each process.
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    return local_rank if local_rank < n else 0


def is_initialized() -> bool:
    return _device is not None


loading.device_started = is_initialized  # (the device's hooks ask it, loaded or not)


def device_count() -> int:
    return 1


def check_device(device) -> None:
    """``tpu:N`` for N past the device count is an error, as on CUDA."""
    if device is not None:
        d = torch.device(device)
        if d.type == "tpu" and d.index is not None and d.index >= device_count():
            raise RuntimeError(
                f"Invalid device index {d}: this process has {device_count()} tpu device(s) "
                "(each process drives one chip, exposed as tpu:0)")


def device_jit(fun, **options):
    """``jax.jit(fun, **options)`` whose results are committed to the device:
    every eager program's (a kernel's, a factory's, a random draw's).  A
    program with no committed input (a factory, a fill of a Python number)
    otherwise gives uncommitted arrays, and an op reading one
    next to committed arrays (every other op's results) is another jit
    signature than the same op reading its own results later: it compiled
    twice (AdamW's foreach updates again at the second step, ~40-80 ms)."""
    return jax.jit(fun, out_shardings=jax.sharding.SingleDeviceSharding(jax_device()), **options)


def device_description() -> str:
    d = jax_device()
    kind = getattr(d, "device_kind", "") or d.platform
    if d.platform == "cpu":
        return "XLA CPU"
    if d.platform == "tpu":
        return kind if kind.lower().startswith("tpu") else f"TPU {kind}"
    return f"XLA {d.platform.upper()} ({kind})"


def _configure_cpu_dispatch() -> None:
    # JAX's CPU client runs each executable on a worker thread and hands the
    # caller futures.  For small eager ops (microseconds of compute) that
    # hand-off and the workers' spinning between launches cost more CPU than
    # the ops (a 64x64 elementwise op: ~35 instead of ~80 us of CPU inline),
    # but compute-heavy strict steps lose the overlap of Python with XLA's work
    # (the CNN benchmark's step ~25% longer in wall time on 2 cores).  So the
    # asynchronous dispatch stays the default; TORCH_TPU_CPU_INLINE=1 runs
    # executables in the calling thread.  Results are the same either way.
    try:
        cpu = platform_name() == "cpu"
    except RuntimeError:  # a bad TORCH_TPU_PLATFORM: reported when the device starts
        return
    if cpu and os.environ.get("TORCH_TPU_CPU_INLINE", "") == "1":
        jax.config.update("jax_cpu_enable_async_dispatch", False)


_configure_cpu_dispatch()  # before the CPU client starts (jax_device)


# -- cheaper XLA:CPU compiles for small programs -------------------------------
#
# XLA:CPU's fusion emitters build a fresh MLIR context, load every dialect and
# run an MLIR pipeline per compile: most of a small op's first-call time
# (benchmarks/first_call.py).  Its older emitters compile a small elementwise,
# reduction or indexing program in ~40-70% of the time, and run it as fast at
# these sizes.  They are not bit-identical for transcendental functions (their
# own approximations of tan, cbrt, float16 log...), so only programs made of
# primitives that are exact in IEEE arithmetic (or move bits) get them; every
# result is then the same as with the default emitters (checked bit for bit in
# tests/test_first_call.py).  Transposes and scatters run measurably slower
# from the older emitters (a 64x64 transposed copy 5.9 -> 8.4 us, a 100x100
# scatter-add 19 -> 29 us per launch), and so do large arrays: those programs
# keep XLA's defaults.
FAST_COMPILE_OPTIONS = {"xla_cpu_use_fusion_emitters": False}
FAST_COMPILE_MAX_ELEMENTS = 1 << 16  # per array, inputs, intermediates and results

# Primitives computed exactly (IEEE add/mul/div/sqrt, comparisons, casts), or
# moving data, or calling library code that does not depend on the emitters,
# and no slower per launch from the older emitters at these sizes.
EXACT_PRIMITIVES = frozenset("""
    add sub mul div rem neg abs sign floor ceil round nextafter sqrt max min integer_pow square
    eq ne lt le gt ge and or not xor shift_left shift_right_logical shift_right_arithmetic
    population_count clz select_n clamp convert_element_type bitcast_convert_type is_finite copy copy_p
    broadcast_in_dim reshape squeeze expand_dims rev slice dynamic_slice dynamic_update_slice gather
    concatenate pad iota split reduce_sum reduce_max reduce_min reduce_prod reduce_and reduce_or reduce_xor
    argmax argmin cumsum cumprod cummax cummin sort dot_general stop_gradient optimization_barrier
    random_bits random_seed random_wrap random_unwrap threefry2x32
    pjit jit closed_call core_call custom_jvp_call custom_vjp_call custom_vjp_call_jaxpr remat checkpoint cond while
""".split())


# A cheaper tier for tiny programs: LLVM at optimization level 0 (no IR
# optimization passes, fast instruction selection) compiles them in ~40-60%
# of the time above (cumsum 63 -> 26 ms, abs().max() 39 -> 23 ms), but its
# unoptimized loops cost ~2 ns more per element per launch (~30 ns for the
# scans: cumsum, cummax...), hence the small bounds (benchmarks/first_call.py
# and tests/test_first_call.py).  At level 2 LLVM contracts a float multiply
# feeding an add into one fused multiply-add (XLA allows it, and no option
# turns it off); at level 0 it does not: a program where that can happen, or
# with complex numbers (whose multiply is such a pair), keeps level 2, so no
# result changes.
TINY_COMPILE_OPTIONS = dict(FAST_COMPILE_OPTIONS, xla_backend_optimization_level=0)
TINY_COMPILE_MAX_ELEMENTS = 1 << 10  # per array
TINY_SCAN_MAX_ELEMENTS = 1 << 7
_SCANS = frozenset("cumsum cumprod cummax cummin cumlogsumexp".split())
# Exact, but slower per launch from the older emitters at the sizes above:
# at these sizes a scatter costs <= ~3 us more per launch (1024 elements) and
# compiles in half the time (index_put's accumulate 45 -> 22 ms).
TINY_ONLY_PRIMITIVES = frozenset("scatter scatter-add scatter_add".split())
# Float results that are products (the multiply of a possible FMA), and the
# primitives whose float adds could take one as an addend (dot_general is both).
_PRODUCTS = frozenset("mul div integer_pow square reduce_prod cumprod dot_general".split())
_SUMS = frozenset("add sub add_any reduce_sum cumsum dot_general scatter-add scatter_add".split())


def _fast_compile_mode() -> str:
    # TORCH_TPU_FAST_COMPILE: "small" (default), "0" (never), "emitters" (the
    # cheaper emitters without the level-0 tier), "all" (any size: to check
    # that results do not change)
    return os.environ.get("TORCH_TPU_FAST_COMPILE", "small").strip().lower()


def _on_cpu() -> bool:
    try:
        return platform_name() == "cpu"
    except RuntimeError:  # a bad TORCH_TPU_PLATFORM: reported when the device starts
        return False


def on_cpu_platform() -> bool:
    """Whether the device is JAX's CPU platform (device buffers are host memory)."""
    return _on_cpu()


def _size(v) -> int:
    return getattr(getattr(v, "aval", None), "size", 0)


def _small_and_exact(jaxpr, limit, allowed=EXACT_PRIMITIVES) -> bool:
    for v in jaxpr.invars:
        if limit is not None and _size(v) > limit:
            return False
    for eqn in jaxpr.eqns:
        if eqn.primitive.name not in allowed:
            return False
        for v in eqn.outvars:
            if limit is not None and _size(v) > limit:
                return False
        for sub in jaxprs_in_params(eqn.params):
            if not _small_and_exact(sub, limit, allowed):
                return False
    return True


def _kind(v) -> str:
    dtype = getattr(getattr(v, "aval", None), "dtype", None)
    if dtype is None:
        return ""
    if jax.dtypes.issubdtype(dtype, np.complexfloating):
        return "c"
    return "f" if jax.dtypes.issubdtype(dtype, np.floating) else ""  # bfloat16's numpy kind is "V"


def _tiny(jaxpr, limit, scan_limit, products_in=False):
    """(qualifies, outputs may carry a product): every array within the
    bounds, no complex number, and no float add that a product may reach
    (through any chain of float results: conservative)."""
    products = set(jaxpr.invars) if products_in else set()
    for v in jaxpr.invars:
        if _kind(v) == "c" or (limit is not None and _size(v) > limit):
            return False, False
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        fed = any(isinstance(v, Var) and v in products for v in eqn.invars)
        float_out = any(_kind(v) == "f" for v in eqn.outvars)
        if any(_kind(v) == "c" for v in eqn.invars + eqn.outvars):
            return False, False
        bound = scan_limit if name in _SCANS else limit
        if bound is not None and any(_size(v) > bound for v in eqn.outvars + eqn.invars):
            return False, False
        if name in _SUMS and float_out and (fed or name == "dot_general"):
            return False, False
        makes = name in _PRODUCTS and float_out and not _times_one(eqn)
        for sub in jaxprs_in_params(eqn.params):
            ok, sub_products = _tiny(sub, limit, scan_limit, fed)
            if not ok:
                return False, False
            makes = makes or sub_products or _has_product(sub)
        if (fed or makes) and float_out:
            products.update(v for v in eqn.outvars if _kind(v) == "f")
    return True, any(v in products for v in jaxpr.outvars if isinstance(v, Var))


def _times_one(eqn) -> bool:
    # ``x * 1`` (add's alpha) is x exactly: an FMA of it rounds once, as the add does
    return eqn.primitive.name == "mul" and any(
        isinstance(v, Literal) and np.ndim(v.val) == 0 and abs(v.val) == 1 for v in eqn.invars)


def _has_product(jaxpr) -> bool:
    return any((e.primitive.name in _PRODUCTS and any(_kind(v) == "f" for v in e.outvars) and not _times_one(e))
               or any(_has_product(s) for s in jaxprs_in_params(e.params)) for e in jaxpr.eqns)


def compile_options(closed_jaxpr):
    """XLA compile options for this traced program on the CPU platform: the
    level-0 tier for a tiny exact program without a possible multiply-add
    contraction, the cheaper emitters for a small exact one, else None
    (XLA's defaults)."""
    mode = _fast_compile_mode()
    if mode in ("0", "off", "false", "no") or not _on_cpu():
        return None
    limit = None if mode == "all" else FAST_COMPILE_MAX_ELEMENTS
    jaxpr = getattr(closed_jaxpr, "jaxpr", closed_jaxpr)
    tiny = (None, None) if mode == "all" else (TINY_COMPILE_MAX_ELEMENTS, TINY_SCAN_MAX_ELEMENTS)
    if (mode != "emitters" and _small_and_exact(jaxpr, tiny[0], EXACT_PRIMITIVES | TINY_ONLY_PRIMITIVES)
            and _tiny(jaxpr, *tiny)[0]):
        return dict(TINY_COMPILE_OPTIONS)
    return dict(FAST_COMPILE_OPTIONS) if _small_and_exact(jaxpr, limit) else None


_plain_jit: dict = {}  # a jit with FAST_COMPILE_OPTIONS -> the same function's plain jit


def small_program_jit(fn, fun, args, donate=()):
    """``fn`` (``device_jit(fun, donate_argnums=donate)``), or the same jit with
    the cheaper compile options when the program ``fun`` traces to for
    ``args`` (arrays or anything with a shape and dtype) is small and exact.
    The trace is jit's own, which the first call reuses.  A jit with compile
    options cannot be called inside another trace (a fused chain): ``nestable``
    gives the plain one."""
    mode = _fast_compile_mode()
    if mode in ("0", "off", "false", "no") or not _on_cpu():
        return fn
    try:
        traced = fn.trace(*[jax.ShapeDtypeStruct(a.shape, a.dtype) for a in args])
    except Exception:  # the op's own error: raised by its first call, as always
        return fn
    options = compile_options(traced.jaxpr)
    if options is None:
        return fn
    fast = device_jit(fun, compiler_options=options, donate_argnums=donate)
    _plain_jit[fast] = fn
    return fast


def nestable(fn):
    """``fn`` as it may be called inside another jax trace."""
    return _plain_jit.get(fn, fn)


def nests_as(launcher, fn):
    """Let ``launcher`` (a callable standing in for the jit ``fn`` at launch)
    be nested as ``fn`` is."""
    _plain_jit[launcher] = nestable(fn)
