"""Antialiased resizing, ``F.interpolate(..., antialias=True)``:
``_upsample_bilinear2d_aa`` / ``_upsample_bicubic2d_aa`` and their backwards,
as ATen's CPU kernels compute them.

Along one axis, output pixel i centers at ``scale * (i + 0.5)`` in input
pixels.  When downsampling (scale >= 1) the filter -- triangle, or Keys cubic
with a = -0.5 -- is stretched by ``scale``, so each output averages its whole
footprint instead of sampling it; the taps within ``support`` of the center
are weighted and the weights normalized to sum 1.  The weights depend on
shapes only: NumPy builds them at trace time, with the CPU's float/double
rounding, as a dense (out, in) matrix per axis, and the resize is a matmul
per axis, width first as on the CPU (an axis whose size does not change is
skipped, as there).  The backward is the transposed matmuls.

uint8 images take the CPU's fixed-point path: double weights scaled to int16
with as many fraction bits as the largest weight allows, integer sums, and
each axis's result rounded and clamped back to uint8.  The plain bilinear and
bicubic resizes of uint8 images (nn.py) use it too, with their own weights.  float16 / bfloat16,
which the CPU kernel rejects, compute in float32 (as CUDA's kernel does).
"""
import jax.numpy as jnp
import numpy as np
import torch
from jax import lax

from .. import dtypes
from ..dtypes import to_opmath
from .registry import guard, register
from .upsample import cubic_taps


def _triangle(x):
    x = np.abs(x)
    return np.where(x < 1, 1 - x, 0).astype(x.dtype)


def _keys_cubic(x):
    a = x.dtype.type(-0.5)  # ATen's antialias cubic (the plain bicubic uses -0.75)
    x = np.abs(x)
    near = ((a + 2) * x - (a + 3)) * x * x + 1
    far = ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
    return np.where(x < 1, near, np.where(x < 2, far, 0)).astype(x.dtype)


_FILTERS = {"bilinear": (_triangle, 2), "bicubic": (_keys_cubic, 4)}  # filter, taps when not stretched


def _weights(n_in, n_out, align_corners, scale, kind, dtype, antialias=True):
    """The (n_out, n_in) resampling matrix of one axis in ``dtype`` (float32 or
    float64: ATen's scalar_t), following its compute_index_ranges_weights.
    ``antialias=False``: the filter never stretched, which is how the CPU
    resizes uint8 images with plain bilinear."""
    f = np.dtype(dtype).type
    filt, taps = _FILTERS[kind]
    if align_corners:
        s = f(n_in - 1) / f(n_out - 1) if n_out > 1 else f(0)
    else:
        s = f(1.0 / scale) if scale is not None and scale > 0 else f(n_in) / f(n_out)
    stretch = float(s) >= 1.0 and antialias
    support = f(taps * 0.5 * float(s) if stretch else taps * 0.5)
    invscale = f(1.0 / float(s) if stretch else 1.0)
    delta = 0.5 if align_corners and not antialias else 0.0  # corners map to pixel centers
    max_taps = int(np.ceil(support)) * 2 + 1
    m = np.zeros((n_out, n_in), f)
    for i in range(n_out):
        center = f(float(s) * (i + 0.5 - delta))
        lo = max(int(float(center - support) + 0.5 + delta), 0)  # C++ casts truncate toward zero
        size = min(max(min(int(float(center + support) + 0.5 + delta), n_in) - lo, 0), max_taps)
        j = np.arange(lo, lo + size).astype(f)
        w = filt((((j - center).astype(np.float64) + 0.5 - delta) * float(invscale)).astype(f))
        total = np.cumsum(w, dtype=f)[-1] if size else f(0)  # summed in order, as the CPU loop
        m[i, lo:lo + size] = w / total if total != 0 else w
    return m


def _matrices(in_hw, out_hw, align_corners, scales, kind, dtype):
    """Per axis (H, W), its matrix, or None where the size does not change (the CPU skips it)."""
    return [None if n_in == n_out else jnp.asarray(_weights(n_in, n_out, align_corners, s, kind, dtype))
            for n_in, n_out, s in zip(in_hw, out_hw, scales)]


def _einsum(spec, a, b):
    return jnp.einsum(spec, a, b, precision=lax.Precision.HIGHEST)


def _fixed_point(m):
    """Double weights as int16 with ``bits`` fraction bits (compute_index_ranges_int16_weights)."""
    w_max = float(m.max()) if m.size else 0.0
    bits = 0
    while bits < 22 and int(0.5 + w_max * (1 << (bits + 1))) < (1 << 15):
        bits += 1
    v = m * (1 << bits)
    return np.trunc(np.where(v < 0, v - 0.5, v + 0.5)).astype(np.int32), bits


def _plain_cubic_weights(n_in, n_out, align_corners, scale):
    """Plain (not antialiased) bicubic as a matrix in float64: the float
    kernel's 4 edge-clamped taps (their weights add up at the edge); the CPU's
    uint8 bicubic resize uses these."""
    index, weights = cubic_taps(n_in, n_out, align_corners, scale, np.float64)
    m = np.zeros((n_out, n_in))
    rows = np.arange(n_out)
    for ix, w in zip(index, weights):
        np.add.at(m, (rows, ix), w)
    return m


def resize_uint8(x, output_size, align_corners, scales, kind, antialias=True):
    """The CPU's uint8 image resize (2-d, with or without antialias): int16
    fixed-point weights, integer sums, each axis rounded and clamped to uint8."""
    y = x.astype(jnp.int32)
    for axis, spec in ((3, "nchw,ow->ncho"), (2, "nchw,oh->ncow")):
        n_in, n_out = x.shape[axis], output_size[axis - 2]
        if n_in == n_out:
            continue
        if kind == "bicubic" and not antialias:
            weights = _plain_cubic_weights(n_in, n_out, align_corners, scales[axis - 2])
        else:
            weights = _weights(n_in, n_out, align_corners, scales[axis - 2], kind, np.float64, antialias)
        m, bits = _fixed_point(weights)
        acc = jnp.einsum(spec, y, jnp.asarray(m), preferred_element_type=jnp.int32)
        y = jnp.clip((acc + (1 << bits >> 1)) >> bits, 0, 255)
    return y.astype(jnp.uint8)


def _resize(x, output_size, align_corners, scales, kind):
    if x.dtype == np.uint8:
        return resize_uint8(x, output_size, align_corners, scales, kind)
    mh, mw = _matrices(x.shape[2:], output_size, align_corners, scales, kind, x.dtype)
    if mw is not None:
        x = _einsum("nchw,ow->ncho", x, mw)
    if mh is not None:
        x = _einsum("nchw,oh->ncow", x, mh)
    return x


def _resize_backward(grad, input_size, align_corners, scales, kind):
    mh, mw = _matrices(input_size[2:], grad.shape[2:], align_corners, scales, kind, grad.dtype)
    if mh is not None:
        grad = _einsum("ncow,oh->nchw", grad, mh)
    if mw is not None:
        grad = _einsum("ncho,ow->nchw", grad, mw)
    return grad


def _register(kind):
    @register(f"_upsample_{kind}2d_aa.default")
    def forward(self, output_size, align_corners, scales_h=None, scales_w=None):
        return _resize(to_opmath(self), output_size, align_corners, (scales_h, scales_w), kind)

    @register(f"_upsample_{kind}2d_aa_backward.default")
    def backward(grad_output, output_size, input_size, align_corners, scales_h=None, scales_w=None):
        return _resize_backward(to_opmath(grad_output), input_size, align_corners, (scales_h, scales_w), kind)


_register("bilinear")
_register("bicubic")


# ---- dtypes: the CPU's NotImplementedError for the ones it has no kernel for ----

_FORWARD_DTYPES = (torch.float32, torch.float64, torch.uint8, torch.float16, torch.bfloat16)


def _check_dtype(kernel_name, t, allowed):
    if t.dtype not in allowed:
        raise NotImplementedError(f'"{kernel_name}" not implemented for \'{dtypes.aten_name(t.dtype)}\'')


def _prepare_forward(bound):
    x = bound["self"]
    if x.dim() == 4 and tuple(x.shape[2:]) != tuple(bound["output_size"]):  # an unresized image is a copy
        _check_dtype("compute_index_ranges_weights", x, _FORWARD_DTYPES)


for _kind in ("bilinear", "bicubic"):
    guard(f"_upsample_{_kind}2d_aa.default", prepare=_prepare_forward)
    guard(f"_upsample_{_kind}2d_aa_backward.default", prepare=lambda bound, k=_kind: _check_dtype(
        f"upsample_{k}2d_aa_backward_cpu", bound["grad_output"], _FORWARD_DTYPES[:2] + _FORWARD_DTYPES[3:]))


# ---- the plain (not antialiased) resizes' dtypes, as the CPU kernels take them ----

_FLOATS = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
_PLAIN_KERNELS = {  # op: (the CPU kernel's name in its error, the dtypes it takes)
    "upsample_linear1d.default": ("compute_indices_weights_linear", _FLOATS),
    "upsample_trilinear3d.default": ("compute_indices_weights_linear", _FLOATS),
    "upsample_bilinear2d.default": ("upsample_bilinear2d_channels_last", _FLOATS + (torch.uint8,)),
    "upsample_bicubic2d.default": ("compute_indices_weights_cubic", _FLOATS + (torch.uint8,)),
}
for _op, (_name, _dtypes) in _PLAIN_KERNELS.items():
    guard(_op, prepare=lambda bound, n=_name, d=_dtypes: _check_dtype(n, bound["self"], d))
