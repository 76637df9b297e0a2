"""``_foreach_*`` ops: one executable for a whole list of tensors, so an
optimizer step costs a handful of dispatches instead of several per parameter.

Each tensor computes in its own dtype (float16/bfloat16 in float32, as the
per-tensor CPU path does); the registry casts results back and writes the
in-place variants through each destination view.
"""
import jax.numpy as jnp
import numpy as np
import torch

from ..dtypes import to_opmath
from . import elementwise, reduction
from .division import true_div
from .registry import _ROUNDED_SCALAR_OVERLOADS, _UNROUNDED_SCALAR_OPS, _trace, in_place, register


def _in_result(x, i):
    """Position ``i``'s tensor in its result's computation dtype: the CPU runs
    the single-tensor op per position, whose operands promote together
    (bool + 1 is int64, int + 1.5 float32, float + 1j complex64); computing in
    the list's own dtype would round the other operand to it first."""
    return to_opmath(x.astype(_result_dtype(x, i)))


def _result_dtype(x, i):
    """Position ``i``'s result dtype (``x``: its tensor)."""
    out = _trace.out_dtypes
    return np.dtype(out[i] if i < len(out) and out[i] is not None else x.dtype)


def _like(v, x):
    """A Scalar (traced number) or tensor operand in x's computation dtype."""
    return jnp.asarray(v).astype(x.dtype)


def _scalars(scalars, n):
    return scalars if isinstance(scalars, (list, tuple)) else [scalars] * n


def _binary(name, fn, scalar_check=None, check=None):
    """Scalar, ScalarList, List and Tensor variants of a binary pointwise op
    (``scalar_check``: the number variants' first-call check; ``check``:
    every variant's).  Each position computes as the single-tensor op: its
    other operand rounded to a half result's dtype first (but for mul's and
    div's numbers), alpha too."""
    # as the single-tensor kernels read a number (registry._narrowing): mul's and
    # div's unrounded, pow's exponent rounded (pow_scalar); the CPU's in-place list
    # op with numbers runs the single-tensor in-place op per tensor, so mul_.Scalar's rounds
    rounds = name not in _UNROUNDED_SCALAR_OPS
    rounds_in_place = f"{name}_.Scalar" in _ROUNDED_SCALAR_OVERLOADS

    def operand(v, t, i, x, rounded=rounds):
        return _like(elementwise.half_rounded(v, _result_dtype(t, i)) if rounded else v, x)

    def scalar(self, scalar):
        rounded = rounds or (rounds_in_place and in_place())
        return [fn(x, operand(s, t, i, x, rounded))
                for i, (t, x, s) in enumerate(zip(self, _results(self), _scalars(scalar, len(self))))]

    def tensor_list(self, other, alpha=1):
        # alpha is 1 (exact) unless the caller passed one
        return [fn(x, operand(y, t, i, x) * _like(elementwise.half_rounded(alpha, _result_dtype(t, i)), x))
                for i, (t, x, y) in enumerate(zip(self, _results(self), other))]

    def tensor(self, other, alpha=1):
        return tensor_list(self, [other] * len(self), alpha)

    variants = {"Scalar": scalar, "ScalarList": scalar, "List": tensor_list, "Tensor": tensor}
    for overload, impl in variants.items():
        if _exists(f"_foreach_{name}", overload):
            first = scalar_check if overload in ("Scalar", "ScalarList") else None
            if check is not None:
                first = check if first is None else elementwise._both(first, check)
            register(f"_foreach_{name}.{overload}", allow_cpu=("other",), first_call_check=first)(impl)


def _results(xs):
    return [_in_result(x, i) for i, x in enumerate(xs)]


def _exists(packet, overload):
    import torch
    p = getattr(torch.ops.aten, packet, None)
    return p is not None and overload in p.overloads()


def _refuse_complex_clamp(args, kwargs):
    """As the CPU: no clamp by a complex number, nor of a complex tensor (its
    meta kernel computes; with a complex number the dtype check's float
    stand-ins fail too, so it cannot name the dtype)."""
    tensors, scalars = args[0], args[1] if len(args) > 1 else kwargs.get("scalar", kwargs.get("scalars"))
    numbers = scalars if isinstance(scalars, (list, tuple)) else [scalars]
    if any(t.is_complex() for t in tensors) or any(isinstance(v, complex) for v in numbers):
        raise NotImplementedError("clamp is not supported for complex types")


# div: correctly rounded, as the single-tensor kernel (XLA turns a division by
# one number into a multiplication by its reciprocal: 1 ulp off the CPU's)
for _name, _fn in {"add": jnp.add, "mul": jnp.multiply, "div": true_div,
                   "pow": elementwise._pow}.items():
    _binary(_name, _fn)
# (the CPU computes a list's maximum/minimum with numbers as clamp_min/clamp_max: its refusals too)
_binary("maximum", jnp.maximum, _refuse_complex_clamp)
_binary("minimum", jnp.minimum, _refuse_complex_clamp)
_binary("sub", jnp.subtract, check=elementwise._dtype_rules_on_cpu(torch._foreach_sub))  # (no bool operand, as the CPU)
_binary("clamp_min", jnp.maximum, _refuse_complex_clamp)
_binary("clamp_max", jnp.minimum, _refuse_complex_clamp)


def _unary(name, fn):
    # (integers and bools computing a float result are cast to it first, as the
    # single-tensor kernels' INT_TO_FLOAT promotion; a complex abs keeps its input)
    def impl(self):
        return [fn(to_opmath(x) if jnp.issubdtype(x.dtype, jnp.inexact) else _in_result(x, i))
                for i, x in enumerate(self)]
    if _exists(f"_foreach_{name}", "default"):
        register(f"_foreach_{name}.default")(impl)


# The single-tensor kernels' formulas (their values at the edges: sign of a bool, exp of complex infinities).
_SAME = elementwise._INT_TO_FLOAT_UNARY
for _name, _fn in {"sqrt": _SAME["sqrt"], "neg": jnp.negative, "abs": jnp.abs, "exp": _SAME["exp"],
                   "log": _SAME["log"], "reciprocal": elementwise._reciprocal, "sign": elementwise._sign,
                   "rsqrt": _SAME["rsqrt"], "sigmoid": _SAME["sigmoid"],
                   "tanh": _SAME["tanh"], "zero": jnp.zeros_like}.items():
    _unary(_name, _fn)


def _pointwise_ternary(name, combine):
    def operand(y, t, i, x):
        # a tensor of another dtype (ASGD's float32 0-d mus with half lists) is cast to
        # the position's result dtype first, as TensorIterator casts it for the single op
        return _like(elementwise.half_rounded(y, _result_dtype(t, i)), x)

    def scalar(self, tensor1, tensor2, value=1):
        return [combine(x, operand(a, t, i, x), operand(b, t, i, x), _like(v, x))
                for i, (t, x, a, b, v) in enumerate(zip(self, _results(self), tensor1, tensor2,
                                                        _scalars(value, len(self))))]

    def tensor(self, tensor1, tensor2, scalars):
        return scalar(self, tensor1, tensor2, [scalars[i] for i in range(len(self))])

    register(f"_foreach_{name}.Scalar")(scalar)
    register(f"_foreach_{name}.ScalarList")(scalar)
    register(f"_foreach_{name}.Tensor", allow_cpu=("scalars",))(tensor)


# The same formulas as the single-tensor kernels, so both paths agree bit for bit.
_pointwise_ternary("addcmul", lambda x, a, b, v: elementwise.addcmul(x, a, b, v))
_pointwise_ternary("addcdiv", lambda x, a, b, v: elementwise.addcdiv(x, a, b, v))
_lerp = elementwise.lerp


@register("_foreach_lerp.Scalar")
def foreach_lerp_scalar(self, tensors1, weight):
    return [_lerp(x, _like(e, x), _like(weight, x)) for x, e in zip(_results(self), tensors1)]


@register("_foreach_lerp.List")
def foreach_lerp_list(self, tensors1, weights):
    return [_lerp(x, _like(e, x), _like(w, x)) for x, e, w in zip(_results(self), tensors1, weights)]


@register("_foreach_norm.Scalar", static_scalars=True)
def foreach_norm(self, ord=2, dtype=None):
    # each tensor's linalg_vector_norm, as the CPU's loop for the orders it has
    # no fused kernel for (0: the count of nonzeros; -inf: the smallest |x|)
    return [reduction._vector_norm(to_opmath(x).astype(np.float64) if x.dtype == np.float64 else to_opmath(x),
                                   ord, None, False) for x in self]


@register("_foreach_copy.default")
def foreach_copy(self, src, non_blocking=False):
    return list(src)


@register("_foreach_pow.ScalarAndTensor", allow_cpu=("exponent",))
def foreach_scalar_pow(self, exponent):
    # Adam's bias corrections under torch.compile: beta ** step for every step tensor.
    return [elementwise._pow(_like(self, e), e) for e in _results(exponent)]
