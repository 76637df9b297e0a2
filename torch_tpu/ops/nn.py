"""Neural-network ops: convolution, pooling, normalization, embedding, losses,
dropout, upsampling, padding, im2col, pixel shuffle.  Forward and backward.

Index and weight tables that depend only on shapes (pooling windows,
interpolation sources) are computed with NumPy at trace time, so they are
constants of the compiled program.  Half types compute in float32 like the
CPU kernels' accumulation type.
"""
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..storage import access
from .registry import Kernel, Options, out_dtype, register, register_raw, resolve

HIGHEST = lax.Precision.HIGHEST
_HALF = (np.dtype(jnp.bfloat16), np.dtype(np.float16))
MEAN, SUM = 1, 2  # at::Reduction


def _acc(dtype):
    """The accumulation dtype CPU kernels use for ``dtype``."""
    return np.dtype(np.float32) if np.dtype(dtype) in _HALF else np.dtype(dtype)


def _up(x):
    return x.astype(_acc(x.dtype))


def _tup(v, n, default=None):
    """An int-list argument as an n-tuple (PyTorch allows one value for all dims)."""
    if v is None or len(v) == 0:
        v = default
    v = tuple(int(e) for e in v)
    return v * n if len(v) == 1 else v


def _reduce(loss, reduction):
    if reduction == MEAN:
        return jnp.mean(loss)
    if reduction == SUM:
        return jnp.sum(loss)
    return loss


def _grad_scale(grad, loss_shape, reduction):
    """The upstream gradient spread over each loss element."""
    if reduction == MEAN:
        return jnp.broadcast_to(grad / int(np.prod(loss_shape)), loss_shape)
    return jnp.broadcast_to(grad, loss_shape)


def _masked(name):
    """Register a backward op whose ``output_mask`` selects the gradients wanted.

    The implementation returns only the requested gradients (already in their
    final dtypes); the others come back as undefined tensors (None), as on CPU.
    """
    op = resolve(name)
    pos = [a.name for a in op._schema.arguments].index("output_mask")

    def decorate(impl):
        inner = Kernel(op, impl, "functional", Options(meta=False))

        def kernel(*args, **kwargs):
            mask = kwargs["output_mask"] if "output_mask" in kwargs else args[pos]
            if not any(mask):
                return (None,) * len(mask)
            outs = inner(*args, **kwargs)
            outs = iter(outs if isinstance(outs, tuple) else (outs,))
            return tuple(next(outs) if m else None for m in mask)
        register_raw(name)(kernel)
        return impl
    return decorate


# ---- convolution ---------------------------------------------------------------

_DIMS = {1: ("NCH", "OIH", "NCH"), 2: ("NCHW", "OIHW", "NCHW"), 3: ("NCDHW", "OIDHW", "NCDHW")}


def _conv(x, w, stride, padding, dilation, transposed, output_padding, groups):
    """The convolution without bias, accumulated in the CPU's accumulation dtype."""
    nsp = x.ndim - 2
    acc = _acc(x.dtype)
    if not transposed:
        return lax.conv_general_dilated(
            x, w, window_strides=stride, padding=[(p, p) for p in padding], rhs_dilation=dilation,
            dimension_numbers=_DIMS[nsp], feature_group_count=groups, precision=HIGHEST,
            preferred_element_type=acc)
    # A transposed conv is the input-gradient of a conv: dilate the input by the
    # stride, pad by the rest of the kernel, and convolve with the flipped kernel
    # whose in/out channels are swapped within each group.
    cin, cout_g = w.shape[:2]
    k = w.shape[2:]
    wg = w.reshape((groups, cin // groups, cout_g) + k)
    wg = jnp.swapaxes(wg, 1, 2).reshape((groups * cout_g, cin // groups) + k)
    wg = jnp.flip(wg, axis=tuple(range(2, 2 + nsp)))
    pads = [(d * (kk - 1) - p, d * (kk - 1) - p + op)
            for kk, p, d, op in zip(k, padding, dilation, output_padding)]
    return lax.conv_general_dilated(
        x, wg, window_strides=(1,) * nsp, padding=pads, lhs_dilation=stride, rhs_dilation=dilation,
        dimension_numbers=_DIMS[nsp], feature_group_count=groups, precision=HIGHEST,
        preferred_element_type=acc)


def _conv_args(x, stride, padding, dilation, output_padding):
    n = x.ndim - 2
    return _tup(stride, n, (1,)), _tup(padding, n, (0,)), _tup(dilation, n, (1,)), _tup(output_padding, n, (0,))


@register("convolution.default")
def convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    stride, padding, dilation, output_padding = _conv_args(input, stride, padding, dilation, output_padding)
    y = _conv(input, weight, stride, padding, dilation, transposed, output_padding, groups)
    if bias is not None:
        y = y + bias.astype(y.dtype).reshape((1, -1) + (1,) * (y.ndim - 2))
    return y


@_masked("convolution_backward.default")
def convolution_backward(grad_output, input, weight, bias_sizes, stride, padding, dilation,
                         transposed, output_padding, groups, output_mask):
    stride, padding, dilation, output_padding = _conv_args(input, stride, padding, dilation, output_padding)

    def fwd(x, w):
        return _conv(x, w, stride, padding, dilation, transposed, output_padding, groups)
    _, vjp = jax.vjp(fwd, input, weight)
    gx, gw = vjp(grad_output.astype(_acc(input.dtype)))
    outs = []
    if output_mask[0]:
        outs.append(gx.astype(input.dtype))
    if output_mask[1]:
        outs.append(gw.astype(weight.dtype))
    if output_mask[2]:
        axes = (0,) + tuple(range(2, grad_output.ndim))
        outs.append(jnp.sum(_up(grad_output), axis=axes).astype(grad_output.dtype))
    return tuple(outs)


# ---- pooling -------------------------------------------------------------------

def _pool_out(n, k, s, p, d, ceil_mode):
    """PyTorch's pooling output length (pooling_output_shape)."""
    num = n + 2 * p - d * (k - 1) - 1 + (s - 1 if ceil_mode else 0)
    o = num // s + 1
    if ceil_mode and (o - 1) * s >= n + p:  # the last window must start inside the input or left pad
        o -= 1
    return o


def _sliding(sizes, kernel, stride, padding, dilation, ceil_mode):
    """Per spatial dim: the (out, k) input positions of each window."""
    return [np.arange(_pool_out(n, k, s, p, d, ceil_mode))[:, None] * s - p + np.arange(k)[None, :] * d
            for n, k, s, p, d in zip(sizes, kernel, stride, padding, dilation)]


def _gather_windows(x, positions, valid_end=None):
    """Windows of the trailing spatial dims: (..., o1..on, k1..kn) values, a validity
    mask and each element's flat index within its input plane.

    ``positions[i]`` is an (o_i, k_i) array of input positions; positions outside
    [0, n_i) (or past ``valid_end[i]`` for each row) are invalid.
    """
    nsp = len(positions)
    sizes = x.shape[-nsp:]
    idx, valid, flat = [], np.ones((), bool), np.zeros((), np.int64)
    plane_strides = np.cumprod((1,) + tuple(sizes[::-1]))[::-1][1:]
    for i, pos in enumerate(positions):
        shape = [1] * (2 * nsp)
        shape[i], shape[nsp + i] = pos.shape
        ok = (pos >= 0) & (pos < sizes[i])
        if valid_end is not None:
            ok &= pos < valid_end[i][:, None]
        p = np.clip(pos, 0, sizes[i] - 1).reshape(shape)
        idx.append(p)
        valid = valid & ok.reshape(shape)
        flat = flat + p * plane_strides[i]
    patches = x[(Ellipsis,) + tuple(jnp.asarray(i) for i in idx)]
    return patches, valid, flat


def _fill_low(dtype):
    return -jnp.inf if jnp.issubdtype(dtype, jnp.floating) else jnp.iinfo(dtype).min


def _max_windows(x, positions, valid_end=None):
    """(max over each window, flat input index of the max): first max wins, NaN propagates."""
    nsp = len(positions)
    patches, valid, flat = _gather_windows(x, positions, valid_end)
    patches = jnp.where(jnp.asarray(valid), patches, _fill_low(x.dtype))
    out_shape = patches.shape[:patches.ndim - nsp]
    patches = patches.reshape(out_shape + (-1,))
    arg = jnp.argmax(patches, axis=-1)  # NumPy semantics: first NaN, else first max
    value = jnp.take_along_axis(patches, arg[..., None], axis=-1)[..., 0]
    flat = np.broadcast_to(flat, valid.shape).reshape(valid.shape[:nsp] + (-1,))
    index = _pick_flat(flat, arg)
    return value, index


def _pick_flat(flat, arg):
    """flat[o1..on, arg[..., o1..on]]: the plane index of each window's winner."""
    table = jnp.asarray(flat)  # (o1..on, K)
    out_idx = jnp.broadcast_to(table, arg.shape + (table.shape[-1],))
    return jnp.take_along_axis(out_idx, arg[..., None], axis=-1)[..., 0]


def _scatter_plane(grad, indices, input_shape, nsp):
    """grad scattered (summed) into the input planes at the given flat indices."""
    lead = input_shape[:len(input_shape) - nsp]
    plane = int(np.prod(input_shape[len(input_shape) - nsp:]))
    b = int(np.prod(lead))
    g = _up(grad).reshape(b, -1)
    i = indices.reshape(b, -1)
    out = jnp.zeros((b, plane), g.dtype).at[jnp.arange(b)[:, None], i].add(g)
    return out.reshape(input_shape).astype(grad.dtype)


def _max_pool(self, nsp, kernel_size, stride, padding, dilation, ceil_mode):
    kernel = _tup(kernel_size, nsp)
    stride = _tup(stride, nsp, kernel)
    padding = _tup(padding, nsp, (0,))
    dilation = _tup(dilation, nsp, (1,))
    positions = _sliding(self.shape[-nsp:], kernel, stride, padding, dilation, ceil_mode)
    return _max_windows(self, positions)


@register("max_pool2d_with_indices.default")
def max_pool2d_with_indices(self, kernel_size, stride=(), padding=(0,), dilation=(1,), ceil_mode=False):
    return _max_pool(self, 2, kernel_size, stride, padding, dilation, ceil_mode)


@register("max_pool3d_with_indices.default")
def max_pool3d_with_indices(self, kernel_size, stride=(), padding=(0,), dilation=(1,), ceil_mode=False):
    return _max_pool(self, 3, kernel_size, stride, padding, dilation, ceil_mode)


@register("max_pool2d_with_indices_backward.default")
def max_pool2d_with_indices_backward(grad_output, self, kernel_size, stride, padding, dilation,
                                     ceil_mode, indices):
    return _scatter_plane(grad_output, indices, self.shape, 2)


@register("max_pool3d_with_indices_backward.default")
def max_pool3d_with_indices_backward(grad_output, self, kernel_size, stride, padding, dilation,
                                     ceil_mode, indices):
    return _scatter_plane(grad_output, indices, self.shape, 3)


def _avg_divisor(sizes, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override):
    """The (o1..on) divisor table of avg_pool, as PyTorch's CPU kernel computes it."""
    if divisor_override:
        return None
    full, inside = np.ones((), np.int64), np.ones((), np.int64)
    for i, (n, k, s, p) in enumerate(zip(sizes, kernel, stride, padding)):
        start = np.arange(_pool_out(n, k, s, p, 1, ceil_mode)) * s - p
        end = np.minimum(start + k, n + p)  # windows stop at the right pad
        shape = [1] * len(sizes)
        shape[i] = -1
        full = full * (end - start).reshape(shape)
        inside = inside * (np.minimum(end, n) - np.maximum(start, 0)).reshape(shape)
    return full if count_include_pad else inside


def _avg_pool(x, nsp, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override):
    kernel = _tup(kernel_size, nsp)
    stride = _tup(stride, nsp, kernel)
    padding = _tup(padding, nsp, (0,))
    positions = _sliding(x.shape[-nsp:], kernel, stride, padding, (1,) * nsp, ceil_mode)
    patches, valid, _ = _gather_windows(_up(x), positions)
    total = jnp.sum(jnp.where(jnp.asarray(valid), patches, 0), axis=tuple(range(-nsp, 0)))
    div = _avg_divisor(x.shape[-nsp:], kernel, stride, padding, ceil_mode, count_include_pad,
                       divisor_override)
    div = divisor_override if div is None else jnp.asarray(div, total.dtype)
    return (total / div).astype(x.dtype)


def _avg_pool_backward(grad_output, x, nsp, *config):
    f = jax.linear_transpose(lambda v: _avg_pool(v, nsp, *config), jnp.zeros(x.shape, x.dtype))
    return f(grad_output.astype(x.dtype))[0]


@register("avg_pool2d.default")
def avg_pool2d(self, kernel_size, stride=(), padding=(0,), ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    return _avg_pool(self, 2, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)


@register("avg_pool3d.default")
def avg_pool3d(self, kernel_size, stride=(), padding=(0,), ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    return _avg_pool(self, 3, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)


@register("avg_pool2d_backward.default")
def avg_pool2d_backward(grad_output, self, kernel_size, stride, padding, ceil_mode, count_include_pad,
                        divisor_override):
    return _avg_pool_backward(grad_output, self, 2, kernel_size, stride, padding, ceil_mode,
                              count_include_pad, divisor_override)


@register("avg_pool3d_backward.default")
def avg_pool3d_backward(grad_output, self, kernel_size, stride, padding, ceil_mode, count_include_pad,
                        divisor_override):
    return _avg_pool_backward(grad_output, self, 3, kernel_size, stride, padding, ceil_mode,
                              count_include_pad, divisor_override)


def _adaptive_bounds(n, o):
    """Adaptive pooling windows: [floor(i*n/o), ceil((i+1)*n/o))."""
    i = np.arange(o)
    return (i * n) // o, ((i + 1) * n + o - 1) // o


def _adaptive_matrix(n, o):
    """(o, n) averaging matrix of adaptive average pooling along one dim."""
    start, end = _adaptive_bounds(n, o)
    cols = np.arange(n)[None, :]
    inside = (cols >= start[:, None]) & (cols < end[:, None])
    return inside / (end - start)[:, None]


_LETTERS = "abcdefgh"


def _adaptive_avg(x, output_size, nsp):
    sizes = x.shape[-nsp:]
    out = _up(x)
    for i, (n, o) in enumerate(zip(sizes, _tup(output_size, nsp))):
        mat = jnp.asarray(_adaptive_matrix(n, o), out.dtype)
        out = jnp.moveaxis(jnp.tensordot(out, mat, axes=((x.ndim - nsp + i,), (1,)), precision=HIGHEST),
                           -1, x.ndim - nsp + i)
    return out.astype(x.dtype)


@register("_adaptive_avg_pool2d.default")
def _adaptive_avg_pool2d(self, output_size):
    return _adaptive_avg(self, output_size, 2)


@register("_adaptive_avg_pool3d.default")
def _adaptive_avg_pool3d(self, output_size):
    return _adaptive_avg(self, output_size, 3)


def _adaptive_avg_backward(grad_output, x, nsp):
    out_size = grad_output.shape[-nsp:]
    f = jax.linear_transpose(lambda v: _adaptive_avg(v, out_size, nsp), jnp.zeros(x.shape, x.dtype))
    return f(grad_output.astype(x.dtype))[0]


@register("_adaptive_avg_pool2d_backward.default")
def _adaptive_avg_pool2d_backward(grad_output, self):
    return _adaptive_avg_backward(grad_output, self, 2)


@register("_adaptive_avg_pool3d_backward.default")
def _adaptive_avg_pool3d_backward(grad_output, self):
    return _adaptive_avg_backward(grad_output, self, 3)


def _adaptive_max(x, output_size, nsp):
    positions, ends = [], []
    for n, o in zip(x.shape[-nsp:], _tup(output_size, nsp)):
        start, end = _adaptive_bounds(n, o)
        positions.append(start[:, None] + np.arange(int((end - start).max()))[None, :])
        ends.append(end)
    return _max_windows(x, positions, ends)


@register("adaptive_max_pool2d.default")
def adaptive_max_pool2d(self, output_size):
    return _adaptive_max(self, output_size, 2)


@register("adaptive_max_pool3d.default")
def adaptive_max_pool3d(self, output_size):
    return _adaptive_max(self, output_size, 3)


@register("adaptive_max_pool2d_backward.default")
def adaptive_max_pool2d_backward(grad_output, self, indices):
    return _scatter_plane(grad_output, indices, self.shape, 2)


@register("adaptive_max_pool3d_backward.default")
def adaptive_max_pool3d_backward(grad_output, self, indices):
    return _scatter_plane(grad_output, indices, self.shape, 3)
