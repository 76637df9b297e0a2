"""Upsampling: nearest, nearest-exact, (bi/tri)linear and bicubic, forward
and backward (the antialiased kinds are ``antialias.py``).

Source indices and interpolation weights depend only on shapes, so they are
computed with NumPy at trace time and are constants of the compiled program;
half types interpolate in float32, as the CPU kernels do.
"""
import jax.numpy as jnp
import numpy as np

from ..dtypes import to_opmath
from .nn import transpose_of
from .registry import register

# ---- upsampling ----------------------------------------------------------------

def _scale(n_in, n_out, scale):
    """PyTorch's source/destination ratio (compute_scales_value), as a float32."""
    if scale is not None and scale > 0:
        return np.float32(1.0 / scale)
    return np.float32(n_in / n_out)


def _nearest_index(n_in, n_out, scale):
    o = np.arange(n_out)
    if n_out == n_in:
        return o
    if n_out == 2 * n_in:
        return o >> 1
    src = np.floor(o.astype(np.float32) * _scale(n_in, n_out, scale)).astype(np.int64)
    return np.minimum(src, n_in - 1)


def _nearest_exact_index(n_in, n_out, scale):
    """"nearest-exact": the source pixel whose center is nearest, floor((o + 0.5) * scale)."""
    o = np.arange(n_out).astype(np.float32)
    src = np.floor((o + np.float32(0.5)) * _scale(n_in, n_out, scale)).astype(np.int64)
    return np.minimum(src, n_in - 1)


def _upsample_nearest(x, output_size, scales, exact=False):
    nsp = len(output_size)
    index = _nearest_exact_index if exact else _nearest_index
    for i, (n_out, s) in enumerate(zip(output_size, scales)):
        axis = x.ndim - nsp + i
        x = jnp.take(x, jnp.asarray(index(x.shape[axis], n_out, s)), axis=axis)
    return x


def _ratio(n_in, n_out, align_corners, scale, f):
    """Source pixels per destination pixel in the math type ``f`` (area_pixel_compute_scale)."""
    if align_corners:
        return f((n_in - 1) / (n_out - 1)) if n_out > 1 else f(0)
    return f(1.0 / scale) if scale is not None and scale > 0 else f(n_in / n_out)  # compute_scales_value


def _linear_taps(n_in, n_out, align_corners, scale, dtype):
    """(i0, i1, w0, w1) of linear interpolation along one dim
    (area_pixel_compute_source_index), in the op's math dtype as the CPU
    computes them (float64 for double, else float32)."""
    f = np.dtype(dtype).type
    o = np.arange(n_out).astype(f)
    ratio = _ratio(n_in, n_out, align_corners, scale, f)
    src = ratio * o if align_corners else np.maximum(ratio * (o + f(0.5)) - f(0.5), 0)
    i0 = src.astype(np.int64)
    i1 = i0 + (i0 < n_in - 1)
    w1 = np.clip(src - i0, 0, 1).astype(f)
    return i0, i1, 1 - w1, w1


def _upsample_linear(x, output_size, align_corners, scales):
    nsp = len(output_size)
    y = to_opmath(x)
    for i, (n_out, s) in enumerate(zip(output_size, scales)):
        axis = x.ndim - nsp + i
        i0, i1, w0, w1 = _linear_taps(x.shape[axis], n_out, align_corners, s, y.dtype)
        shape = [1] * x.ndim
        shape[axis] = n_out
        y = (jnp.take(y, jnp.asarray(i0), axis=axis) * jnp.asarray(w0, y.dtype).reshape(shape)
             + jnp.take(y, jnp.asarray(i1), axis=axis) * jnp.asarray(w1, y.dtype).reshape(shape))
    return y.astype(x.dtype)


@register("upsample_nearest1d.default")
def upsample_nearest1d(self, output_size, scales=None):
    return _upsample_nearest(self, output_size, (scales,))


@register("upsample_nearest2d.default")
def upsample_nearest2d(self, output_size, scales_h=None, scales_w=None):
    return _upsample_nearest(self, output_size, (scales_h, scales_w))


@register("upsample_nearest3d.default")
def upsample_nearest3d(self, output_size, scales_d=None, scales_h=None, scales_w=None):
    return _upsample_nearest(self, output_size, (scales_d, scales_h, scales_w))


@register("upsample_nearest1d_backward.default")
def upsample_nearest1d_backward(grad_output, output_size, input_size, scales=None):
    return transpose_of(lambda v: _upsample_nearest(v, output_size, (scales,)), to_opmath(grad_output),
                         input_size)


@register("upsample_nearest2d_backward.default")
def upsample_nearest2d_backward(grad_output, output_size, input_size, scales_h=None, scales_w=None):
    return transpose_of(lambda v: _upsample_nearest(v, output_size, (scales_h, scales_w)),
                         to_opmath(grad_output), input_size)


@register("upsample_nearest3d_backward.default")
def upsample_nearest3d_backward(grad_output, output_size, input_size, scales_d=None, scales_h=None,
                                scales_w=None):
    return transpose_of(lambda v: _upsample_nearest(v, output_size, (scales_d, scales_h, scales_w)),
                         to_opmath(grad_output), input_size)


# nearest-exact, 1-3 spatial dims: the scales are the trailing arguments
for _n in (1, 2, 3):
    register(f"_upsample_nearest_exact{_n}d.default")(
        lambda self, output_size, *scales: _upsample_nearest(self, output_size, scales or (None,) * len(output_size),
                                                             exact=True))
    register(f"_upsample_nearest_exact{_n}d_backward.default")(
        lambda grad_output, output_size, input_size, *scales: transpose_of(
            lambda v: _upsample_nearest(v, output_size, scales or (None,) * len(output_size), exact=True),
            to_opmath(grad_output), input_size))


@register("upsample_linear1d.default")
def upsample_linear1d(self, output_size, align_corners, scales=None):
    return _upsample_linear(self, output_size, align_corners, (scales,))


def _resize_image(x, output_size, align_corners, scales, kind):
    """uint8 images: the CPU's fixed-point resize, not float math."""
    from .antialias import resize_uint8  # it builds on this module's taps
    return resize_uint8(x, output_size, align_corners, scales, kind, antialias=False)


@register("upsample_trilinear3d.default")
def upsample_trilinear3d(self, output_size, align_corners, scales_d=None, scales_h=None, scales_w=None):
    return _upsample_linear(self, output_size, align_corners, (scales_d, scales_h, scales_w))


_CUBIC_A = -0.75  # ATen's (and OpenCV's) cubic convolution parameter


def cubic_taps(n_in, n_out, align_corners, scale, dtype):
    """The 4 clamped source indices and weights per output position along one
    dim (ATen's area_pixel_compute_source_index with cubic=True and
    get_cubic_upsample_coefficients), in the op's math dtype as the CPU
    computes them (float64 for double, else float32)."""
    f = np.dtype(dtype).type
    o = np.arange(n_out).astype(f)
    ratio = _ratio(n_in, n_out, align_corners, scale, f)
    src = ratio * o if align_corners else ratio * (o + f(0.5)) - f(0.5)  # may be < 0
    base = np.floor(src)
    t = (src - base).astype(f)
    a = f(_CUBIC_A)

    def near(x):  # |x| <= 1
        return ((a + 2) * x - (a + 3)) * x * x + 1

    def far(x):  # 1 < |x| < 2
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a

    one = f(1)
    weights = [far(t + one), near(t), near(one - t), far(one - t + one)]
    index = [np.clip(base.astype(np.int64) + k, 0, n_in - 1) for k in (-1, 0, 1, 2)]
    return index, [w.astype(f) for w in weights]


def _upsample_bicubic(x, output_size, align_corners, scales):
    # width first, then height, as the CPU kernel interpolates each row then the column
    y = to_opmath(x)
    for i in (1, 0):
        axis = x.ndim - 2 + i
        index, weights = cubic_taps(x.shape[axis], output_size[i], align_corners, scales[i], y.dtype)
        shape = [1] * x.ndim
        shape[axis] = output_size[i]
        taps = [jnp.take(y, jnp.asarray(ix), axis=axis) * jnp.asarray(w, y.dtype).reshape(shape)
                for ix, w in zip(index, weights)]
        y = taps[0] + taps[1] + taps[2] + taps[3]
    return y.astype(x.dtype)


def _register_image_resize(kind, upsample):
    """upsample_{kind}2d: uint8 images as ATen's image kernels compute them, else ``upsample``."""
    @register(f"upsample_{kind}2d.default")
    def resize(self, output_size, align_corners, scales_h=None, scales_w=None):
        if self.dtype == np.uint8:
            return _resize_image(self, output_size, align_corners, (scales_h, scales_w), kind)
        return upsample(self, output_size, align_corners, (scales_h, scales_w))


_register_image_resize("bilinear", _upsample_linear)
_register_image_resize("bicubic", _upsample_bicubic)


@register("upsample_bicubic2d_backward.default")
def upsample_bicubic2d_backward(grad_output, output_size, input_size, align_corners, scales_h=None,
                                scales_w=None):
    return transpose_of(lambda v: _upsample_bicubic(v, output_size, align_corners, (scales_h, scales_w)),
                         to_opmath(grad_output), input_size)


@register("upsample_linear1d_backward.default")
def upsample_linear1d_backward(grad_output, output_size, input_size, align_corners, scales=None):
    return transpose_of(lambda v: _upsample_linear(v, output_size, align_corners, (scales,)),
                         to_opmath(grad_output), input_size)


@register("upsample_bilinear2d_backward.default")
def upsample_bilinear2d_backward(grad_output, output_size, input_size, align_corners, scales_h=None,
                                 scales_w=None):
    return transpose_of(
        lambda v: _upsample_linear(v, output_size, align_corners, (scales_h, scales_w)),
        to_opmath(grad_output), input_size)


@register("upsample_trilinear3d_backward.default")
def upsample_trilinear3d_backward(grad_output, output_size, input_size, align_corners, scales_d=None,
                                  scales_h=None, scales_w=None):
    return transpose_of(
        lambda v: _upsample_linear(v, output_size, align_corners, (scales_d, scales_h, scales_w)),
        to_opmath(grad_output), input_size)
