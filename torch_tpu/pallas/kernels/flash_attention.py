"""Flash attention as Pallas TPU kernels (FlashAttention-2 scheme).

Layout inside: q (BH, Lq, D), k/v (BH, Lk, D), optional additive bias
(BH, Lq, Lk).  The forward walks key blocks with an online softmax and keeps
the row log-sum-exp; the backward recomputes probabilities from it, one
kernel for dK/dV (per key block) and one for dQ (per query block), so no
(Lq, Lk) matrix is ever stored.  ``is_causal`` is PyTorch's top-left aligned
lower triangle; causal kernels skip key blocks that lie wholly above it.
"""
import functools
import math

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl

from .blocks import block

_NEG = -1e30  # finite "minus infinity": keeps exp() and max() free of NaNs


def _scores(q, k, bias, scale, causal, q_start, k_start):
    s = lax.dot_general(q, k, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32) * scale
    if bias is not None:
        s = s + bias.astype(jnp.float32)
    if causal:
        rows = q_start + lax.broadcasted_iota(jnp.int32, s.shape, 0)
        cols = k_start + lax.broadcasted_iota(jnp.int32, s.shape, 1)
        s = jnp.where(cols <= rows, s, _NEG)
    return s


def _k_blocks_for(q_index, bq, bk, nk, causal):
    """How many key blocks query block ``q_index`` sees (an int32: with 64-bit
    types on, a Python int bound would make the loop index int64, which
    Mosaic's index arithmetic refuses)."""
    if not causal:
        return jnp.int32(nk)
    return jnp.minimum(nk, ((q_index + 1) * bq + bk - 1) // bk)


def _key_block(lk, preferred, has_bias):
    """The key tile.  The dK/dV kernel reads the bias in (query rows, key
    tile) blocks, where the key tile is the lane (minor) dimension: Mosaic
    wants it a multiple of 128 or the whole axis."""
    bk = block(lk, preferred)
    return bk if not has_bias or bk % 128 == 0 else lk


# ---- forward -------------------------------------------------------------------

def _fwd_kernel(*refs, scale, causal, bq, bk, nk, has_bias):
    if has_bias:
        q_ref, k_ref, v_ref, b_ref, o_ref, lse_ref = refs
    else:
        (q_ref, k_ref, v_ref, o_ref, lse_ref), b_ref = refs, None
    i = pl.program_id(1)
    q = q_ref[...]
    d = q.shape[-1]

    def body(j, carry):
        m, l, acc = carry
        ks = pl.ds(pl.multiple_of(j * bk, bk), bk)
        bias = b_ref[:, ks] if has_bias else None
        s = _scores(q, k_ref[ks, :], bias, scale, causal, i * bq, j * bk)
        m_new = jnp.maximum(m, s.max(axis=1, keepdims=True))
        p = jnp.exp(s - m_new)
        corr = jnp.exp(m - m_new)
        l = l * corr + p.sum(axis=1, keepdims=True)
        acc = acc * corr + jnp.dot(p.astype(v_ref.dtype), v_ref[ks, :],
                                   preferred_element_type=jnp.float32)
        return m_new, l, acc

    init = (jnp.full((bq, 1), _NEG, jnp.float32), jnp.zeros((bq, 1), jnp.float32),
            jnp.zeros((bq, d), jnp.float32))
    m, l, acc = lax.fori_loop(0, _k_blocks_for(i, bq, bk, nk, causal), body, init)
    o_ref[...] = (acc / l).astype(o_ref.dtype)
    lse_ref[...] = m + jnp.log(l)


def _forward(q, k, v, bias, scale, causal, blocks):
    bh, lq, d = q.shape
    lk = k.shape[1]
    has_bias = bias is not None
    bq, bk = block(lq, blocks[0]), _key_block(lk, blocks[1], has_bias)
    kernel = functools.partial(_fwd_kernel, scale=scale, causal=causal, bq=bq, bk=bk,
                               nk=lk // bk, has_bias=has_bias)
    in_specs = [pl.BlockSpec((None, bq, d), lambda b, i: (b, i, 0)),
                pl.BlockSpec((None, lk, d), lambda b, i: (b, 0, 0)),
                pl.BlockSpec((None, lk, d), lambda b, i: (b, 0, 0))]
    args = [q, k, v]
    if has_bias:
        in_specs.append(pl.BlockSpec((None, bq, lk), lambda b, i: (b, i, 0)))
        args.append(bias)
    return pl.pallas_call(
        kernel, grid=(bh, lq // bq), in_specs=in_specs, name="flash_attention_fwd",
        out_specs=[pl.BlockSpec((None, bq, d), lambda b, i: (b, i, 0)),
                   pl.BlockSpec((None, bq, 1), lambda b, i: (b, i, 0))],
        out_shape=[jax.ShapeDtypeStruct(q.shape, q.dtype),
                   jax.ShapeDtypeStruct((bh, lq, 1), jnp.float32)],
    )(*args)


# ---- backward ------------------------------------------------------------------

def _dkdv_kernel(*refs, scale, causal, bq, bk, nq, has_bias):
    if has_bias:
        q_ref, k_ref, v_ref, b_ref, do_ref, lse_ref, delta_ref, dk_ref, dv_ref = refs
    else:
        (q_ref, k_ref, v_ref, do_ref, lse_ref, delta_ref, dk_ref, dv_ref), b_ref = refs, None
    j = pl.program_id(1)
    k, v = k_ref[...], v_ref[...]

    def body(i, carry):
        dk, dv = carry
        qs = pl.ds(pl.multiple_of(i * bq, bq), bq)
        q, do = q_ref[qs, :], do_ref[qs, :]
        bias = b_ref[qs, :] if has_bias else None
        p = jnp.exp(_scores(q, k, bias, scale, causal, i * bq, j * bk) - lse_ref[qs, :])
        dv = dv + lax.dot_general(p.astype(do.dtype), do, (((0,), (0,)), ((), ())),
                                  preferred_element_type=jnp.float32)
        dp = lax.dot_general(do, v, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32)
        ds = p * (dp - delta_ref[qs, :])
        dk = dk + lax.dot_general(ds.astype(q.dtype), q, (((0,), (0,)), ((), ())),
                                  preferred_element_type=jnp.float32)
        return dk, dv

    first = (j * bk) // bq if causal else 0  # earlier query rows cannot see this key block
    zeros = jnp.zeros(k.shape, jnp.float32)
    dk, dv = lax.fori_loop(first, jnp.int32(nq), body, (zeros, zeros))
    dk_ref[...] = (dk * scale).astype(dk_ref.dtype)
    dv_ref[...] = dv.astype(dv_ref.dtype)


def _dq_kernel(*refs, scale, causal, bq, bk, nk, has_bias):
    if has_bias:
        q_ref, k_ref, v_ref, b_ref, do_ref, lse_ref, delta_ref, dq_ref = refs
    else:
        (q_ref, k_ref, v_ref, do_ref, lse_ref, delta_ref, dq_ref), b_ref = refs, None
    i = pl.program_id(1)
    q, do, lse, delta = q_ref[...], do_ref[...], lse_ref[...], delta_ref[...]

    def body(j, dq):
        ks = pl.ds(pl.multiple_of(j * bk, bk), bk)
        k, v = k_ref[ks, :], v_ref[ks, :]
        bias = b_ref[:, ks] if has_bias else None
        p = jnp.exp(_scores(q, k, bias, scale, causal, i * bq, j * bk) - lse)
        dp = lax.dot_general(do, v, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32)
        ds = p * (dp - delta)
        return dq + jnp.dot(ds.astype(k.dtype), k, preferred_element_type=jnp.float32)

    dq = lax.fori_loop(0, _k_blocks_for(i, bq, bk, nk, causal), body,
                       jnp.zeros(q.shape, jnp.float32))
    dq_ref[...] = (dq * scale).astype(dq_ref.dtype)


def _backward(q, k, v, bias, o, lse, do, scale, causal, blocks):
    bh, lq, d = q.shape
    lk = k.shape[1]
    has_bias = bias is not None
    bq, bk = block(lq, blocks[0]), _key_block(lk, blocks[1], has_bias)
    delta = jnp.sum(do.astype(jnp.float32) * o.astype(jnp.float32), axis=-1, keepdims=True)
    whole = lambda n: pl.BlockSpec((None, n, d), lambda b, x: (b, 0, 0))  # noqa: E731
    rows = lambda n: pl.BlockSpec((None, n, 1), lambda b, x: (b, 0, 0))  # noqa: E731
    tile = lambda n: pl.BlockSpec((None, n, d), lambda b, x: (b, x, 0))  # noqa: E731

    specs = [whole(lq), tile(bk), tile(bk)]
    args = [q, k, v]
    if has_bias:
        specs.append(pl.BlockSpec((None, lq, bk), lambda b, x: (b, 0, x)))
        args.append(bias)
    specs += [whole(lq), rows(lq), rows(lq)]
    dk, dv = pl.pallas_call(
        functools.partial(_dkdv_kernel, scale=scale, causal=causal, bq=bq, bk=bk, nq=lq // bq,
                          has_bias=has_bias),
        grid=(bh, lk // bk), in_specs=specs, out_specs=[tile(bk), tile(bk)], name="flash_attention_dkdv",
        out_shape=[jax.ShapeDtypeStruct(k.shape, k.dtype), jax.ShapeDtypeStruct(v.shape, v.dtype)],
    )(*args, do, lse, delta)

    row_tile = pl.BlockSpec((None, bq, 1), lambda b, x: (b, x, 0))
    specs = [tile(bq), whole(lk), whole(lk)]
    if has_bias:
        specs.append(pl.BlockSpec((None, bq, lk), lambda b, x: (b, x, 0)))
    specs += [tile(bq), row_tile, row_tile]
    dq = pl.pallas_call(
        functools.partial(_dq_kernel, scale=scale, causal=causal, bq=bq, bk=bk, nk=lk // bk,
                          has_bias=has_bias),
        grid=(bh, lq // bq), in_specs=specs, out_specs=tile(bq), name="flash_attention_dq",
        out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype),
    )(*args, do, lse, delta)
    return dq, dk, dv


# ---- the differentiable core on (BH, L, D) --------------------------------------

@functools.partial(jax.custom_vjp, nondiff_argnums=(4, 5, 6))
def _attention(q, k, v, bias, scale, causal, blocks):
    return _forward(q, k, v, bias, scale, causal, blocks)[0]


def _attention_fwd(q, k, v, bias, scale, causal, blocks):
    o, lse = _forward(q, k, v, bias, scale, causal, blocks)
    return o, (q, k, v, bias, o, lse)


def _attention_bwd(scale, causal, blocks, res, do):
    q, k, v, bias, o, lse = res
    dq, dk, dv = _backward(q, k, v, bias, o, lse, do, scale, causal, blocks)
    return dq, dk, dv, None if bias is None else jnp.zeros_like(bias)  # the mask is a constant


_attention.defvjp(_attention_fwd, _attention_bwd)


def flash_attention(q, k, v, mask=None, *, causal=False, scale=None, block_q=128, block_k=128):
    """Attention over (B, H, L, D) arrays, like ``F.scaled_dot_product_attention``.

    ``mask``: boolean (True = attend) or additive, broadcastable to
    (B, H, Lq, Lk).  ``k``/``v`` may have fewer heads than ``q`` (GQA): they
    are repeated to match.  ``block_q``/``block_k``: preferred tile sizes.
    """
    b, h, lq, d = q.shape
    hk, lk = k.shape[1], k.shape[2]
    if h % hk:
        raise ValueError(f"flash_attention: {h} query heads is not a multiple of {hk} key/value heads")
    if hk != h:
        k = jnp.repeat(k, h // hk, axis=1)
        v = jnp.repeat(v, h // hk, axis=1)
    if v.shape[-1] != d:
        raise ValueError(f"flash_attention: value head dim {v.shape[-1]} differs from query head dim {d}")
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    bias = None
    if mask is not None:
        if mask.dtype == jnp.bool_:
            # float32 constants: Python floats would make the select float64 (x64 is on)
            mask = jnp.where(mask, jnp.float32(0.0), jnp.float32(_NEG))
        bias = jnp.broadcast_to(mask, (b, h, lq, lk)).reshape(b * h, lq, lk)
        bias = lax.stop_gradient(bias)
    out = _attention(q.reshape(b * h, lq, d), k.reshape(b * h, lk, d), v.reshape(b * h, lk, d),
                     bias, scale, bool(causal), (int(block_q), int(block_k)))
    return out.reshape(b, h, lq, d)
