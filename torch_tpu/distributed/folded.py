"""The one collective every tpu_dist program starts with: an all_gather of a
fixed-size byte buffer holding each rank's signature and, when it fits, its
whole payload.

The buffer has the same size for every call of a group (``fold_bytes``), so
ranks that disagree about the call (shapes, dtypes, which collective) still
exchange buffers the transport can match; the signatures then show the
disagreement and every rank raises.  A payload that fits is computed from
the gathered blocks on every rank (the same ops in the same order, so the
ranks' results are identical), which makes a small collective one round
trip, signature check included.
"""
import functools
import math

import jax
import jax.numpy as jnp


def fold_bytes(world):
    """Payload bytes per rank carried in the signature exchange itself.  On
    a latency-bound transport (Gloo on CPU, DCN) a 64 KB exchange between
    two ranks costs about what an empty one does; the total gathered stays
    at 128 KB as the group grows."""
    return max(4096, 131072 // world)


def nbytes(shape, dtype):
    return math.prod(shape) * jnp.dtype(dtype).itemsize


def to_bytes(x):
    """``x``'s bytes, flat uint8 (bool: one byte each; complex: re, im)."""
    if x.dtype == jnp.bool_:
        return x.astype(jnp.uint8).reshape(-1)
    if jnp.issubdtype(x.dtype, jnp.complexfloating):
        x = jnp.stack([x.real, x.imag], axis=-1)
    return jax.lax.bitcast_convert_type(x, jnp.uint8).reshape(-1)


def from_bytes(b, shape, dtype):
    """Rows of ``b`` (lead..., n bytes) as arrays (lead..., *shape) of ``dtype``."""
    dtype = jnp.dtype(dtype)
    lead = b.shape[:-1]
    if dtype == jnp.bool_:
        return b.astype(jnp.bool_).reshape(lead + tuple(shape))
    if jnp.issubdtype(dtype, jnp.complexfloating):
        part = jnp.finfo(dtype).dtype
        pairs = from_bytes(b, tuple(shape) + (2,), part)
        return jax.lax.complex(pairs[..., 0], pairs[..., 1]).astype(dtype)
    if dtype.itemsize > 1:
        b = b.reshape(lead + (-1, dtype.itemsize))
    return jax.lax.bitcast_convert_type(b, dtype).reshape(lead + tuple(shape))


def fold(blocks, op, world):
    """Reduce the ranks' blocks (world, ...) with reduce op name ``op``, in
    rank order; the same arithmetic as the reduce ops of programs._reduce."""
    if blocks.dtype == jnp.bool_:
        op = {"sum": "max", "avg": "max", "product": "min", "band": "min",
              "bor": "max", "bxor": "bxor"}.get(op, op)
        if op != "bxor":
            return fold(blocks.astype(jnp.uint8), op, world).astype(jnp.bool_)
    step = {"sum": jnp.add, "avg": jnp.add, "product": jnp.multiply, "max": jnp.maximum,
            "min": jnp.minimum, "band": jnp.bitwise_and, "bor": jnp.bitwise_or,
            "bxor": jnp.bitwise_xor}[op]
    y = functools.reduce(step, [blocks[i] for i in range(world)])
    if op == "avg":
        y = y // world if jnp.issubdtype(blocks.dtype, jnp.integer) else y / world
    return y.astype(blocks.dtype)


def _mine(x, me, world):
    """This rank's 1/world slice of dim 0 of ``x``."""
    k = x.shape[0] // world
    return jax.lax.dynamic_slice_in_dim(x, me * k, k, 0)


def result(kind, static, blocks, me, world):
    """Collective ``kind``'s local result from every rank's block (world, ...);
    the block shapes are those programs._kernel takes."""
    if kind == "all_reduce":
        op, scale = static
        if scale is not None:  # PREMUL_SUM
            blocks = (blocks * scale).astype(blocks.dtype)
        return fold(blocks, op, world)
    if kind == "broadcast":
        return blocks[static[0]]
    if kind == "all_gather":  # (k, ...) each -> (world*k, ...)
        return blocks.reshape((-1,) + blocks.shape[2:])
    if kind == "reduce_scatter":  # (world*k, ...) each -> (k, ...)
        op, scale = static
        if scale is not None:
            blocks = (blocks * scale).astype(blocks.dtype)
        return _mine(fold(blocks, op, world), me, world)
    if kind == "scatter":  # the root's (world*k, ...) -> (k, ...)
        return _mine(blocks[static[0]], me, world)
    if kind == "all_to_all":  # piece j of my result: my slice of rank j's block
        k = blocks.shape[1] // world
        mine = jax.lax.dynamic_slice_in_dim(blocks, me * k, k, 1)
        return mine.reshape((-1,) + blocks.shape[2:])
    raise ValueError(f"unknown collective {kind!r}")
