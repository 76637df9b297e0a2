"""``grid_sampler_2d`` / ``grid_sampler_3d`` and their backwards, following
ATen's CPU kernels.

A grid point (x, y[, z]) in [-1, 1] is unnormalized to pixel coordinates (corner
or center convention per align_corners).  bilinear and nearest first apply
the padding mode to the coordinate (border: clip; reflection: reflect, then
clip); bicubic applies it to each of its 4x4 integer taps instead.  Taps
outside the image read 0.  nearest rounds half to even (nearbyint).  3-d
is the same with one more axis (bicubic is 2-d only; the meta kernel says so).

The backward is the vector-Jacobian product of the same computation, which
is ATen's hand-written gradient: floor/round and the clip outside its range
have zero derivative, the reflection flips the sign.
"""
import itertools

import jax
import jax.numpy as jnp

from ..dtypes import to_opmath
from .registry import register

BILINEAR, NEAREST, BICUBIC = 0, 1, 2
ZEROS, BORDER, REFLECTION = 0, 1, 2
_A = -0.75  # ATen's cubic convolution parameter


def _unnormalize(c, size, align_corners):
    if align_corners:
        return (c + 1) / 2 * (size - 1)
    return ((c + 1) * size - 1) / 2


def _reflect(c, twice_low, twice_high):
    if twice_low == twice_high:
        return jnp.zeros_like(c)
    low, span = twice_low / 2, (twice_high - twice_low) / 2
    c = jnp.abs(c - low)
    extra = jnp.fmod(c, span)
    flips = jnp.floor(c / span)
    return jnp.where(jnp.fmod(flips, 2) == 0, extra + low, span - extra + low)


def _pad_coordinate(c, size, padding_mode, align_corners):
    if padding_mode == BORDER:
        return jnp.clip(c, 0, size - 1)
    if padding_mode == REFLECTION:
        c = _reflect(c, 0, 2 * (size - 1)) if align_corners else _reflect(c, -1, 2 * size - 1)
        return jnp.clip(c, 0, size - 1)
    return c


def _read(x, index):
    """x[n, :, *index] for integer (N, *out) coordinates in spatial order, 0 outside:
    (N, C, *out)."""
    sizes = x.shape[2:]
    inside = True
    for i, size in zip(index, sizes):
        inside = inside & (i >= 0) & (i < size)
    n = jnp.arange(x.shape[0]).reshape((-1,) + (1,) * (index[0].ndim - 1))
    v = x[(n, slice(None)) + tuple(jnp.clip(i, 0, size - 1) for i, size in zip(index, sizes))]  # (N, *out, C)
    return jnp.moveaxis(jnp.where(inside[..., None], v, 0), -1, 1)


def _cubic_weights(t):
    def near(s):
        return ((_A + 2) * s - (_A + 3)) * s * s + 1

    def far(s):
        return ((_A * s - 5 * _A) * s + 8 * _A) * s - 4 * _A
    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


def _sample(x, grid, mode, padding_mode, align_corners):
    sizes = x.shape[2:]
    # grid's last axis is (x, y[, z]): the spatial dims in reverse
    coords = [_unnormalize(grid[..., len(sizes) - 1 - d], size, align_corners) for d, size in enumerate(sizes)]
    if mode == BICUBIC:  # 2-d only
        (gy, gx), (h, w) = coords, sizes
        x0, y0 = jnp.floor(gx), jnp.floor(gy)
        wx, wy = _cubic_weights(gx - x0), _cubic_weights(gy - y0)

        def tap(c, k, size):
            return _pad_coordinate(c + (k - 1), size, padding_mode, align_corners).astype(jnp.int32)
        out = 0
        for j in range(4):
            row = sum(_read(x, (tap(y0, j, h), tap(x0, i, w))) * wx[i][:, None] for i in range(4))
            out = out + row * wy[j][:, None]
        return out
    coords = [_pad_coordinate(c, size, padding_mode, align_corners) for c, size in zip(coords, sizes)]
    if mode == NEAREST:
        return _read(x, [jnp.round(c).astype(jnp.int32) for c in coords])
    # (bi/tri)linear: the 2^d corners, the last axis varying fastest as in ATen
    base = [jnp.floor(c) for c in coords]
    frac = [c - b for c, b in zip(coords, base)]
    base = [b.astype(jnp.int32) for b in base]
    out = 0
    for corner in itertools.product((0, 1), repeat=len(sizes)):
        weight = 1
        for bit, t in zip(corner, frac):
            weight = weight * (t if bit else 1 - t)
        out = out + _read(x, [b + bit for b, bit in zip(base, corner)]) * weight[:, None]
    return out


def _forward(input, grid, interpolation_mode, padding_mode, align_corners):
    return _sample(to_opmath(input), to_opmath(grid), interpolation_mode, padding_mode, align_corners)


def _backward(grad_output, input, grid, interpolation_mode, padding_mode, align_corners, output_mask):
    _, vjp = jax.vjp(lambda x, g: _sample(x, g, interpolation_mode, padding_mode, align_corners),
                     to_opmath(input), to_opmath(grid))
    gi, gg = vjp(to_opmath(grad_output))
    wanted = [gi.astype(input.dtype), gg.astype(grid.dtype)]
    return tuple(v for v, m in zip(wanted, output_mask) if m)


register("grid_sampler_2d.default", "grid_sampler_3d.default")(_forward)
register("grid_sampler_2d_backward.default", "grid_sampler_3d_backward.default", mask="output_mask")(_backward)
