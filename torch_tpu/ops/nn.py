"""Neural-network ops: convolution, pooling, normalization, embedding, losses,
dropout, padding, im2col, pixel shuffle (upsampling: ``upsample.py``).  Forward and backward.

Index and weight tables that depend only on shapes (pooling windows,
interpolation sources) are computed with NumPy at trace time, so they are
constants of the compiled program.  Half types compute in float32 like the
CPU kernels' accumulation type.
"""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import torch
from jax import lax

from .. import dtypes, precision
from ..dtypes import opmath, to_opmath
from ..eager import access, checks
from ..storage import views
from . import host_mirror, indexing, random_bits
from .division import true_div
from .registry import guard, kernel, register, register_raw, rng_key

HIGHEST = lax.Precision.HIGHEST
MEAN, SUM = 1, 2  # at::Reduction


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


# ---- convolution ---------------------------------------------------------------

_DIMS = {1: ("NCH", "OIH", "NCH"), 2: ("NCHW", "OIHW", "NCHW"), 3: ("NCDHW", "OIDHW", "NCDHW")}


def _conv(x, w, stride, padding, dilation, transposed, output_padding, groups):
    """The convolution without bias, accumulated in the CPU's accumulation dtype."""
    nsp = x.ndim - 2
    acc = opmath(x.dtype)
    if not transposed:
        return lax.conv_general_dilated(
            x, w, window_strides=stride, padding=[(p, p) for p in padding], rhs_dilation=dilation,
            dimension_numbers=_DIMS[nsp], feature_group_count=groups, precision=precision.for_operands(x, w),
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
        dimension_numbers=_DIMS[nsp], feature_group_count=groups, precision=precision.for_operands(x, w),
        preferred_element_type=acc)


def _conv_args(x, stride, padding, dilation, output_padding):
    n = x.ndim - 2
    return _tup(stride, n, (1,)), _tup(padding, n, (0,)), _tup(dilation, n, (1,)), _tup(output_padding, n, (0,))


def _no_input_channels(input, transposed):
    """A convolution of an input without channels: PyTorch's kernels (the CPU's
    "Empty" backend) give an (N, 0, *spatial) result, no bias added, and zero
    gradients; the meta kernel describes an (N, C_out, *spatial) one."""
    return not transposed and input.ndim >= 3 and input.shape[1] == 0


_conv_channels_last = views.channels_last_from(0, 1)


def _conv_layout(args, out_specs):
    if _no_input_channels(args[0], args[6]):
        out_specs = [s._replace(size=size, stride=views.contiguous_strides(size))
                     for s in out_specs for size in [(s.size[0], 0, *s.size[2:])]]
    return _conv_channels_last(args, out_specs)


@register("convolution.default", layout=_conv_layout)
def convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    stride, padding, dilation, output_padding = _conv_args(input, stride, padding, dilation, output_padding)
    y = _conv(input, weight, stride, padding, dilation, transposed, output_padding, groups)
    if _no_input_channels(input, transposed):
        return y[:, :0]
    if bias is not None:
        y = y + bias.astype(y.dtype).reshape((1, -1) + (1,) * (y.ndim - 2))
    return y


@register("convolution_backward.default", mask="output_mask", layout=views.channels_last_from(1, 2))
def convolution_backward(grad_output, input, weight, bias_sizes, stride, padding, dilation,
                         transposed, output_padding, groups, output_mask):
    stride, padding, dilation, output_padding = _conv_args(input, stride, padding, dilation, output_padding)
    if _no_input_channels(input, transposed):
        zeros = (jnp.zeros(input.shape, input.dtype), jnp.zeros(weight.shape, weight.dtype),
                 jnp.zeros(tuple(bias_sizes or (weight.shape[0],)), grad_output.dtype))
        return tuple(z for z, wanted in zip(zeros, output_mask) if wanted)

    def fwd(x, w):
        return _conv(x, w, stride, padding, dilation, transposed, output_padding, groups)
    _, vjp = jax.vjp(fwd, input, weight)
    gx, gw = vjp(grad_output.astype(opmath(input.dtype)))
    outs = []
    if output_mask[0]:
        outs.append(gx.astype(input.dtype))
    if output_mask[1]:
        outs.append(gw.astype(weight.dtype))
    if output_mask[2]:
        axes = (0,) + tuple(range(2, grad_output.ndim))
        outs.append(jnp.sum(to_opmath(grad_output), axis=axes).astype(grad_output.dtype))
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
    if all(_progression(pos) is not None for pos in positions):
        patches = _sliced_patches(x, positions)
    else:  # irregular (adaptive) windows: one gather
        patches = x[(Ellipsis,) + tuple(jnp.asarray(i) for i in idx)]
    return patches, valid, flat


def _progression(pos):
    """(stride, dilation) if pos[o, k] == pos[0, 0] + o*stride + k*dilation, else None."""
    o, k = pos.shape
    s = int(pos[1, 0] - pos[0, 0]) if o > 1 else 1
    d = int(pos[0, 1] - pos[0, 0]) if k > 1 else 1
    expect = pos[0, 0] + np.arange(o)[:, None] * s + np.arange(k)[None, :] * d
    return (s, d) if s > 0 and np.array_equal(pos, expect) else None


def _sliced_patches(x, positions):
    """Regular windows as strided slices of the padded input: no gather, which
    keeps sliding-window ops (pooling, im2col) cheap on the accelerator.  One
    spatial dim at a time (its k slices stacked on a new trailing axis): a
    program of k1 + ... + kn slices, not k1 * ... * kn (a 3-d window of 11 per
    side took minutes to compile)."""
    nsp = len(positions)
    lead = x.ndim - nsp
    sizes = x.shape[lead:]
    lo = [max(0, -int(pos.min())) for pos in positions]
    hi = [max(0, int(pos.max()) - (n - 1)) for pos, n in zip(positions, sizes)]
    patches = lax.pad(x, jnp.zeros((), x.dtype), [(0, 0, 0)] * lead + [(a, b, 0) for a, b in zip(lo, hi)])
    for i, (pos, pad) in enumerate(zip(positions, lo)):
        s, _ = _progression(pos)
        span = (pos.shape[0] - 1) * s + 1
        patches = jnp.stack([lax.slice_in_dim(patches, int(pos[0, k]) + pad, int(pos[0, k]) + pad + span, s,
                                              axis=lead + i)
                             for k in range(pos.shape[1])], axis=-1)
    return patches


def _fill_low(dtype):
    return -jnp.inf if jnp.issubdtype(dtype, jnp.floating) else jnp.iinfo(dtype).min


def _max_windows(x, positions, valid_end=None):
    """(max over each window, flat input index of the max): first max wins, NaN propagates."""
    nsp = len(positions)
    out_shape = x.shape[:x.ndim - nsp] + tuple(pos.shape[0] for pos in positions)
    if 0 in out_shape:  # an empty batch or an empty output (adaptive output_size 0): nothing to reduce
        return jnp.zeros(out_shape, x.dtype), jnp.zeros(out_shape, jnp.int64)
    patches, valid, flat = _gather_windows(x, positions, valid_end)
    patches = jnp.where(jnp.asarray(valid), patches, _fill_low(x.dtype))
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
    if b == 0 or plane == 0:  # (an empty batch: -1 below could not be inferred)
        return jnp.zeros(input_shape, grad.dtype)
    g = to_opmath(grad).reshape(b, -1)
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


def _unbatched_channels_last_3d(args, out_specs):
    """max_pool3d of an unbatched (4-d) input stored channels-last: the CPU's
    kernel lays out the outputs as those of a batch of one (the meta kernel
    keeps channels_last_3d for 5-d inputs only)."""
    t = args[0]
    if isinstance(t, torch.Tensor) and t.dim() == 4:
        one = torch.empty_strided((1, *t.shape), (t.numel(), *t.stride()), device="meta")
        if torch._prims_common.suggest_memory_format(one) == torch.channels_last_3d:
            return [s._replace(stride=torch.empty((1,) + tuple(s.size), device="meta",
                                                  memory_format=torch.channels_last_3d).stride()[1:])
                    if len(s.size) == 4 else s for s in out_specs]
    return out_specs


@register("max_pool3d_with_indices.default", layout=_unbatched_channels_last_3d)
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


_SEQUENTIAL_WINDOW = 256  # windows up to this many elements are summed one by one, in order


def _avg_pool(x, nsp, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, exact=True):
    kernel = _tup(kernel_size, nsp)
    stride = _tup(stride, nsp, kernel)
    padding = _tup(padding, nsp, (0,))
    positions = _sliding(x.shape[-nsp:], kernel, stride, padding, (1,) * nsp, ceil_mode)
    patches, valid, _ = _gather_windows(to_opmath(x), positions)
    terms = jnp.where(jnp.asarray(valid), patches, 0)
    k = int(np.prod(kernel))
    if 0 < k <= _SEQUENTIAL_WINDOW:  # the CPU's loop order (row-major over the window), not XLA's reduce order
        terms = terms.reshape(terms.shape[:terms.ndim - nsp] + (k,))
        total = functools.reduce(lambda acc, i: acc + terms[..., i], range(1, k), terms[..., 0])
    else:
        total = jnp.sum(terms, axis=tuple(range(-nsp, 0)))
    div = _avg_divisor(x.shape[-nsp:], kernel, stride, padding, ceil_mode, count_include_pad,
                       divisor_override)
    div = divisor_override if div is None else jnp.asarray(div, total.dtype)
    if not exact:  # (linear in x, for the backward's transpose)
        return (total / div).astype(x.dtype)
    return true_div(total, div).astype(x.dtype)  # (XLA turns "/ table" into "* 1/table": an ulp off)


def _avg_pool_backward(grad_output, x, nsp, *config):
    f = jax.linear_transpose(lambda v: _avg_pool(v, nsp, *config, exact=False), jnp.zeros(x.shape, x.dtype))
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


def _adaptive_avg(x, output_size, nsp):
    sizes = x.shape[-nsp:]
    out = to_opmath(x)
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
        positions.append(start[:, None] + np.arange(int((end - start).max(initial=0)))[None, :])
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


# ---- normalization -------------------------------------------------------------

def _bn_stats_dtype(input, weight, running_mean):
    """CPU keeps batch-norm statistics in the parameters' dtype (float32 under bf16 input)."""
    for t in (running_mean, weight):
        if t is not None:
            return t.dtype
    return input.dtype


def _channel_shape(x):
    return (1, -1) + (1,) * (x.ndim - 2)


def _bn_axes(x):
    return (0,) + tuple(range(2, x.ndim))


def _bn_forward(input, weight, bias, running_mean, running_var, training, momentum, eps):
    """(out, save_mean, save_invstd[, new running_mean, new running_var])."""
    x = to_opmath(input)
    stats = _bn_stats_dtype(input, weight, running_mean)
    cs = _channel_shape(x)
    if training:
        axes = _bn_axes(x)
        mean = jnp.mean(x, axis=axes)
        var = jnp.mean(jnp.square(x - mean.reshape(cs)), axis=axes)
        invstd = lax.rsqrt(var + eps)
        saved = (mean.astype(stats), invstd.astype(stats))
    else:
        mean, invstd = to_opmath(running_mean), lax.rsqrt(to_opmath(running_var) + eps)
        saved = (jnp.zeros((0,), stats), jnp.zeros((0,), stats))  # CPU returns empty stats in eval
    y = (x - mean.reshape(cs)) * invstd.reshape(cs)
    if weight is not None:
        y = y * to_opmath(weight).reshape(cs)
    if bias is not None:
        y = y + to_opmath(bias).reshape(cs)
    outs = (y.astype(input.dtype),) + saved
    if training and running_mean is not None:
        n = x.size // x.shape[1]
        unbiased = var * (n / max(n - 1, 1))
        outs += ((1 - momentum) * to_opmath(running_mean) + momentum * mean,
                 (1 - momentum) * to_opmath(running_var) + momentum * unbiased)
        outs = outs[:3] + (outs[3].astype(running_mean.dtype), outs[4].astype(running_var.dtype))
    return outs


_bn_kernel = kernel("native_batch_norm.default", _bn_forward, meta=False, layout=views.channels_last_from(0))


@register_raw("native_batch_norm.default", "_native_batch_norm_legit.default")
def native_batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps):
    outs = _bn_kernel(input, weight, bias, running_mean, running_var, training, momentum, eps)
    if len(outs) == 5:  # training with running stats: update them in place, as CPU does
        access.write(running_mean, access.read(outs[3]))
        access.write(running_var, access.read(outs[4]))
    return outs[:3]


@register_raw("_native_batch_norm_legit.no_stats")
def _native_batch_norm_legit_no_stats(input, weight, bias, training, momentum, eps):
    return _bn_kernel(input, weight, bias, None, None, training, momentum, eps)


@register("_native_batch_norm_legit_functional.default")
def _native_batch_norm_legit_functional(input, weight, bias, running_mean, running_var, training,
                                        momentum, eps):
    outs = _bn_forward(input, weight, bias, running_mean, running_var, training, momentum, eps)
    if len(outs) == 3:
        outs += (running_mean, running_var)
    return outs


@register("_native_batch_norm_legit_no_training.default")
def _native_batch_norm_legit_no_training(input, weight, bias, running_mean, running_var, momentum, eps):
    return _bn_forward(input, weight, bias, running_mean, running_var, False, momentum, eps)


@register("native_batch_norm_backward.default", mask="output_mask", layout=views.channels_last_from(1))
def native_batch_norm_backward(grad_out, input, weight, running_mean, running_var, save_mean,
                               save_invstd, train, eps, output_mask):
    x, dy = to_opmath(input), to_opmath(grad_out)
    cs, axes = _channel_shape(x), _bn_axes(x)
    if train:
        mean, invstd = to_opmath(save_mean), to_opmath(save_invstd)
    else:
        mean, invstd = to_opmath(running_mean), lax.rsqrt(to_opmath(running_var) + eps)
    xc = x - mean.reshape(cs)
    sum_dy = jnp.sum(dy, axis=axes)
    dot = jnp.sum(dy * xc, axis=axes)
    w = to_opmath(weight) if weight is not None else jnp.ones_like(mean)
    outs = []
    if output_mask[0]:
        if train:
            n = x.size // x.shape[1]
            proj = xc * (dot * invstd * invstd / n).reshape(cs)
            dx = (dy - (sum_dy / n).reshape(cs) - proj) * (invstd * w).reshape(cs)
        else:
            dx = dy * (invstd * w).reshape(cs)
        outs.append(dx.astype(input.dtype))
    pdtype = weight.dtype if weight is not None else _bn_stats_dtype(input, None, running_mean)
    if output_mask[1]:
        outs.append((dot * invstd).astype(pdtype))
    if output_mask[2]:
        outs.append(sum_dy.astype(pdtype))
    return tuple(outs)


def _norm_axes(x, normalized_shape):
    return tuple(range(x.ndim - len(normalized_shape), x.ndim))


def _stats_dtypes(input, weight, bias):
    """A norm's (output, mean, rstd) dtypes on the CPU (None: the meta kernel's):
    the statistics are float32 for half inputs with float32 weights ("mixed
    type"), else in the input's dtype."""
    mixed = input.dtype in (torch.bfloat16, torch.float16) and any(
        p is not None and p.dtype == torch.float32 for p in (weight, bias))
    stats = torch.float32 if mixed else input.dtype
    return None, stats, stats


@register("native_layer_norm.default",
          out_dtypes=lambda args, kwargs: _stats_dtypes(args[0], *args[2:4]))
def native_layer_norm(input, normalized_shape, weight, bias, eps):
    x = to_opmath(input)
    axes = _norm_axes(x, normalized_shape)
    mean = jnp.mean(x, axis=axes, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=axes, keepdims=True)
    rstd = lax.rsqrt(var + eps)
    y = (x - mean) * rstd
    if weight is not None:
        y = y * to_opmath(weight)
    if bias is not None:
        y = y + to_opmath(bias)
    return y, mean, rstd


@register("native_layer_norm_backward.default", mask="output_mask")
def native_layer_norm_backward(grad_out, input, normalized_shape, mean, rstd, weight, bias, output_mask):
    x, dy = to_opmath(input), to_opmath(grad_out)
    axes = _norm_axes(x, normalized_shape)
    batch_axes = tuple(range(x.ndim - len(normalized_shape)))
    xhat = (x - to_opmath(mean)) * to_opmath(rstd)
    outs = []
    if output_mask[0]:
        g = dy * to_opmath(weight) if weight is not None else dy
        dx = (g - jnp.mean(g, axis=axes, keepdims=True)
              - xhat * jnp.mean(g * xhat, axis=axes, keepdims=True)) * to_opmath(rstd)
        outs.append(dx.astype(input.dtype))
    if output_mask[1]:
        outs.append(jnp.sum(dy * xhat, axis=batch_axes).astype(weight.dtype))
    if output_mask[2]:
        outs.append(jnp.sum(dy, axis=batch_axes).astype(bias.dtype))
    return tuple(outs)


def _grouped(x, N, C, HxW, group):
    return x.reshape(N, group, (C // group) * HxW)


@register("native_group_norm.default",
          out_dtypes=lambda args, kwargs: _stats_dtypes(*args[:3]))
def native_group_norm(input, weight, bias, N, C, HxW, group, eps):
    x = _grouped(to_opmath(input), N, C, HxW, group)
    mean = jnp.mean(x, axis=-1)
    var = jnp.mean(jnp.square(x - mean[..., None]), axis=-1)
    rstd = lax.rsqrt(var + eps)
    y = ((x - mean[..., None]) * rstd[..., None]).reshape(N, C, HxW)
    if weight is not None:
        y = y * to_opmath(weight)[:, None]
    if bias is not None:
        y = y + to_opmath(bias)[:, None]
    return y.reshape(input.shape), mean, rstd


@register("native_group_norm_backward.default", mask="output_mask", layout=views.channels_last_from(1))
def native_group_norm_backward(grad_out, input, mean, rstd, weight, N, C, HxW, group, output_mask):
    x = to_opmath(input).reshape(N, C, HxW)
    dy = to_opmath(grad_out).reshape(N, C, HxW)
    m = jnp.repeat(to_opmath(mean), C // group, axis=1)[..., None]
    r = jnp.repeat(to_opmath(rstd), C // group, axis=1)[..., None]
    xhat = (x - m) * r
    outs = []
    if output_mask[0]:
        g = dy * to_opmath(weight)[:, None] if weight is not None else dy
        gg, xg = _grouped(g, N, C, HxW, group), _grouped(xhat, N, C, HxW, group)
        dx = (gg - jnp.mean(gg, axis=-1, keepdims=True)
              - xg * jnp.mean(gg * xg, axis=-1, keepdims=True)) * to_opmath(rstd)[..., None]
        outs.append(dx.reshape(input.shape).astype(input.dtype))
    pdtype = weight.dtype if weight is not None else input.dtype
    if output_mask[1]:
        outs.append(jnp.sum(dy * xhat, axis=(0, 2)).astype(pdtype))
    if output_mask[2]:
        outs.append(jnp.sum(dy, axis=(0, 2)).astype(pdtype))
    return tuple(outs)


def _weight_norm_axes(v, dim):
    """The axes weight norm reduces: all but ``dim``, which ATen's fused
    kernels allow only as the first or the last."""
    if dim not in (0, v.ndim - 1):
        raise RuntimeError("weight norm: the fused kernel applies only to the first or last dim, "
                           f"got dim={dim} for a {v.ndim}-d weight")
    return tuple(a for a in range(v.ndim) if a != dim)


@register("_weight_norm_interface.default")
def _weight_norm_interface(v, g, dim=0):
    # nn.utils.parametrizations.weight_norm; norms in the accumulation dtype, as on the CPU
    axes = _weight_norm_axes(v, dim)
    norms = jnp.sqrt(jnp.sum(jnp.square(to_opmath(v)), axis=axes, keepdims=True))
    return to_opmath(v) * (to_opmath(g) / norms), norms


@register("_weight_norm_interface_backward.default")
def _weight_norm_interface_backward(grad_w, saved_v, saved_g, saved_norms, dim):
    # w = g v / |v|:  dg = <dw, v> / |v|,  dv = (g / |v|) (dw - v dg / |v|)
    axes = _weight_norm_axes(saved_v, dim)
    v, n = to_opmath(saved_v), to_opmath(saved_norms)
    grad_g = jnp.sum(to_opmath(grad_w) * v, axis=axes, keepdims=True) / n
    grad_v = (to_opmath(saved_g) / n) * (to_opmath(grad_w) - v * (grad_g / n))
    return grad_v, grad_g


# ---- embedding -----------------------------------------------------------------

@register("embedding.default")
def embedding(weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    return jnp.take(weight, indices, axis=0)


def _check_embedding_indices(bound):
    """An index outside the table is PyTorch's IndexError, not a row of NaNs
    (JAX clamps or fills out-of-range gathers).  The indices' dtype is checked
    first, as PyTorch's embedding does before anything else (a table on another
    device included)."""
    indices = bound["indices"]
    if bound["weight"].dim() != 2:  # (checked before the indices, as the CPU's embedding checks it)
        raise RuntimeError("'weight' must be 2-D")
    if indices.dtype not in (torch.long, torch.int):
        raise RuntimeError("Expected tensor for argument #1 'indices' to have one of the following scalar types: "
                           f"Long, Int; but got {indices.type()} instead (while checking arguments for embedding)")
    indexing._check_range(bound["indices"], 0, bound["weight"].shape[0],
                          lambda v: IndexError("index out of range in self"))


@register("embedding_renorm.default")
def embedding_renorm(weight, indices, max_norm, norm_type):
    """Rows that ``indices`` use, scaled down to norm ``max_norm`` where larger
    (``F.embedding(..., max_norm=)``), as the CPU kernel: scale max_norm / (norm + 1e-7)."""
    used = jnp.zeros((weight.shape[0],), bool).at[indices.reshape(-1)].set(True)
    w = to_opmath(weight)
    norms = jnp.sum(jnp.abs(w) ** norm_type, axis=1) ** (1.0 / norm_type)
    scale = jnp.where(used & (norms > max_norm), max_norm / (norms + 1e-7), 1.0)
    return (w * scale[:, None]).astype(weight.dtype)


@register("embedding_dense_backward.default")
def embedding_dense_backward(grad_output, indices, num_weights, padding_idx, scale_grad_by_freq):
    idx = indices.reshape(-1)
    g = to_opmath(grad_output).reshape(idx.shape[0], -1)
    if padding_idx >= 0:  # the padding row never receives gradient
        g = jnp.where((idx == padding_idx)[:, None], 0, g)
    if scale_grad_by_freq:
        counts = jnp.zeros((num_weights,), g.dtype).at[idx].add(1)
        g = g / counts[idx][:, None]
    return jnp.zeros((num_weights, g.shape[1]), g.dtype).at[idx].add(g)


# ---- losses --------------------------------------------------------------------

def _nll_parts(self, target, weight, ignore_index):
    """Class scores moved last, per-element weights (0 where ignored), safe targets."""
    x = self if self.ndim > 1 else self[None]
    t = target if self.ndim > 1 else target[None]
    x = jnp.moveaxis(x, 1, -1)
    valid = t != ignore_index
    tc = jnp.where(valid, t, 0)
    w = jnp.take(to_opmath(weight), tc) if weight is not None else jnp.ones(t.shape, opmath(self.dtype))
    return x, tc, jnp.where(valid, w, 0)


def _nll_forward(self, target, weight, reduction, ignore_index):
    x, tc, w = _nll_parts(self, target, weight, ignore_index)
    picked = to_opmath(jnp.take_along_axis(x, tc[..., None], axis=-1)[..., 0])
    loss = -picked * w
    total = jnp.sum(w)
    if reduction == MEAN:
        return jnp.sum(loss) / total, total
    if reduction == SUM:
        return jnp.sum(loss), total
    return loss.reshape(target.shape), jnp.zeros((), total.dtype)


def _nll_backward(grad_output, self, target, weight, reduction, ignore_index, total_weight):
    x, tc, w = _nll_parts(self, target, weight, ignore_index)
    g = to_opmath(grad_output)
    if reduction == MEAN:
        coef = -w * g / to_opmath(total_weight)
    elif reduction == SUM:
        coef = -w * g
    else:
        coef = -w * g.reshape(w.shape)
    grad = jax.nn.one_hot(tc, x.shape[-1], dtype=coef.dtype) * coef[..., None]
    grad = jnp.moveaxis(grad, -1, 1)
    return grad.reshape(self.shape).astype(self.dtype)


@register("nll_loss_forward.default", "nll_loss2d_forward.default")
def nll_loss_forward(self, target, weight, reduction, ignore_index):
    return _nll_forward(self, target, weight, reduction, ignore_index)


@register("nll_loss_backward.default", "nll_loss2d_backward.default")
def nll_loss_backward(grad_output, self, target, weight, reduction, ignore_index, total_weight):
    return _nll_backward(grad_output, self, target, weight, reduction, ignore_index, total_weight)


def _check_targets(bound):
    """A class index outside [0, classes) other than ignore_index raises as on
    the CPU (the loss would otherwise silently be NaN)."""
    target, ignore = bound["target"], bound["ignore_index"]
    if target.dtype not in (torch.long, torch.uint8):
        raise RuntimeError(f"expected target dtype to be Long or Byte, but got {dtypes.aten_name(target.dtype)}")
    weight = bound["weight"]
    if weight is not None and weight.dtype != bound["self"].dtype:  # the CPU reads weight as self's dtype
        raise RuntimeError(f"expected scalar type {dtypes.aten_name(bound['self'].dtype)} "
                           f"but found {dtypes.aten_name(weight.dtype)}")
    classes = bound["self"].shape[1 if bound["self"].dim() > 1 else 0]
    if not target.numel() or target.device.type != "tpu":
        return
    host = host_mirror.recall(target)
    if host is not None:  # values known on the host (copied from the CPU): checked now, as the CPU does
        lo, hi = indexing._extremes(host)
        if lo < 0 or hi >= classes:  # (only then can ignore_index matter)
            failure = _target_verdict(classes, _target_range(host, ignore, xp=np))
            if failure is not None:
                raise failure
        return
    checks.defer(target, _target_range, indexing._MIN_MAX, functools.partial(_target_verdict, classes),
                 np.int64(ignore), host=True)  # at the next host wait


def _target_range(target, ignore_index, xp=jnp):  # xp=numpy: on the host
    kept = xp.where(target == ignore_index, 0, target)
    return xp.stack([xp.min(kept), xp.max(kept)]).astype(np.int64)


def _target_verdict(classes, lo_hi):
    bad = [int(v) for v in lo_hi[::-1] if not 0 <= v < classes]  # the CPU names the larger first
    return IndexError(f"Target {bad[0]} is out of bounds.") if bad else None


@register("mse_loss.default")
def mse_loss(self, target, reduction=MEAN):
    d = to_opmath(self) - to_opmath(target)
    return _reduce(d * d, reduction)


@register("mse_loss_backward.default")
def mse_loss_backward(grad_output, self, target, reduction):
    d = to_opmath(self) - to_opmath(target)
    return 2 * d * _grad_scale(to_opmath(grad_output), d.shape, reduction)


@register("smooth_l1_loss.default")
def smooth_l1_loss(self, target, reduction=MEAN, beta=1.0):
    d = jnp.abs(to_opmath(self) - to_opmath(target))
    return _reduce(jnp.where(d < beta, 0.5 * d * d / beta, d - 0.5 * beta), reduction)


@register("smooth_l1_loss_backward.default")
def smooth_l1_loss_backward(grad_output, self, target, reduction, beta):
    d = to_opmath(self) - to_opmath(target)
    g = _grad_scale(to_opmath(grad_output), d.shape, reduction)
    return jnp.where(d <= -beta, -g, jnp.where(d >= beta, g, g * d / beta))


@register("huber_loss.default")
def huber_loss(self, target, reduction=MEAN, delta=1.0):
    d = jnp.abs(to_opmath(self) - to_opmath(target))
    return _reduce(jnp.where(d < delta, 0.5 * d * d, delta * (d - 0.5 * delta)), reduction)


@register("huber_loss_backward.default")
def huber_loss_backward(grad_output, self, target, reduction, delta):
    d = to_opmath(self) - to_opmath(target)
    g = _grad_scale(to_opmath(grad_output), d.shape, reduction)
    return jnp.where(d <= -delta, -delta * g, jnp.where(d >= delta, delta * g, g * d))


@register("binary_cross_entropy.default")
def binary_cross_entropy(self, target, weight=None, reduction=MEAN):
    x, t = to_opmath(self), to_opmath(target)
    # CPU clamps each log at -100 so x == 0 or 1 gives a finite loss
    loss = (t - 1) * jnp.maximum(jnp.log1p(-x), -100) - t * jnp.maximum(jnp.log(x), -100)
    if weight is not None:
        loss = loss * to_opmath(weight)
    return _reduce(loss, reduction)


@register("binary_cross_entropy_backward.default")
def binary_cross_entropy_backward(grad_output, self, target, weight=None, reduction=MEAN):
    x, t = to_opmath(self), to_opmath(target)
    g = _grad_scale(to_opmath(grad_output), x.shape, reduction)
    grad = g * (x - t) / jnp.maximum((1 - x) * x, 1e-12)
    if weight is not None:
        grad = grad * to_opmath(weight)
    return grad


@register("binary_cross_entropy_with_logits.default")
def binary_cross_entropy_with_logits(self, target, weight=None, pos_weight=None, reduction=MEAN):
    x, t = to_opmath(self), to_opmath(target)
    # log(1 + exp(-x)) computed without overflow
    softplus_neg = jnp.log1p(jnp.exp(-jnp.abs(x))) + jnp.maximum(-x, 0)
    if pos_weight is not None:
        loss = (1 - t) * x + ((to_opmath(pos_weight) - 1) * t + 1) * softplus_neg
    else:
        loss = (1 - t) * x + softplus_neg
    if weight is not None:
        loss = loss * to_opmath(weight)
    return _reduce(loss, reduction)


# ---- dropout -------------------------------------------------------------------

@register("native_dropout.default", rng=True)
def native_dropout(input, p, train):
    if train is not None and not train:
        return input, jnp.ones(input.shape, bool)
    keep = random_bits.uniform(input.shape, np.float32, rng_key()) < 1.0 - p
    scale = 0.0 if p == 1 else 1.0 / (1.0 - p)
    return input * keep.astype(input.dtype) * jnp.asarray(scale, input.dtype), keep


@register("native_dropout_backward.default")
def native_dropout_backward(grad_output, mask, scale):
    return grad_output * (mask.astype(grad_output.dtype) * jnp.asarray(scale, grad_output.dtype))


def transpose_of(fn, grad_output, input_size):
    """The gradient of linear ``fn`` at an input of ``input_size``: its transpose applied to ``grad_output``."""
    f = jax.linear_transpose(fn, jnp.zeros(tuple(input_size), grad_output.dtype))
    return f(grad_output)[0]


# ---- padding -------------------------------------------------------------------

@register("constant_pad_nd.default")
def constant_pad_nd(self, pad, value=0):
    # pad lists (low, high) pairs from the last dim backwards; negative values crop
    config = [(0, 0, 0)] * self.ndim
    for i in range(len(pad) // 2):
        config[self.ndim - 1 - i] = (pad[2 * i], pad[2 * i + 1], 0)
    return lax.pad(self, jnp.asarray(value).astype(self.dtype), config)


def _pad_mode(x, padding, mode):
    n = len(padding) // 2
    if mode == "edge":
        # output position o reads source clamp(o - low, 0, size - 1): this also
        # crops for negative padding, which jnp.pad rejects
        for i in range(n):
            axis, low, high = x.ndim - 1 - i, padding[2 * i], padding[2 * i + 1]
            size = x.shape[axis]
            x = jnp.take(x, np.clip(np.arange(size + low + high) - low, 0, size - 1), axis=axis)
        return x
    if mode == "reflect" and min(padding) < 0:
        # a negative side crops, which jnp.pad rejects: ATen's index formula, axis by axis
        for i in range(n):
            axis, low, high = x.ndim - 1 - i, padding[2 * i], padding[2 * i + 1]
            size, o = x.shape[axis], np.arange(x.shape[axis] + low + high)
            source = np.where(o < low, 2 * low - o, np.where(o < size + low, o, 2 * (size + low - 1) - o))
            x = jnp.take(x, source - max(low, 0) + max(-low, 0), axis=axis)
        return x
    widths = [(0, 0)] * (x.ndim - n) + [(padding[2 * i], padding[2 * i + 1]) for i in reversed(range(n))]
    return jnp.pad(x, widths, mode=mode)


def _pad_backward(grad_output, self, padding, mode):
    f = jax.linear_transpose(lambda v: _pad_mode(v, padding, mode), jnp.zeros(self.shape, grad_output.dtype))
    return f(grad_output)[0]


def _register_pads(kind, mode):
    for d in (1, 2, 3):
        name = f"{kind}_pad{d}d"

        def forward(self, padding, _mode=mode):
            return _pad_mode(self, padding, _mode)

        def backward(grad_output, self, padding, _mode=mode):
            return _pad_backward(to_opmath(grad_output), self, padding, _mode)
        forward.__name__, backward.__name__ = name, name + "_backward"
        # (the CPU lays out the result, and the input's gradient, as the input: channels_last stays so)
        register(name + ".default", layout=views.channels_last_from(0))(forward)
        register(name + "_backward.default", layout=views.channels_last_from(1))(backward)


_register_pads("reflection", "reflect")  # mirror without repeating the edge
_register_pads("replication", "edge")


# ---- im2col / col2im, pixel shuffle --------------------------------------------

def _im2col(x, kernel_size, dilation, padding, stride):
    positions = _sliding(x.shape[-2:], kernel_size, stride, padding, dilation, False)
    patches, valid, _ = _gather_windows(x, positions)
    patches = jnp.where(jnp.asarray(valid), patches, 0)  # (..., C, oh, ow, kh, kw)
    lead = patches.shape[:-4]
    oh, ow, kh, kw = patches.shape[-4:]
    cols = jnp.moveaxis(patches.reshape(lead + (oh * ow, kh * kw)), -1, -2)  # (..., C, kh*kw, L)
    return cols.reshape(lead[:-1] + (lead[-1] * kh * kw, oh * ow))


@register("im2col.default")
def im2col(self, kernel_size, dilation, padding, stride):
    return _im2col(self, kernel_size, dilation, padding, stride)


@register("col2im.default")
def col2im(self, output_size, kernel_size, dilation, padding, stride):
    # col2im sums overlapping patches back: the transpose of im2col
    kk = kernel_size[0] * kernel_size[1]
    shape = self.shape[:-2] + (self.shape[-2] // kk,) + tuple(output_size)
    return transpose_of(lambda v: _im2col(v, kernel_size, dilation, padding, stride), self, shape)


@register("pixel_shuffle.default")
def pixel_shuffle(self, upscale_factor):
    r = upscale_factor
    *lead, c, h, w = self.shape
    x = self.reshape(tuple(lead) + (c // (r * r), r, r, h, w))
    n = len(lead)
    x = jnp.transpose(x, tuple(range(n)) + (n, n + 3, n + 1, n + 4, n + 2))
    return x.reshape(tuple(lead) + (c // (r * r), h * r, w * r))


@register("pixel_unshuffle.default")
def pixel_unshuffle(self, downscale_factor):
    r = downscale_factor
    *lead, c, h, w = self.shape
    x = self.reshape(tuple(lead) + (c, h // r, r, w // r, r))
    n = len(lead)
    x = jnp.transpose(x, tuple(range(n)) + (n, n + 2, n + 4, n + 1, n + 3))
    return x.reshape(tuple(lead) + (c * r * r, h // r, w // r))


@register("channel_shuffle.default", "native_channel_shuffle.default")
def channel_shuffle(self, groups):
    # (N, g, C/g, *) -> (N, C/g, g, *): channel c*g + k comes from group k
    n, c = self.shape[:2]
    rest = self.shape[2:]
    x = self.reshape((n, groups, c // groups) + rest)
    return jnp.swapaxes(x, 1, 2).reshape(self.shape)


guard("embedding.default", prepare=_check_embedding_indices)
guard("nll_loss_forward.default", "nll_loss2d_forward.default", prepare=_check_targets)
