"""Fused RMSNorm as Pallas TPU kernels: one pass over each row tile forward
(normalise and scale), one backward (dx, plus per-tile partial dweight that a
plain sum finishes).  Statistics are kept in float32 whatever the input dtype."""
import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

from .blocks import block


def _fwd_kernel(x_ref, w_ref, y_ref, rstd_ref, *, eps):
    x = x_ref[...].astype(jnp.float32)
    rstd = jax.lax.rsqrt(jnp.mean(x * x, axis=1, keepdims=True) + eps)
    y_ref[...] = (x * rstd * w_ref[...].astype(jnp.float32)).astype(y_ref.dtype)
    rstd_ref[...] = rstd


def _bwd_kernel(x_ref, w_ref, rstd_ref, dy_ref, dx_ref, dw_ref):
    x = x_ref[...].astype(jnp.float32)
    rstd = rstd_ref[...]
    xhat = x * rstd
    dy = dy_ref[...].astype(jnp.float32)
    wdy = dy * w_ref[...].astype(jnp.float32)
    dx = rstd * (wdy - xhat * jnp.mean(wdy * xhat, axis=1, keepdims=True))
    dx_ref[...] = dx.astype(dx_ref.dtype)
    dw_ref[...] = jnp.sum(dy * xhat, axis=0, keepdims=True)


def _row_specs(rows, n, br):
    tile = pl.BlockSpec((br, n), lambda i: (i, 0))
    weight = pl.BlockSpec((1, n), lambda i: (0, 0))
    stat = pl.BlockSpec((br, 1), lambda i: (i, 0))
    return tile, weight, stat


def _forward(x, w, eps, br):
    rows, n = x.shape
    br = block(rows, br)
    tile, weight, stat = _row_specs(rows, n, br)
    return pl.pallas_call(
        functools.partial(_fwd_kernel, eps=eps), grid=(rows // br,), name="rms_norm_fwd",
        in_specs=[tile, weight], out_specs=[tile, stat],
        out_shape=[jax.ShapeDtypeStruct(x.shape, x.dtype), jax.ShapeDtypeStruct((rows, 1), jnp.float32)],
    )(x, w.reshape(1, n))


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3))
def _rms_norm(x, w, eps, br):
    return _forward(x, w, eps, br)[0]


def _rms_norm_fwd(x, w, eps, br):
    y, rstd = _forward(x, w, eps, br)
    return y, (x, w, rstd)


def _rms_norm_bwd(eps, br, res, dy):
    x, w, rstd = res
    rows, n = x.shape
    br = block(rows, br)
    tile, weight, stat = _row_specs(rows, n, br)
    nb = rows // br
    dx, dw = pl.pallas_call(
        _bwd_kernel, grid=(nb,), name="rms_norm_bwd",
        in_specs=[tile, weight, stat, tile],
        out_specs=[tile, pl.BlockSpec((None, 1, n), lambda i: (i, 0, 0))],
        out_shape=[jax.ShapeDtypeStruct(x.shape, x.dtype), jax.ShapeDtypeStruct((nb, 1, n), jnp.float32)],
    )(x, w.reshape(1, n), rstd, dy)
    return dx, dw.sum(axis=(0, 1)).astype(w.dtype)


_rms_norm.defvjp(_rms_norm_fwd, _rms_norm_bwd)


def rms_norm(x, weight, eps, *, normalized_dims=1, block_rows=256):
    """RMSNorm over the last ``normalized_dims`` axes of ``x``, scaled by ``weight``
    (shaped like those axes)."""
    lead = x.shape[:x.ndim - normalized_dims]
    n = 1
    for s in x.shape[x.ndim - normalized_dims:]:
        n *= s
    rows = 1
    for s in lead:
        rows *= s
    y = _rms_norm(x.reshape(rows, n), weight.reshape(n), float(eps), int(block_rows))
    return y.reshape(x.shape)
