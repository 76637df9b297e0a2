"""Reductions, scans, sorting and softmax.

PyTorch's meta kernels already fixed the result dtypes and raised every
argument error (bad dim, int mean, empty max); the kernels here compute in
``_acc`` precision (float16/bfloat16 in float32, ints in the result dtype,
which is int64 for sums) and the wrapper casts to ``out_dtype``.
"""
import jax
import jax.numpy as jnp
import torch
from jax import lax
from torch._prims_common import canonicalize_dim

from .. import dtypes
from ..dtypes import opmath
from ..eager import access
from ..eager.launch import launch
from . import errors
from .elementwise import _both, log_add_exp_complex
from .registry import guard, out_dtype, register, register_raw



def _cast_acc(x, i=0):
    return x.astype(opmath(out_dtype(i)))


def _dims(dim, ndim):
    """Normalized reduction axes; None or [] means every axis (0-d: none)."""
    if dim is None:
        return tuple(range(ndim))
    if isinstance(dim, int):
        dim = (dim,)
    if ndim == 0:
        return ()
    dims = tuple(sorted({d % ndim for d in dim}))
    return dims or tuple(range(ndim))


def _axis(dim, ndim):
    """One normalized axis; 0-d tensors accept dim 0/-1 and have no axis (None)."""
    return None if ndim == 0 else dim % ndim


def _refuse(x, dtypes, what):
    """PyTorch's kernel-level dtype errors that its meta kernels let through."""
    if any(jnp.issubdtype(x.dtype, d) for d in dtypes):
        raise RuntimeError(f'"{what}" not implemented for {x.dtype}')


def _iota(shape, axis, dtype=jnp.int64):
    return lax.broadcasted_iota(dtype, shape, axis)


# ---- sums, means, products --------------------------------------------------

@register("sum.dim_IntList")
def sum_dim(self, dim=None, keepdim=False, dtype=None):
    return jnp.sum(_cast_acc(self), axis=_dims(dim, self.ndim), keepdims=keepdim)


@register("sum.default")
def sum_all(self, dtype=None):
    return jnp.sum(_cast_acc(self))


def _at_most_64_dims(args, kwargs):
    # the CPU's reduction kernels index dims with a 64-bit mask; the meta
    # kernels of nansum, argmax/argmin and max/min.dim let 65 through
    dim = args[1] if len(args) > 1 else kwargs.get("dim")
    if args[0].dim() > 64 and dim is not None and dim != []:
        raise RuntimeError("only tensors with up to 64 dims are supported")


@register("nansum.default", precheck=_at_most_64_dims)
def nansum(self, dim=None, keepdim=False, dtype=None):
    x = _cast_acc(self)
    if jnp.issubdtype(x.dtype, jnp.inexact):
        x = jnp.where(jnp.isnan(x), jnp.zeros((), x.dtype), x)
    return jnp.sum(x, axis=_dims(dim, self.ndim), keepdims=keepdim)


@register("mean.dim")
def mean_dim(self, dim=None, keepdim=False, dtype=None):
    return jnp.mean(_cast_acc(self), axis=_dims(dim, self.ndim), keepdims=keepdim)


@register("mean.default")
def mean_all(self, dtype=None):
    return jnp.mean(_cast_acc(self))


@register("prod.dim_int")
def prod_dim(self, dim, keepdim=False, dtype=None):
    return jnp.prod(_cast_acc(self), axis=_dims(dim, self.ndim), keepdims=keepdim)


@register("prod.default")
def prod_all(self, dtype=None):
    return jnp.prod(_cast_acc(self))


# ---- reductions without an identity over empty inputs -------------------------------
# The CPU refuses them before computing: an IndexError naming the empty dim
# ("amax(): Expected reduction dim 1 to have non-zero size."), or, reducing
# every dim of an empty tensor, its own error.  The meta kernels raise other
# types and words, or nothing (max.dim, median.dim would read no element).

def _nonempty(name, all_dims_error=None, default_dim=None, dim_at=1, wrapped=True):
    """A precheck (first call of a signature, before the meta kernel);
    ``wrapped``: the message names the dim wrapped (amax/amin name it as given)."""
    def check(args, kwargs):
        self = args[0]
        if self.numel() != 0:
            return
        dim = args[dim_at] if len(args) > dim_at else kwargs.get("dim", default_dim)
        if dim is None or (isinstance(dim, (list, tuple)) and not dim):
            if all_dims_error is not None:
                exc_type, message = all_dims_error
                raise exc_type(message)
            return
        for given in (dim,) if isinstance(dim, int) else dim:
            d = canonicalize_dim(self.dim(), given)
            if self.dim() and self.shape[d] == 0:
                raise IndexError(f"{name} Expected reduction dim {d if wrapped else given} to have non-zero size.")
    return check


def _unspecified(name, exc_type=RuntimeError, tail=" Specify the reduction dim with the 'dim' argument."):
    return exc_type, f"{name}(): Expected reduction dim to be specified for input.numel() == 0.{tail}"


# ---- max / min family -------------------------------------------------------
# jnp.max/min propagate NaN and jnp.argmax/argmin pick the first NaN, then the
# first extreme value: PyTorch's rules.

@register("amax.default", precheck=_nonempty("amax():", _unspecified("amax"), wrapped=False))
def amax(self, dim=(), keepdim=False):
    return jnp.max(self, axis=_dims(dim, self.ndim), keepdims=keepdim)


@register("amin.default", precheck=_nonempty("amin():", _unspecified("amin"), wrapped=False))
def amin(self, dim=(), keepdim=False):
    return jnp.min(self, axis=_dims(dim, self.ndim), keepdims=keepdim)


@register("max.default", precheck=_nonempty("max():", _unspecified("max")))
def max_all(self):
    return jnp.max(self)


@register("min.default", precheck=_nonempty("min():", _unspecified("min")))
def min_all(self):
    return jnp.min(self)


def _arg_extreme(find, self, dim, keepdim):
    if self.dtype == jnp.bool_:  # the meta kernel allows it, PyTorch's kernels do not
        raise RuntimeError(f"{find.__name__}(): does not support bool input")
    if dim is None:
        idx = find(self.reshape(-1))
        return jnp.reshape(idx, (1,) * self.ndim) if keepdim else idx
    axis = _axis(dim, self.ndim)
    if axis is None:
        return jnp.zeros((), jnp.int64)
    return find(self, axis=axis, keepdims=keepdim)


@register("argmax.default", precheck=_both(_nonempty("argmax():", _unspecified("argmax", IndexError, "")), _at_most_64_dims))
def argmax(self, dim=None, keepdim=False):
    return _arg_extreme(jnp.argmax, self, dim, keepdim)


@register("argmin.default", precheck=_both(_nonempty("argmin():", _unspecified("argmin", IndexError, "")), _at_most_64_dims))
def argmin(self, dim=None, keepdim=False):
    return _arg_extreme(jnp.argmin, self, dim, keepdim)


def _value_index(reduce, find, self, dim, keepdim):
    axis = _axis(dim, self.ndim)
    if axis is None:
        return self, jnp.zeros((), jnp.int64)
    return (reduce(self, axis=axis, keepdims=keepdim),
            find(self, axis=axis, keepdims=keepdim))


@register("max.dim", precheck=_both(_nonempty("max():"), _at_most_64_dims))
def max_dim(self, dim, keepdim=False):
    return _value_index(jnp.max, jnp.argmax, self, dim, keepdim)


@register("min.dim", precheck=_both(_nonempty("min():"), _at_most_64_dims))
def min_dim(self, dim, keepdim=False):
    return _value_index(jnp.min, jnp.argmin, self, dim, keepdim)


@register("aminmax.default", precheck=_nonempty("aminmax:", (RuntimeError, "aminmax(): cannot compute aminmax over an empty dimension as the operation has no identity.")))
def aminmax(self, dim=None, keepdim=False):
    if dim is None:
        dims = tuple(range(self.ndim))
    else:
        dims = () if self.ndim == 0 else (dim % self.ndim,)
    return (jnp.min(self, axis=dims, keepdims=keepdim),
            jnp.max(self, axis=dims, keepdims=keepdim))


# ---- variance ------------------------------------------------------------------

def _var_mean(self, dim, correction, keepdim):
    if not jnp.issubdtype(self.dtype, jnp.inexact):  # PyTorch's kernel check, not the meta's
        raise RuntimeError("std and var only support floating point and complex dtypes")
    # The var of a complex tensor is real (out_dtype), its mean is not.
    x = self if jnp.iscomplexobj(self) else _cast_acc(self)
    dims = _dims(dim, self.ndim)
    n = 1
    for d in dims:
        n *= self.shape[d]
    mean = jnp.mean(x, axis=dims, keepdims=True)
    dev = x - mean
    sq = jnp.real(dev * jnp.conj(dev)) if jnp.iscomplexobj(dev) else dev * dev
    c = 1 if correction is None else correction
    # PyTorch divides by max(N - correction, 0): 0 gives inf/nan, no error.
    var = jnp.sum(sq, axis=dims, keepdims=keepdim) / jnp.maximum(n - c, 0)
    mean = mean if keepdim else jnp.squeeze(mean, dims)
    return var, mean


@register("var.correction")
def var(self, dim=None, correction=None, keepdim=False):
    return _var_mean(self, dim, correction, keepdim)[0]


@register("std.correction")
def std(self, dim=None, correction=None, keepdim=False):
    return jnp.sqrt(_var_mean(self, dim, correction, keepdim)[0])


@register("var_mean.correction")
def var_mean(self, dim=None, correction=None, keepdim=False):
    return _var_mean(self, dim, correction, keepdim)


@register("std_mean.correction")
def std_mean(self, dim=None, correction=None, keepdim=False):
    v, m = _var_mean(self, dim, correction, keepdim)
    return jnp.sqrt(v), m


def _dof_warning(name):
    """The CPU's warning when correction leaves no degrees of freedom (it
    computes on, giving inf or NaN).  A guard: correction is not in the cache key."""
    def prepare(bound):
        self, dim, correction = bound["self"], bound.get("dim"), bound.get("correction")
        dims = range(self.dim()) if dim is None or len(dim) == 0 else dim
        n = 1
        for d in dims:
            n *= self.shape[canonicalize_dim(self.dim(), d)] if self.dim() else 1
        if n - (1 if correction is None else correction) <= 0:
            errors.warn_at_caller(f"{name}(): degrees of freedom is <= 0. Correction should be strictly less than "
                                  "the reduction factor (input numel divided by output numel).")
    return prepare


for _name in ("var", "std", "var_mean", "std_mean"):
    guard(f"{_name}.correction", prepare=_dof_warning(_name))


# ---- logical reductions ----------------------------------------------------------

def _logical_out(name):
    """The CPU's all/any write only bool or uint8 results (the meta kernel casts to any dtype)."""
    def check(args, kwargs):
        out = kwargs.get("out")
        if out is not None and out.dtype not in (torch.bool, torch.uint8):
            raise RuntimeError(f"{name} only supports bool tensor for result, got: {errors.scalar_type_name(out.dtype)}")
    return check


@register("any.default", precheck=_logical_out("any"))
def any_all(self):
    return jnp.any(self != 0)


def _logical_dims(dim, ndim):
    # Unlike sum, any/all with dim=[] reduce nothing (dim=None reduces all).
    return () if dim is not None and not isinstance(dim, int) and len(dim) == 0 else _dims(dim, ndim)


@register("any.dim", "any.dims", precheck=_logical_out("any"))
def any_dim(self, dim=None, keepdim=False):
    return jnp.any(self != 0, axis=_logical_dims(dim, self.ndim), keepdims=keepdim)


@register("all.default", precheck=_logical_out("all"))
def all_all(self):
    return jnp.all(self != 0)


@register("all.dim", "all.dims", precheck=_logical_out("all"))
def all_dim(self, dim=None, keepdim=False):
    return jnp.all(self != 0, axis=_logical_dims(dim, self.ndim), keepdims=keepdim)


@register("count_nonzero.dim_IntList")
def count_nonzero_dims(self, dim):
    return jnp.sum(self != 0, axis=_dims(dim, self.ndim), dtype=jnp.int64)


@register("count_nonzero.default")
def count_nonzero(self, dim=None):
    return jnp.sum(self != 0, axis=_dims(dim, self.ndim), dtype=jnp.int64)


# ---- logsumexp and norms ---------------------------------------------------------

def _logsumexp(x, dims, keepdim):
    # complex: shifted by the largest real part, as the CPU (so the imaginary
    # part is the principal log's)
    m = jnp.max(jnp.real(x), axis=dims, keepdims=True, initial=-jnp.inf)
    # An infinite max would turn x - m into nan; shift by 0 there instead.
    m = jnp.where(jnp.isfinite(m), m, jnp.zeros((), m.dtype))
    s = jnp.log(jnp.sum(jnp.exp(x - m), axis=dims, keepdims=True)) + m
    return s if keepdim else jnp.squeeze(s, dims)


@register("logsumexp.default")
def logsumexp(self, dim, keepdim=False):
    return _logsumexp(_cast_acc(self), _dims(dim, self.ndim), keepdim)


def _vector_norm(x, ord, dims, keepdim):
    a = jnp.abs(x)
    ord = float(ord)
    if ord == 0:
        return jnp.sum(a != 0, axis=dims, keepdims=keepdim).astype(a.dtype)
    if ord == float("inf"):
        return jnp.max(a, axis=dims, keepdims=keepdim, initial=0)
    if ord == float("-inf"):
        return jnp.min(a, axis=dims, keepdims=keepdim)
    if ord == 1:
        return jnp.sum(a, axis=dims, keepdims=keepdim)
    if ord == 2:
        return jnp.sqrt(jnp.sum(a * a, axis=dims, keepdims=keepdim))
    return jnp.sum(a ** ord, axis=dims, keepdims=keepdim) ** (1.0 / ord)


def _norm_input(self):
    """The input in the precision PyTorch computes the norm in."""
    dt = opmath(out_dtype())
    if jnp.iscomplexobj(self):
        return self.astype(jnp.result_type(dt, jnp.complex64))
    return self.astype(dt)


# ord is a Python number that picks the algorithm, so it is baked in (static).
@register("linalg_vector_norm.default", static_scalars=True)
def linalg_vector_norm(self, ord=2, dim=None, keepdim=False, dtype=None):
    return _vector_norm(_norm_input(self), ord, _dims(dim, self.ndim), keepdim)


@register("norm.ScalarOpt_dim", "norm.ScalarOpt_dim_dtype", static_scalars=True)
def norm_dim(self, p, dim, keepdim=False, dtype=None):
    return _vector_norm(_norm_input(self), 2 if p is None else p, _dims(dim, self.ndim), keepdim)


@register("norm.Scalar", static_scalars=True)
def norm_all(self, p=2):
    return _vector_norm(_norm_input(self), p, _dims(None, self.ndim), False)


@register("norm.ScalarOpt_dtype", static_scalars=True)
def norm_all_dtype(self, p, dtype=None):
    return _vector_norm(_norm_input(self), 2 if p is None else p, _dims(None, self.ndim), False)


@register("trace.default")
def trace(self):
    return jnp.trace(_cast_acc(self))


@register("renorm.default", static_scalars=True)
def renorm(self, p, dim, maxnorm):
    # each slice along dim whose p-norm exceeds maxnorm is scaled down to it
    # (PyTorch's factor maxnorm / (norm + 1e-7)); the norm in float32 for halves
    x = self.astype(opmath(self.dtype))
    dims = tuple(d for d in range(self.ndim) if d != dim % max(self.ndim, 1))
    norm = _vector_norm(x, p, dims, True)
    factor = jnp.where(norm > maxnorm, jnp.asarray(maxnorm, norm.dtype) / (norm + 1e-7), 1.0).astype(norm.dtype)
    return self * factor.astype(self.dtype)


@register("linalg_cross.default")
def linalg_cross(self, other, dim=-1):
    a, b = jnp.broadcast_arrays(self.astype(out_dtype()), other.astype(out_dtype()))
    return jnp.cross(a, b, axis=dim)


@jax.jit
def _all_equal(a, b):
    return jnp.all(a == b)


@register_raw("equal.default")
def equal(self, other):
    """torch.equal: a Python bool, so the answer is read to the host."""
    for t in (self, other):
        if t.device.type != "tpu":
            errors.device_mismatch("aten::equal", t)
    if self.shape != other.shape:
        return False
    common = dtypes.to_np(torch.result_type(self, other))  # mixed dtypes compare promoted, as on the CPU
    a, b = access.read(self).astype(common), access.read(other).astype(common)
    result = launch("aten::equal", _all_equal, (a, b))
    return bool(result)


# ---- scans ---------------------------------------------------------------------------

@register("cumsum.default")
def cumsum(self, dim, dtype=None):
    x = _cast_acc(self)
    axis = _axis(dim, self.ndim)
    return x if axis is None else jnp.cumsum(x, axis=axis)


@register("cumprod.default")
def cumprod(self, dim, dtype=None):
    x = _cast_acc(self)
    axis = _axis(dim, self.ndim)
    return x if axis is None else jnp.cumprod(x, axis=axis)


def _cum_extreme(scan, self, dim):
    axis = _axis(dim, self.ndim)
    if axis is None:
        return self, jnp.zeros((), jnp.int64)
    x = self.astype(jnp.uint8) if self.dtype == jnp.bool_ else self
    values = scan(x, axis=axis)  # NaN-propagating, like PyTorch
    # PyTorch moves the index on ties and on every NaN, so the index is the
    # latest position where x equals the running value; the running value
    # cannot change between such positions, so a running max of them is it.
    hit = (x == values) | (jnp.isnan(x) if jnp.issubdtype(x.dtype, jnp.inexact) else False)
    pos = _iota(x.shape, axis)
    return values.astype(self.dtype), lax.cummax(jnp.where(hit, pos, 0), axis=axis)


@register("cummax.default")
def cummax(self, dim):
    return _cum_extreme(lax.cummax, self, dim)


@register("cummin.default")
def cummin(self, dim):
    return _cum_extreme(lax.cummin, self, dim)


@register("logcumsumexp.default", "_logcumsumexp.default")
def logcumsumexp(self, dim):
    _refuse(self, (jnp.integer, jnp.bool_), "logcumsumexp_out_cpu")
    x = self.astype(opmath(self.dtype))
    axis = _axis(dim, self.ndim)
    if axis is None:
        return x.astype(self.dtype)
    if jnp.iscomplexobj(x):  # the CPU's left fold: the imaginary part depends on the order
        folded = lax.scan(lambda acc, v: (log_add_exp_complex(v, acc),) * 2,
                          jnp.full(x.shape[:axis] + x.shape[axis + 1:], -jnp.inf, x.dtype),
                          jnp.moveaxis(x, axis, 0))[1]
        return jnp.moveaxis(folded, 0, axis).astype(self.dtype)
    return lax.cumlogsumexp(x, axis=axis).astype(self.dtype)


def _check_out_scalar_type(out, expected):
    """ATen's check_scalar_type_device_layout_equal: an out= of another dtype is
    refused, not cast into."""
    if isinstance(out, torch.Tensor) and out.dtype != expected:
        raise RuntimeError(f"expected scalar_type {errors.scalar_type_name(expected)} "
                           f"but found {errors.scalar_type_name(out.dtype)}")


def _prepare_cum_out(bound):
    """logcumsumexp's out=, and cummax/cummin's values= and indices= (Long), as
    the CPU checks them."""
    self = bound["self"]
    _check_out_scalar_type(bound.get("out"), self.dtype)
    _check_out_scalar_type(bound.get("values"), self.dtype)
    _check_out_scalar_type(bound.get("indices"), torch.int64)


guard("logcumsumexp.default", "cummax.default", "cummin.default", prepare=_prepare_cum_out)


# ---- sorting and selection -----------------------------------------------------------

def _sort_key(x):
    """A key under which lax.sort orders like PyTorch: every NaN is the largest
    value and -0.0 ties with 0.0."""
    if x.dtype == jnp.bool_:
        return x.astype(jnp.uint8)
    if jnp.issubdtype(x.dtype, jnp.floating):
        x = x + jnp.zeros((), x.dtype)  # -0.0 + 0.0 == +0.0
        return jnp.where(jnp.isnan(x), jnp.array(jnp.nan, x.dtype), x)
    return x


def _sort_last(x, descending):
    """Stable sort along the last axis: (values, int64 indices)."""
    idx = _iota(x.shape, x.ndim - 1)
    if descending:
        # A stable ascending sort of the reversed row, reversed again, is a
        # descending sort that keeps equal elements in their original order.
        x, idx = jnp.flip(x, -1), jnp.flip(idx, -1)
    _, values, indices = lax.sort((_sort_key(x), x, idx), dimension=x.ndim - 1,
                                  num_keys=1, is_stable=True)
    if descending:
        values, indices = jnp.flip(values, -1), jnp.flip(indices, -1)
    return values, indices


def _sort(self, dim, descending):
    axis = _axis(dim, self.ndim)
    if axis is None:
        return self, jnp.zeros((), jnp.int64)
    x = jnp.moveaxis(self, axis, -1)
    values, indices = _sort_last(x, descending)
    return jnp.moveaxis(values, -1, axis), jnp.moveaxis(indices, -1, axis)


# Always stable: that is one valid answer for stable=False too.
@register("sort.stable")
def sort_stable(self, stable=None, dim=-1, descending=False):
    return _sort(self, dim, descending)


@register("sort.default")
def sort(self, dim=-1, descending=False):
    return _sort(self, dim, descending)


@register("topk.default")
def topk(self, k, dim=-1, largest=True, sorted=True):
    _refuse(self, (jnp.bool_,), "topk")
    values, indices = _sort(self, dim, largest)
    axis = _axis(dim, self.ndim)
    if axis is None:
        return values, indices
    return (lax.slice_in_dim(values, 0, k, axis=axis),
            lax.slice_in_dim(indices, 0, k, axis=axis))


def _select(self, dim, keepdim, position):
    """Element ``position(n, row)`` of each ascending-sorted row along ``dim``."""
    _refuse(self, (jnp.bool_,), "kthvalue/median")
    axis = _axis(dim, self.ndim)
    if axis is None:
        return self, jnp.zeros((), jnp.int64)
    x = jnp.moveaxis(self, axis, -1)
    values, indices = _sort_last(x, False)
    pos = position(x)[..., None]
    v = jnp.take_along_axis(values, pos, axis=-1)
    i = jnp.take_along_axis(indices, pos, axis=-1)
    if keepdim:
        return jnp.moveaxis(v, -1, axis), jnp.moveaxis(i, -1, axis)
    return v[..., 0], i[..., 0]


def _constant_position(k):
    return lambda x: jnp.full(x.shape[:-1], k, jnp.int64)


@register("kthvalue.default", precheck=_nonempty("kthvalue():", default_dim=-1, dim_at=2))
def kthvalue(self, k, dim=-1, keepdim=False):
    return _select(self, dim, keepdim, _constant_position(k - 1))


def _median_position(x):
    """The lower median, or the first NaN: NaNs sort last, so a row with a NaN
    answers with the NaN at position n - count(NaN)."""
    n = x.shape[-1]
    if not jnp.issubdtype(x.dtype, jnp.floating):
        return jnp.full(x.shape[:-1], (n - 1) // 2, jnp.int64)
    nans = jnp.sum(jnp.isnan(x), axis=-1, dtype=jnp.int64)
    return jnp.where(nans > 0, n - nans, (n - 1) // 2)


def _nanmedian_position(x):
    """The lower median of the non-NaN values (all NaN: the first NaN)."""
    n = x.shape[-1]
    if not jnp.issubdtype(x.dtype, jnp.floating):
        return jnp.full(x.shape[:-1], (n - 1) // 2, jnp.int64)
    left = n - jnp.sum(jnp.isnan(x), axis=-1, dtype=jnp.int64)
    return jnp.where(left > 0, (left - 1) // 2, 0)


@register("median.dim", precheck=_nonempty("median():"))
def median_dim(self, dim, keepdim=False):
    return _select(self, dim, keepdim, _median_position)


@register("nanmedian.dim", precheck=_nonempty("median():"))
def nanmedian_dim(self, dim, keepdim=False):
    return _select(self, dim, keepdim, _nanmedian_position)


@register("median.default")
def median_all(self):
    if self.size == 0:
        return _nan_like_cpu(self.dtype)
    return _select(self.reshape(-1), 0, False, _median_position)[0]


def _nan_like_cpu(dtype):
    """The median of no elements: the CPU fills NaN converted to the dtype
    (int64: its minimum, bool: True), as torch's NaN -> dtype cast gives."""
    value = torch.tensor(float("nan")).to(dtypes.to_torch(dtype)).item()
    return jnp.asarray(value, dtype)


@register("nanmedian.default")
def nanmedian_all(self):
    if self.size == 0:
        return _nan_like_cpu(self.dtype)
    return _select(self.reshape(-1), 0, False, _nanmedian_position)[0]


@register("mode.default", precheck=_nonempty("mode():", default_dim=-1))
def mode(self, dim=-1, keepdim=False):
    axis = _axis(dim, self.ndim)
    if axis is None:
        return self, jnp.zeros((), jnp.int64)
    x = jnp.moveaxis(self, axis, -1)
    n = x.shape[-1]
    s = jnp.sort(_sort_key(x), axis=-1)
    pos = _iota(s.shape, s.ndim - 1)
    # Run lengths in the sorted row: each element's run start and run end.
    new_run = jnp.concatenate([jnp.ones(s.shape[:-1] + (1,), bool), s[..., 1:] != s[..., :-1]], -1)
    start = lax.cummax(jnp.where(new_run, pos, 0), axis=s.ndim - 1)
    run_end = jnp.concatenate([new_run[..., 1:], jnp.ones(s.shape[:-1] + (1,), bool)], -1)
    end = lax.cummin(jnp.where(run_end, pos, n), axis=s.ndim - 1, reverse=True)
    # The longest run; argmax takes the first, so ties go to the smallest value.
    best = jnp.argmax(end - start, axis=-1, keepdims=True)
    key = jnp.take_along_axis(s, best, axis=-1)
    # PyTorch reports the last position of the mode in the original row.
    idx = jnp.max(jnp.where(_sort_key(x) == key, _iota(x.shape, x.ndim - 1), -1), axis=-1, keepdims=True)
    value = jnp.take_along_axis(x, idx, axis=-1)
    if keepdim:
        return jnp.moveaxis(value, -1, axis), jnp.moveaxis(idx, -1, axis)
    return value[..., 0], idx[..., 0]


# ---- softmax -----------------------------------------------------------------------------

def _softmax_axis(x, dim):
    """(x viewed with at least one axis, that axis, a function undoing the view)."""
    if x.ndim == 0:
        return x.reshape(1), 0, lambda r: r.reshape(())
    return x, dim % x.ndim, lambda r: r


@register("_softmax.default")
def softmax(self, dim, half_to_float=False):
    _refuse(self, (jnp.integer, jnp.bool_), "softmax")
    x, axis, back = _softmax_axis(_cast_acc(self), dim)
    e = jnp.exp(x - jnp.max(x, axis=axis, keepdims=True, initial=-jnp.inf))
    return back(e / jnp.sum(e, axis=axis, keepdims=True))


@register("_safe_softmax.default")
def safe_softmax(self, dim, dtype=None):
    """softmax, but 0 (not NaN) on rows that are all -inf (fully masked
    attention rows), as ATen's _safe_softmax."""
    x = self if dtype is None else self.astype(dtypes.to_np(dtype))
    masked_rows = jnp.all(self == -jnp.inf, axis=dim % max(self.ndim, 1), keepdims=True) if self.ndim else self == -jnp.inf
    return jnp.where(masked_rows, 0, softmax(x, dim))


@register("_log_softmax.default")
def log_softmax(self, dim, half_to_float=False):
    _refuse(self, (jnp.integer, jnp.bool_), "log_softmax")
    x, axis, back = _softmax_axis(_cast_acc(self), dim)
    shifted = x - jnp.max(x, axis=axis, keepdims=True, initial=-jnp.inf)
    return back(shifted - jnp.log(jnp.sum(jnp.exp(shifted), axis=axis, keepdims=True)))


def _dim_in_range(bound):
    """softmax over a dimension the tensor lacks raises as on the CPU (the
    kernel would wrap it around)."""
    canonicalize_dim(bound["self"].dim(), bound["dim"])


guard("_softmax.default", "_log_softmax.default", "_safe_softmax.default", prepare=_dim_in_range,
      per_signature=True)


@register("_softmax_backward_data.default")
def softmax_backward(grad_output, output, dim, input_dtype):
    acc = opmath(out_dtype())
    g, axis, back = _softmax_axis(grad_output.astype(acc), dim)
    y = _softmax_axis(output.astype(acc), dim)[0]
    return back(y * (g - jnp.sum(g * y, axis=axis, keepdims=True)))


@register("_log_softmax_backward_data.default")
def log_softmax_backward(grad_output, output, dim, input_dtype):
    acc = opmath(out_dtype())
    g, axis, back = _softmax_axis(grad_output.astype(acc), dim)
    y = _softmax_axis(output.astype(acc), dim)[0]
    return back(g - jnp.exp(y) * jnp.sum(g, axis=axis, keepdims=True))
