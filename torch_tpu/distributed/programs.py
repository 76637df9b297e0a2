"""Collectives as XLA programs over a 1-D mesh with one device per rank.

Each rank passes its local array; the program is ``shard_map``'ed over the
group's mesh, so XLA runs the collective (Gloo between CPU processes, ICI/DCN
on TPU).  Every program first all-gathers a small signature of what each rank
is asking for and runs the real collective under ``lax.cond`` only when all
signatures agree: mismatched shapes then fail cleanly on every rank instead
of feeding incompatible buffers to the transport.
"""
import functools
import zlib

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

AXIS = "r"
SIG_DIMS = 6  # dims of the first input recorded in the signature (for errors)
SIG_LEN = 3 + SIG_DIMS


def _neutral_fill(dtype):
    # x + (-0.0) == x exactly for every float x (NaN, inf and -0.0 included),
    # so a psum where all but one rank contribute -0.0 is an exact broadcast.
    if jnp.issubdtype(dtype, jnp.floating) or jnp.issubdtype(dtype, jnp.complexfloating):
        return jnp.array(-0.0, dtype)
    return jnp.array(0, dtype)


def _as_summable(x):
    return x.astype(jnp.uint8) if x.dtype == jnp.bool_ else x


def _reduce(x, op, world):
    """All-reduce of the local block ``x`` with reduce op name ``op``."""
    if x.dtype == jnp.bool_:
        op = {"sum": "max", "avg": "max", "product": "min", "band": "min",
              "bor": "max", "bxor": "bxor"}.get(op, op)
        if op != "bxor":
            return _reduce(x.astype(jnp.uint8), op, world).astype(jnp.bool_)
    if op in ("sum", "avg"):
        y = jax.lax.psum(x, AXIS)
        if op == "avg":
            y = y // world if jnp.issubdtype(x.dtype, jnp.integer) else y / world
        return y.astype(x.dtype)
    if op == "max":
        return jax.lax.pmax(x, AXIS)
    if op == "min":
        return jax.lax.pmin(x, AXIS)
    # No XLA primitive for these: gather every block and fold locally.
    g = jax.lax.all_gather(x, AXIS)
    if op == "product":
        return jnp.prod(g, axis=0).astype(x.dtype)
    fold = {"band": jnp.bitwise_and, "bor": jnp.bitwise_or, "bxor": jnp.bitwise_xor}[op]
    return functools.reduce(fold, [g[i] for i in range(world)])


def _kernel(kind, static, world):
    """The per-device body of collective ``kind`` (static: hashable params)."""
    if kind == "all_reduce":
        op, scale = static
        def f(x):
            if scale is not None:  # PREMUL_SUM
                x = (x * scale).astype(x.dtype)
            return _reduce(x, op, world)
    elif kind == "broadcast":
        (root,) = static
        def f(x):
            me = jax.lax.axis_index(AXIS)
            y = _as_summable(x)
            y = jnp.where(me == root, y, _neutral_fill(y.dtype))
            return jax.lax.psum(y, AXIS).astype(x.dtype)
    elif kind == "all_gather":  # (k, ...) -> (world*k, ...)
        def f(x):
            return jax.lax.all_gather(x, AXIS, tiled=True)
    elif kind == "reduce_scatter":  # (world*k, ...) -> (k, ...)
        op, scale = static
        def f(x):
            if scale is not None:
                x = (x * scale).astype(x.dtype)
            if op in ("sum", "avg") and x.dtype != jnp.bool_:
                y = jax.lax.psum_scatter(x, AXIS, scatter_dimension=0, tiled=True)
                if op == "avg":
                    y = y // world if jnp.issubdtype(x.dtype, jnp.integer) else y / world
                return y.astype(x.dtype)
            k = x.shape[0] // world
            full = _reduce(x, op, world)
            return jax.lax.dynamic_slice_in_dim(full, jax.lax.axis_index(AXIS) * k, k, 0)
    elif kind == "scatter":  # root's (world*k, ...) -> (k, ...) on every rank
        (root,) = static
        def f(x):
            me = jax.lax.axis_index(AXIS)
            y = _as_summable(x)
            y = jnp.where(me == root, y, _neutral_fill(y.dtype))
            return jax.lax.psum_scatter(y, AXIS, scatter_dimension=0, tiled=True).astype(x.dtype)
    elif kind == "all_to_all":  # (world*k, ...) -> (world*k, ...)
        def f(x):
            return jax.lax.all_to_all(x, AXIS, 0, 0, tiled=True)
    else:
        raise ValueError(f"unknown collective {kind!r}")
    return f


@functools.lru_cache(maxsize=1024)
def _program(kind, static, devices, shape, dtype):
    world = len(devices)
    mesh = Mesh(np.array(devices, dtype=object), (AXIS,))
    kernel = _kernel(kind, static, world)

    def body(sig, x):
        sigs = jax.lax.all_gather(sig, AXIS)
        ok = jnp.all(sigs == sigs[0:1])
        out_aval = jax.eval_shape(kernel, x)
        out = jax.lax.cond(ok, kernel, lambda x: jnp.zeros(out_aval.shape, out_aval.dtype), x)
        return out, sigs.reshape(-1)

    mapped = jax.shard_map(body, mesh=mesh, in_specs=(P(AXIS), P(AXIS)),
                           out_specs=(P(AXIS), P(AXIS)), check_vma=False)
    return mesh, jax.jit(mapped)


def signature(kind, static, shape, dtype):
    key = repr((kind, static, tuple(shape), str(dtype))).encode()
    dims = list(shape)[:SIG_DIMS] + [-1] * (SIG_DIMS - min(len(shape), SIG_DIMS))
    return np.array([zlib.crc32(key), len(shape), _dtype_code(dtype)] + dims, np.int64)


_DTYPES = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16",
           "float32", "float64", "complex64", "complex128", "uint16", "uint32", "uint64"]


def _dtype_code(dtype):
    name = str(jnp.dtype(dtype))
    return _DTYPES.index(name) if name in _DTYPES else len(_DTYPES)


def describe(sig_row):
    ndim = int(sig_row[1])
    dims = [int(d) for d in sig_row[3:3 + min(ndim, SIG_DIMS)]]
    code = int(sig_row[2])
    dtype = _DTYPES[code] if code < len(_DTYPES) else "?"
    return f"shape {tuple(dims)}{'...' if ndim > SIG_DIMS else ''} {dtype}"


_dispatcher = None


def submit(kind, static, devices, local_device, x):
    """``launch`` on the dispatch thread; returns a concurrent Future.

    XLA's CPU client can run a program with cross-process collectives inline
    in the calling thread, which would block forever on a missing peer; one
    thread (so programs keep their order) lets ``Work.wait`` enforce the
    group timeout instead.
    """
    global _dispatcher
    if _dispatcher is None:
        import concurrent.futures
        _dispatcher = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="tpu_dist")
    return _dispatcher.submit(launch, kind, static, devices, local_device, x)


def launch(kind, static, devices, local_device, x):
    """Start collective ``kind`` on this rank's block ``x`` (ndim >= 1).

    Returns (local result, all ranks' signatures); both are jax arrays whose
    computation may still be running.
    """
    world = len(devices)
    mesh, prog = _program(kind, static, devices, tuple(x.shape), str(x.dtype))
    sig = jax.device_put(signature(kind, static, x.shape, x.dtype), local_device)
    spec = NamedSharding(mesh, P(AXIS))
    gx = jax.make_array_from_single_device_arrays((world * x.shape[0],) + tuple(x.shape[1:]), spec, [x])
    gs = jax.make_array_from_single_device_arrays((world * SIG_LEN,), spec, [sig])
    out, sigs = prog(gs, gx)
    return out.addressable_shards[0].data, sigs.addressable_shards[0].data
