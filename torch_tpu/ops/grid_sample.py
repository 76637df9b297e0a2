"""``grid_sampler_2d`` and its backward, following ATen's CPU kernel.

A grid point (x, y) in [-1, 1] is unnormalized to pixel coordinates (corner
or center convention per align_corners).  bilinear and nearest first apply
the padding mode to the coordinate (border: clip; reflection: reflect, then
clip); bicubic applies it to each of its 4x4 integer taps instead.  Taps
outside the image read 0.  nearest rounds half to even (nearbyint).

The backward is the vector-Jacobian product of the same computation, which
is ATen's hand-written gradient: floor/round and the clip outside its range
have zero derivative, the reflection flips the sign.
"""
import jax
import jax.numpy as jnp

from .nn import _up
from .registry import register, register_masked

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


def _read(x, iy, ix):
    """x[n, :, iy, ix] for integer (N, Ho, Wo) coordinates, 0 outside: (N, C, Ho, Wo)."""
    h, w = x.shape[2:]
    inside = (ix >= 0) & (ix < w) & (iy >= 0) & (iy < h)
    n = jnp.arange(x.shape[0])[:, None, None]
    v = x[n, :, jnp.clip(iy, 0, h - 1), jnp.clip(ix, 0, w - 1)]  # (N, Ho, Wo, C)
    return jnp.moveaxis(jnp.where(inside[..., None], v, 0), -1, 1)


def _cubic_weights(t):
    def near(s):
        return ((_A + 2) * s - (_A + 3)) * s * s + 1

    def far(s):
        return ((_A * s - 5 * _A) * s + 8 * _A) * s - 4 * _A
    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


def _sample(x, grid, mode, padding_mode, align_corners):
    h, w = x.shape[2:]
    gx = _unnormalize(grid[..., 0], w, align_corners)
    gy = _unnormalize(grid[..., 1], h, align_corners)
    if mode == BICUBIC:
        x0, y0 = jnp.floor(gx), jnp.floor(gy)
        wx, wy = _cubic_weights(gx - x0), _cubic_weights(gy - y0)

        def tap(c, k, size):
            return _pad_coordinate(c + (k - 1), size, padding_mode, align_corners).astype(jnp.int32)
        out = 0
        for j in range(4):
            row = sum(_read(x, tap(y0, j, h), tap(x0, i, w)) * wx[i][:, None] for i in range(4))
            out = out + row * wy[j][:, None]
        return out
    gx = _pad_coordinate(gx, w, padding_mode, align_corners)
    gy = _pad_coordinate(gy, h, padding_mode, align_corners)
    if mode == NEAREST:
        return _read(x, jnp.round(gy).astype(jnp.int32), jnp.round(gx).astype(jnp.int32))
    x0, y0 = jnp.floor(gx), jnp.floor(gy)
    tx, ty = gx - x0, gy - y0
    x0, y0 = x0.astype(jnp.int32), y0.astype(jnp.int32)
    taps = [(y0, x0, (1 - tx) * (1 - ty)), (y0, x0 + 1, tx * (1 - ty)),
            (y0 + 1, x0, (1 - tx) * ty), (y0 + 1, x0 + 1, tx * ty)]
    return sum(_read(x, iy, ix) * wt[:, None] for iy, ix, wt in taps)


@register("grid_sampler_2d.default")
def grid_sampler_2d(input, grid, interpolation_mode, padding_mode, align_corners):
    return _sample(_up(input), _up(grid), interpolation_mode, padding_mode, align_corners)


@register_masked("grid_sampler_2d_backward.default")
def grid_sampler_2d_backward(grad_output, input, grid, interpolation_mode, padding_mode, align_corners,
                             output_mask):
    _, vjp = jax.vjp(lambda x, g: _sample(x, g, interpolation_mode, padding_mode, align_corners),
                     _up(input), _up(grid))
    gi, gg = vjp(_up(grad_output))
    wanted = [gi.astype(input.dtype), gg.astype(grid.dtype)]
    return tuple(v for v, m in zip(wanted, output_mask) if m)
