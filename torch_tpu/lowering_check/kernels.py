"""The built-in Pallas kernels as lowering-check cases: flash attention
forward and backward over its options (causal, boolean or additive mask,
GQA, head dims, sequence lengths that are and are not multiples of 128,
bfloat16 and float32) and RMSNorm forward and backward."""
import dataclasses
import itertools

import jax
import jax.numpy as jnp

from ..pallas.kernels import flash_attention as _fa, rms_norm as _rms

_S = jax.ShapeDtypeStruct


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    fn: object     # a JAX function
    specs: tuple   # its ShapeDtypeStruct arguments


def attention(causal, mask, gqa, head_dim, seq, dtype, backward, batch=1, heads=4) -> Case:
    kv_heads = heads // 2 if gqa else heads
    q, kv = _S((batch, heads, seq, head_dim), dtype), _S((batch, kv_heads, seq, head_dim), dtype)
    specs = [q, kv, kv]
    if mask is not None:
        specs.append(_S((batch, 1, seq, seq), jnp.bool_ if mask == "bool" else dtype))

    def forward(q, k, v, m=None):
        return _fa.flash_attention(q, k, v, m, causal=causal)
    fn = forward
    if backward:
        fn = jax.grad(lambda *a: forward(*a).astype(jnp.float32).sum(), argnums=(0, 1, 2))
    name = (f"flash_attention {'bwd' if backward else 'fwd'} {'causal' if causal else 'full'} "
            f"mask={mask or 'none'}{' gqa' if gqa else ''} d={head_dim} L={seq} {jnp.dtype(dtype).name}")
    return Case(name, fn, tuple(specs))


def rms_norm(rows, n, dtype, backward) -> Case:
    x, w = _S((rows, n), dtype), _S((n,), dtype)

    def forward(x, w):
        return _rms.rms_norm(x, w, 1e-6)
    fn = forward
    if backward:
        fn = jax.grad(lambda x, w: forward(x, w).astype(jnp.float32).sum(), argnums=(0, 1))
    return Case(f"rms_norm {'bwd' if backward else 'fwd'} {rows}x{n} {jnp.dtype(dtype).name}", fn, (x, w))


DTYPES = (jnp.bfloat16, jnp.float32)


def all_cases():
    """The full cross product (a few hundred lowerings per chip)."""
    for causal, mask, gqa, d, seq, dtype, bwd in itertools.product(
            (False, True), (None, "bool", "additive"), (False, True), (64, 128, 256), (256, 200),
            DTYPES, (False, True)):
        yield attention(causal, mask, gqa, d, seq, dtype, bwd)
    for rows, n, dtype, bwd in itertools.product((512, 200), (256, 384), DTYPES, (False, True)):
        yield rms_norm(rows, n, dtype, bwd)


def representative_cases():
    """Every option at least once, both directions, in a handful of cases."""
    bf16, f32 = jnp.bfloat16, jnp.float32
    return [
        attention(True, None, False, 128, 256, bf16, True),
        attention(False, "bool", True, 64, 200, f32, True),
        attention(False, "additive", False, 256, 384, bf16, True),
        attention(True, "bool", False, 128, 200, bf16, False),
        attention(False, None, True, 256, 100, f32, False),
        rms_norm(512, 256, bf16, True),
        rms_norm(200, 384, f32, True),
    ]
