"""Pointwise ops: arithmetic, comparisons, logic, math functions, activations.

Operands arrive already cast to PyTorch's computation dtype (``promote=``,
the same rules as ``torch._refs``); results are cast to PyTorch's result dtype.

Ops with non-Scalar static arguments (an ``int dim``, a ``bool`` flag, a
``decimals``) or whose promotion depends on an argument are registered without
``promote=``: the registry would turn those arguments into traced arrays.  They
cast by hand to ``_ct()``, the computation dtype of PyTorch's result dtype
(float16/bfloat16 math runs in float32, as PyTorch's CPU kernels do).
"""
import math
import numbers

import jax.numpy as jnp
import jax.scipy.special as jsp
import ml_dtypes
import numpy as np
import torch
from jax import lax

from .. import dtypes
from . import complex_pow, scalar_checks
from .division import complex_div, true_div
from .registry import PROMOTE, compute_dtype, guard, out_dtype, register

DEFAULT, INT_TO_FLOAT, ALWAYS_BOOL = PROMOTE.DEFAULT, PROMOTE.INT_TO_FLOAT, PROMOTE.ALWAYS_BOOL
COMPLEX_TO_FLOAT, BOOL_TO_LONG, NO_OPMATH = PROMOTE.COMPLEX_TO_FLOAT, PROMOTE.BOOL_TO_LONG, PROMOTE.NO_OPMATH

_HALF = (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))


# ---- helpers -------------------------------------------------------------------

def _ct():
    """Computation dtype for the op being traced: opmath of its result dtype."""
    return dtypes.opmath(out_dtype())


def _cast(dtype, *xs):
    out = tuple(None if x is None else jnp.asarray(x).astype(dtype) for x in xs)
    return out[0] if len(out) == 1 else out


def _is_float(x):
    return jnp.issubdtype(x.dtype, jnp.inexact)


def _is_int(x):
    return jnp.issubdtype(x.dtype, jnp.integer)


def _is_exact(x):
    return not _is_float(x)


def _round_to(x, dtype):
    """x (float32) rounded to ``dtype`` but kept in float32: emulates one
    bfloat16/float16 arithmetic step of PyTorch's scalar_t code.
    (Not lax.reduce_precision: it flushes float16 subnormals to zero.)"""
    dtype = np.dtype(dtype)
    return x.astype(dtype).astype(x.dtype) if dtype in _HALF else x


def _operands(a, b):
    """Two operands as arrays of one dtype and shape, for lax primitives (which do
    not promote): a Python number can arrive raw in a Tensor position."""
    dt = compute_dtype() or jnp.result_type(a, b)
    return jnp.broadcast_arrays(jnp.asarray(a).astype(dt), jnp.asarray(b).astype(dt))


def _lift(f):
    """A one-argument JAX function as a kernel (drops the registry's extra kwargs)."""
    return lambda self: f(self)


# ---- arithmetic ------------------------------------------------------------------

def _check_alpha(args, kwargs):
    """The CPU's alpha rules (the meta kernels check only int tensors with a
    float alpha): a bool alpha needs a bool result, an integral or bool result
    a whole-number alpha.  The key holds alpha's Python type: a first-call check."""
    alpha = kwargs.get("alpha")
    if alpha is None or isinstance(alpha, torch.Tensor):
        return
    result = torch.result_type(args[0], args[1])
    if isinstance(alpha, bool):
        if result is not torch.bool:
            raise RuntimeError("Boolean alpha only supported for Boolean results.")
    elif not (result.is_floating_point or result.is_complex) and not isinstance(alpha, numbers.Integral):
        raise RuntimeError("For integral input tensors, argument alpha must not be a floating point number.")


def _dtype_rules_on_cpu(op):
    """A first-call check: PyTorch's CPU kernel on empty stand-ins of the same
    dtypes (0-d tensors stay 0-d: they promote differently), for the dtype
    rules its meta kernel lacks (``heaviside`` of two dtypes, ``maximum`` of a
    complex tensor, ``1 - bool_tensor``).  Raises the CPU's error."""
    def stand_in(x):
        if isinstance(x, torch.Tensor):
            return torch.empty(() if x.dim() == 0 else (0,), dtype=x.dtype)
        if isinstance(x, (list, tuple)) and any(isinstance(e, torch.Tensor) for e in x):  # a _foreach_* list
            return type(x)(stand_in(e) for e in x)
        return x

    def check(args, kwargs):
        cpu_args = [stand_in(a) for a in args]
        cpu_kwargs = {k: stand_in(v) for k, v in kwargs.items() if k != "out"}
        try:
            op(*cpu_args, **cpu_kwargs)
            if isinstance(kwargs.get("out"), torch.Tensor):  # out='s dtype too (a complex out)
                try:
                    op(*cpu_args, **cpu_kwargs, out=stand_in(kwargs["out"]))
                except TypeError:  # an op with no out= overload in Python
                    pass
        except RuntimeError as e:
            raise RuntimeError(str(e)) from None
    return check


def _both(*checks):
    def check(args, kwargs):
        for c in checks:
            c(args, kwargs)
    return check


def _alpha(alpha):
    """alpha as the CPU's float16/bfloat16 add/sub kernels read it: rounded to
    the tensors' dtype first (``alpha.to<scalar_t>()``), then multiplied in
    float32 (exact: two 11-bit significands).  add(half, half, alpha=0.1)
    differed in 3% of the elements with alpha read unrounded.  (The CPU's
    scalar tail, the last numel % vector-width elements of each thread's
    chunk, rounds the product to half too: not emulated, it depends on the
    CPU's vector width and thread count.)"""
    return half_rounded(alpha, np.dtype(out_dtype()))


def half_rounded(value, dt):
    """A number or operand as the CPU's float16/bfloat16 kernels read it for
    a result of dtype ``dt``: rounded to ``dt`` first (TensorIterator casts
    operands to the common dtype; alpha is converted too), kept in float32 to
    compute.  ``_alpha``, and a _foreach_* op's operand at one position."""
    if (dt not in _HALF or (type(value) in (int, float) and value == 1)
            or getattr(value, "dtype", None) == dt):  # (1 and dt's own values are exact)
        return value
    return _round_to(jnp.asarray(value, dtypes.opmath(dt)), dt)


def _times_alpha(other, alpha):
    """``other * alpha`` as PyTorch's add/sub kernels compute it.  For a
    complex result that is C++'s complex product even when alpha is 1 (XLA
    would fold that away): an infinite part of ``other`` makes the other part
    NaN, and a zero's sign follows the formula, as on the CPU and CUDA."""
    dt = np.dtype(out_dtype())
    if dt.kind != "c":
        return other * _alpha(alpha)
    b = jnp.asarray(other).astype(dt)
    a = jnp.asarray(alpha).astype(dt)
    br, bi, ar, ai = b.real, b.imag, a.real, a.imag
    return lax.complex(br * ar - bi * ai, br * ai + bi * ar)


@register("add.Tensor", "add.Scalar", promote=DEFAULT, first_call_check=_check_alpha, checked_scalars=("alpha",))
def add(self, other, alpha=1):
    return self + _times_alpha(other, alpha)


@register("sub.Tensor", "sub.Scalar", promote=DEFAULT, checked_scalars=("alpha",),  # (a bool operand: the CPU's error)
          first_call_check=_both(_check_alpha, _dtype_rules_on_cpu(torch.sub)))
def sub(self, other, alpha=1):
    return _minus(self, other, alpha)


def _minus(a, b, alpha):
    # PyTorch subtracts as add with -alpha: for complex results that decides
    # the sign of a zero part (a real product is the same either way)
    if np.dtype(out_dtype()).kind == "c":
        return a + _times_alpha(b, -alpha)
    return a - b * _alpha(alpha)


@register("rsub.Tensor", promote=DEFAULT,
          first_call_check=_both(_check_alpha, _dtype_rules_on_cpu(torch.ops.aten.rsub.Tensor)))
@register("rsub.Scalar", promote=DEFAULT,
          first_call_check=_both(_check_alpha, _dtype_rules_on_cpu(torch.ops.aten.rsub.Scalar)))
def rsub(self, other, alpha=1):
    return _minus(other, self, alpha)




@register("mul.Tensor", "mul.Scalar", promote=DEFAULT)
def mul(self, other):
    # bool * bool is logical and (jnp multiplies bools that way too)
    return self * other


@register("div.Tensor", "div.Scalar", promote=INT_TO_FLOAT)  # true_divide: composite, through these
def div(self, other):
    return true_div(self, other)


def _trunc_div(a, b):
    one_divisor = jnp.size(b) == 1
    a, b = _operands(a, b)
    if _is_exact(a):
        return lax.div(a, b)  # C truncation
    if one_divisor:  # the CPU's reduced-float path for a one-element divisor: all in float
        return jnp.trunc(true_div(a, b))
    # a half result: the CPU rounds the float quotient to it, then truncates
    return jnp.trunc(_round_to(true_div(a, b), out_dtype()))


def _floor_div(a, b):
    """PyTorch's floor division: Python's semantics, with its float algorithm."""
    a, b = _operands(a, b)
    if a.dtype == jnp.bool_:
        return a & b
    if _is_int(a):
        q = lax.div(a, b)
        fix = (lax.rem(a, b) != 0) & ((a < 0) != (b < 0))
        return jnp.where(fix, q - 1, q)
    mod = lax.rem(a, b)
    q = true_div(a - mod, b)
    q = jnp.where((mod != 0) & ((b < 0) != (mod < 0)), q - 1, q)
    fq = jnp.floor(q)
    fq = jnp.where(q - fq > 0.5, fq + 1, fq)
    signed_zero = jnp.copysign(jnp.zeros_like(q), a / b)
    q = jnp.where(q != 0, fq, signed_zero)
    return jnp.where(b == 0, true_div(a, b), q)


@register("div.Tensor_mode", "div.Scalar_mode")
def div_mode(self, other, rounding_mode=None):
    # rounding_mode decides the promotion (true division goes to float), so the
    # result dtype from the meta kernel picks the computation dtype.
    a, b = _cast(_ct(), self, other)
    if rounding_mode is None:
        return true_div(a, b)
    if rounding_mode == "trunc":
        return _trunc_div(a, b)
    return _floor_div(a, b)


@register("floor_divide.default", "floor_divide.Scalar", promote=DEFAULT)
def floor_divide(self, other):
    return _floor_div(self, other)


@register("remainder.Tensor", "remainder.Scalar", "remainder.Scalar_Tensor", promote=DEFAULT)
def remainder(self, other):
    # the result takes the divisor's sign
    self, other = _operands(self, other)
    r = lax.rem(self, other)
    return jnp.where((r != 0) & ((r < 0) != (other < 0)), r + other, r)


@register("fmod.Tensor", "fmod.Scalar", promote=DEFAULT)
def fmod(self, other):
    return lax.rem(*_operands(self, other))  # the result takes the dividend's sign


@register("neg.default", promote=DEFAULT)
def neg(self):
    return -self


# conj_physical itself is a composite (real: the input as is); these are the
# overloads it and conj_physical_ reach.
@register("_conj_physical.default")
def conj_physical(self):
    return jnp.conj(self) if jnp.iscomplexobj(self) else self


register("conj_physical.out", mode="out")(conj_physical)
register("conj_physical_.default", mode="inplace")(conj_physical)


def _reciprocal(z):
    """1/z; complex by the CPU's division formula (its values at infinities)."""
    if not jnp.iscomplexobj(z):
        return 1 / z
    # (behind a barrier: XLA folds a constant 1 + 0j's "x * r + 0" to "r", losing -0's sign)
    return complex_div(lax.optimization_barrier(jnp.ones_like(z)), z)


@register("reciprocal.default", promote=INT_TO_FLOAT)
def reciprocal(self):
    return _reciprocal(self)


def _int_pow(a, b):
    """Integer power by squaring (wrapping on overflow), PyTorch's negative-exponent rule."""
    dtype = a.dtype
    if dtype == jnp.bool_:
        return _int_pow(a.astype(jnp.uint8), b.astype(jnp.uint8)).astype(jnp.bool_)
    a, b = jnp.broadcast_arrays(a, jnp.asarray(b, dtype))
    signed = jnp.issubdtype(dtype, jnp.signedinteger)
    e = jnp.where(b < 0, 0, b) if signed else b

    def step(_, carry):
        result, base, e = carry
        result = jnp.where((e & 1) != 0, result * base, result)
        return result, base * base, lax.shift_right_logical(e, jnp.ones_like(e))

    result, _, _ = lax.fori_loop(0, jnp.iinfo(dtype).bits, step, (jnp.ones_like(a), a, e))
    if not signed:
        return result
    one = jnp.ones_like(a)
    neg_val = jnp.where(a == 1, one, jnp.where(a == -1, jnp.where(b % 2 == 0, one, -one), 0))
    return jnp.where(b < 0, neg_val, result)


def _pow(a, b):
    a, b = jnp.broadcast_arrays(a, b)  # lax.pow takes equal shapes only
    if _is_exact(a):
        return _int_pow(a, b)
    return complex_pow.pow(a, b) if jnp.iscomplexobj(a) else lax.pow(a, b)


def _operands_in_result_dtype(*xs):
    """float16/bfloat16 pow: TensorIterator casts every operand (a 0-d float32
    exponent, a Python number base) to the common dtype before the kernel
    computes in float32, so each is rounded to it first (a no-op for operands
    already of that dtype)."""
    dt = np.dtype(out_dtype())
    if dt not in _HALF:
        return xs
    return tuple(_round_to(jnp.asarray(x).astype(dtypes.opmath(dt)), dt) for x in xs)


@register("pow.Tensor_Tensor", opmath=True)
def pow_tensor(a, b):
    return _pow(*_operands_in_result_dtype(a, b))


@register("pow.Scalar", opmath=True)
def pow_scalar_base(a, b):
    a, b = _operands_in_result_dtype(a, b)
    result = _pow(jnp.broadcast_to(a, b.shape), b)
    if jnp.iscomplexobj(result):  # ATen's shortcut, which real pow agrees with: 1 ** NaN is 1 there
        return jnp.where(a == 1, jnp.ones_like(result), result)
    return result


def _check_int_pow(args, kwargs):
    """An integer tensor to a negative integer power, or an exponent out of
    float16/bfloat16's range (the CPU converts it to the dtype there): the CPU's
    error, raised before tracing (the exponent is part of the key: a first-call check)."""
    self, exponent = args[0], args[1] if len(args) > 1 else kwargs["exponent"]
    if self.dtype in (torch.float16, torch.bfloat16) and not isinstance(exponent, complex):
        scalar_checks.check_values((exponent,), self.dtype)
    if isinstance(exponent, numbers.Integral) and not isinstance(exponent, bool) and exponent < 0:
        result = torch.result_type(self, exponent)
        if not (result.is_floating_point or result.is_complex):
            raise RuntimeError("Integers to negative integer powers are not allowed.")


@register("pow.Tensor_Scalar", static_scalars=True, first_call_check=_check_int_pow)
def pow_scalar(self, exponent):
    # The exponent's value is known at trace time, to follow PyTorch's CPU
    # kernel: exact shortcuts for common exponents (x*x for 2, sqrt for 0.5...).
    dt = np.dtype(out_dtype())
    ct = dtypes.opmath(dt)
    x = self.astype(ct)
    if not jnp.issubdtype(ct, jnp.inexact):
        if not isinstance(exponent, bool) and exponent < 0:
            raise RuntimeError("Integers to negative integer powers are not allowed.")
        return _int_pow(x, jnp.asarray(int(exponent), ct))
    if exponent == 0:
        return jnp.ones_like(x)
    if exponent == 1:
        return x
    if dt in _HALF and not isinstance(exponent, complex):
        exponent = float(np.asarray(exponent, dt))  # PyTorch converts the exponent to the tensor's dtype
    if dt == np.float16:  # float16 has no shortcuts: std::pow throughout
        return lax.pow(x, jnp.asarray(exponent, ct))
    special = {2: lambda v: v * v, 3: lambda v: v * v * v, 0.5: jnp.sqrt,
               -0.5: lambda v: _reciprocal(jnp.sqrt(v)), -1: _reciprocal, -2: lambda v: _reciprocal(v * v)}
    # (a complex exponent with no imaginary part takes them too: ATen compares its value)
    plain = exponent.real if isinstance(exponent, complex) and exponent.imag == 0 else exponent
    if not isinstance(plain, complex) and plain in special:
        return special[plain](x)
    if jnp.issubdtype(ct, jnp.complexfloating):
        return complex_pow.pow(x, jnp.full_like(x, exponent))
    return lax.pow(x, jnp.asarray(exponent, ct))


@register("lerp.Scalar", "lerp.Tensor", promote=DEFAULT)
def lerp(self, end, weight):
    # PyTorch's two-sided formula keeps lerp exact at both ends
    diff = end - self
    return jnp.where(jnp.abs(weight) < 0.5, self + weight * diff, end - diff * (1 - weight))


@register("addcmul.default", promote=DEFAULT)
def addcmul(self, tensor1, tensor2, value=1):
    return self + value * tensor1 * tensor2


@register("addcdiv.default", promote=DEFAULT)
def addcdiv(self, tensor1, tensor2, value=1):
    return self + true_div(value * tensor1, tensor2)


# ---- unary math ----------------------------------------------------------------------

def _digamma(x):
    # PyTorch: digamma(+-0) = -+inf (the pole's side), not NaN
    return jnp.where(x == 0, jnp.copysign(jnp.asarray(jnp.inf, x.dtype), -x), lax.digamma(x))


def _exp2(x):
    if jnp.iscomplexobj(x):  # 2**z = exp(z ln 2), ln 2 scaling each part (a complex product makes inf*0 NaN)
        ln2 = jnp.asarray(math.log(2), jnp.real(x).dtype)
        return _exp(lax.complex(jnp.real(x) * ln2, jnp.imag(x) * ln2))
    # split off the integer part so that 2**n is exact (XLA's exp2 is exp(x ln 2))
    n = jnp.round(x)
    n_int = jnp.clip(jnp.where(jnp.isfinite(n), n, 0), -2000, 2000).astype(jnp.int32)
    out = jnp.ldexp(jnp.exp2(x - n), n_int)
    return jnp.where(jnp.isfinite(x), out, jnp.exp2(x))


def _sinc(x):
    px = x * jnp.asarray(math.pi, x.dtype)
    return jnp.where(x == 0, jnp.ones_like(x), jnp.sin(px) / px)


def _entr(x):
    return jnp.where(jnp.isnan(x), x, jnp.where(x > 0, -x * jnp.log(x),
                                                 jnp.where(x == 0, 0, -jnp.inf)).astype(x.dtype))


def _angle(x):
    if jnp.iscomplexobj(x):  # arg(z) = atan2(imag, real), as std::arg
        return jnp.arctan2(jnp.imag(x), jnp.real(x))
    return jnp.where(jnp.isnan(x), x, jnp.where(x < 0, jnp.asarray(math.pi, x.dtype), 0).astype(x.dtype))


def _exp(x):
    """exp, with C99's (and the CPU's) values where the imaginary part is not
    finite: exp(-inf + i*y) = 0 and exp(+inf + i*y) = inf + i*NaN (XLA: NaN)."""
    out = jnp.exp(x)
    if not jnp.iscomplexobj(x):
        return out
    re, odd = jnp.real(x), ~jnp.isfinite(jnp.imag(x))
    out = jnp.where((re == -jnp.inf) & odd, jnp.zeros_like(out), out)
    return jnp.where((re == jnp.inf) & odd, lax.complex(re, jnp.full_like(re, jnp.nan)), out)


def _sqrt(z):
    """sqrt, with C99's (and the CPU's) sqrt(x + i*inf) = inf + i*inf, even for x NaN."""
    out = jnp.sqrt(z)
    if not jnp.iscomplexobj(z):
        return out
    re, im = jnp.real(z), jnp.imag(z)
    return jnp.where(jnp.isinf(im), lax.complex(jnp.full_like(re, jnp.inf), im), out)



# ops whose integer inputs compute in the default float dtype
def _sigmoid(x):
    return _reciprocal(1 + _exp(-x))


_INT_TO_FLOAT_UNARY = {
    "sqrt": _sqrt, "rsqrt": lambda x: _reciprocal(_sqrt(x)),
    "exp": _exp, "exp2": _exp2, "expm1": jnp.expm1,
    "log": jnp.log, "log2": jnp.log2, "log10": jnp.log10, "log1p": jnp.log1p,
    "sin": jnp.sin, "cos": jnp.cos, "tan": jnp.tan,
    "asin": jnp.arcsin, "acos": jnp.arccos, "atan": jnp.arctan,
    "sinh": jnp.sinh, "cosh": jnp.cosh, "tanh": jnp.tanh,
    "asinh": jnp.arcsinh, "acosh": jnp.arccosh, "atanh": jnp.arctanh,
    "erf": lax.erf, "erfc": lax.erfc, "erfinv": lax.erf_inv,
    "lgamma": lax.lgamma, "digamma": _digamma,
    "sigmoid": _sigmoid,
    "sinc": _sinc, "angle": _angle,
    "i0": jsp.i0, "special_i0e": jsp.i0e, "special_i1": jsp.i1, "special_i1e": jsp.i1e,
    "special_ndtri": jsp.ndtri, "special_log_ndtr": jsp.log_ndtr, "special_entr": _entr,
    "deg2rad": lambda x: x * jnp.asarray(math.pi / 180, x.dtype),
    "rad2deg": lambda x: x * jnp.asarray(180 / math.pi, x.dtype),
}
for _name, _f in _INT_TO_FLOAT_UNARY.items():
    register(f"{_name}.default", promote=INT_TO_FLOAT)(_lift(_f))


@register("abs.default", promote=COMPLEX_TO_FLOAT)
def abs_(self):
    if jnp.iscomplexobj(self):  # |inf + i*NaN| = inf, as hypot (XLA: NaN)
        re, im = jnp.real(self), jnp.imag(self)
        return jnp.where(jnp.isinf(re) | jnp.isinf(im), jnp.asarray(jnp.inf, re.dtype), jnp.abs(self))
    return self if self.dtype == jnp.bool_ else jnp.abs(self)


def _sign(x):
    if x.dtype == jnp.bool_:
        return x
    # (0 < x) - (x < 0): sign(NaN) = 0 and sign(-0.0) = +0, as PyTorch
    return (x > 0).astype(x.dtype) - (x < 0).astype(x.dtype)


register("sign.default", promote=DEFAULT)(_lift(_sign))


@register("sgn.default", promote=DEFAULT)
def sgn(self):
    if jnp.issubdtype(self.dtype, jnp.complexfloating):
        mag = jnp.abs(self)
        return jnp.where(mag == 0, 0, self / jnp.where(mag == 0, 1, mag)).astype(self.dtype)
    return _sign(self)


def _rounding(f):
    # integers are already whole: PyTorch returns a copy
    return lambda self: self if _is_exact(self) else f(self)


for _name, _f in {"floor": jnp.floor, "ceil": jnp.ceil, "trunc": jnp.trunc,
                  "round": jnp.round}.items():  # jnp.round: half to even, as PyTorch
    register(f"{_name}.default", promote=DEFAULT)(_rounding(_f))


@register("round.decimals", opmath=True)
def round_decimals(x, decimals=0):
    if decimals == 0:
        return jnp.round(x)
    scale = jnp.asarray(10.0 ** abs(decimals), x.dtype)
    if decimals < 0:
        return jnp.round(true_div(x, scale)) * scale
    return true_div(jnp.round(x * scale), scale)


@register("frac.default", promote=DEFAULT)
def frac(self):
    return self - jnp.trunc(self)


@register("logit.default")
def logit(self, eps=None):
    # PyTorch's kernel works in the tensor's own dtype (each bfloat16 step
    # rounds: 1 - eps may become 1); only the log runs in float32.
    r = lambda v: _round_to(v, self.dtype)  # noqa: E731
    x = self.astype(_ct())
    if eps is not None:
        lo = r(jnp.asarray(eps, x.dtype))
        x = jnp.clip(x, lo, r(1 - lo))
    return jnp.log(r(true_div(x, r(1 - x))))


@register("nan_to_num.default")
def nan_to_num(self, nan=None, posinf=None, neginf=None):
    if _is_exact(self):
        return self
    if jnp.iscomplexobj(self):  # each part on its own, as the CPU
        return lax.complex(nan_to_num(jnp.real(self), nan, posinf, neginf),
                           nan_to_num(jnp.imag(self), nan, posinf, neginf))
    info = jnp.finfo(self.dtype)
    nan = 0.0 if nan is None else nan
    posinf = info.max if posinf is None else posinf
    neginf = info.min if neginf is None else neginf
    x = jnp.where(jnp.isnan(self), jnp.asarray(nan, self.dtype), self)
    x = jnp.where(x == jnp.inf, jnp.asarray(posinf, self.dtype), x)
    return jnp.where(x == -jnp.inf, jnp.asarray(neginf, self.dtype), x)


# ---- min / max / clamp ---------------------------------------------------------------

def _maximum(a, b):
    return (a | b) if a.dtype == jnp.bool_ else jnp.maximum(a, b)  # NaN-propagating


def _minimum(a, b):
    return (a & b) if a.dtype == jnp.bool_ else jnp.minimum(a, b)


# complex operands: the CPU's "maximum not implemented for complex tensors."
register("maximum.default", promote=DEFAULT, first_call_check=_dtype_rules_on_cpu(torch.maximum))(_maximum)
register("minimum.default", promote=DEFAULT, first_call_check=_dtype_rules_on_cpu(torch.minimum))(_minimum)


@register("fmax.default", promote=DEFAULT, first_call_check=_dtype_rules_on_cpu(torch.fmax))
def fmax(self, other):
    return jnp.fmax(self, other) if _is_float(self) else _maximum(self, other)


@register("fmin.default", promote=DEFAULT, first_call_check=_dtype_rules_on_cpu(torch.fmin))
def fmin(self, other):
    return jnp.fmin(self, other) if _is_float(self) else _minimum(self, other)


def _clamp(x, lo, hi):
    # max first, then min: with min > max every element becomes max, as PyTorch
    # (astype: a negative int bound of a uint8 tensor wraps, as the CPU's conversion)
    if lo is not None:
        x = _maximum(x, jnp.asarray(lo).astype(x.dtype))
    if hi is not None:
        x = _minimum(x, jnp.asarray(hi).astype(x.dtype))
    return x


def _refuse_complex_bound(args, kwargs):
    """As the CPU: no clamp by a complex number, even of a real tensor (a
    complex tensor is refused by the dtype check)."""
    if any(isinstance(b, complex) for b in (*args[1:], kwargs.get("min"), kwargs.get("max"))):
        raise NotImplementedError("clamp is not supported for complex types")


@register("clamp.default", "clamp.Tensor", promote=DEFAULT, checked_scalars=("min", "max"),
          first_call_check=_refuse_complex_bound)
def clamp(self, min=None, max=None):
    return _clamp(self, min, max)


@register("clamp_min.default", "clamp_min.Tensor", promote=DEFAULT, checked_scalars=("min",),
          first_call_check=_refuse_complex_bound)
def clamp_min(self, min):
    return _clamp(self, min, None)


@register("clamp_max.default", "clamp_max.Tensor", promote=DEFAULT, checked_scalars=("max",),
          first_call_check=_refuse_complex_bound)
def clamp_max(self, max):
    return _clamp(self, None, max)


# ---- binary math ---------------------------------------------------------------------

register("hypot.default", promote=DEFAULT)(jnp.hypot)
register("atan2.default", promote=INT_TO_FLOAT)(jnp.arctan2)
register("copysign.Tensor", "copysign.Scalar", promote=INT_TO_FLOAT)(jnp.copysign)
register("nextafter.default", promote=NO_OPMATH)(jnp.nextafter)


def log_add_exp_complex(x, y):
    """log(exp(x) + exp(y)) for complex values as ATen computes it: around the
    operand with the larger real part; NaN-infectious; equal infinite real parts
    handled apart (logaddexp, and each step of logcumsumexp)."""
    x, y = jnp.broadcast_arrays(x, y)
    x_smaller = jnp.real(x) < jnp.real(y)
    low, high = jnp.where(x_smaller, x, y), jnp.where(x_smaller, y, x)
    nan = jnp.isnan(x) | jnp.isnan(y)  # jnp.isnan of a complex value: either part
    same_inf = ~jnp.isfinite(jnp.real(low)) & (jnp.real(low) == jnp.real(high))
    out = jnp.log1p(jnp.exp(low - high)) + high
    out = jnp.where(same_inf, jnp.where(jnp.real(low) < 0, low, jnp.log(jnp.exp(low) + jnp.exp(high))), out)
    return jnp.where(nan, jnp.asarray(complex(jnp.nan, jnp.nan), x.dtype), out)


@register("logaddexp.default", promote=DEFAULT)
def logaddexp(self, other):
    if jnp.iscomplexobj(self) or jnp.iscomplexobj(other):
        return log_add_exp_complex(self, other)
    m = jnp.maximum(self, other)
    # equal infinities: the formula would give inf - inf = NaN
    return jnp.where(jnp.isinf(self) & (self == other), self,
                     m + jnp.log1p(jnp.exp(-jnp.abs(self - other))))


@register("logaddexp2.default", promote=DEFAULT)
def logaddexp2(self, other):
    m = jnp.maximum(self, other)
    inv_ln2 = jnp.asarray(1 / math.log(2), self.dtype)
    return jnp.where(jnp.isinf(self) & (self == other), self,
                     m + jnp.log1p(jnp.exp2(-jnp.abs(self - other))) * inv_ln2)


@register("xlogy.Tensor", "xlogy.Scalar_Self", "xlogy.Scalar_Other", promote=INT_TO_FLOAT)
def xlogy(self, other):
    self, other = jnp.broadcast_arrays(self, other)
    log = _round_to(jnp.log(other), out_dtype())  # the CPU's log of a reduced float is one too (then x * it)
    out = jnp.where(self == 0, jnp.zeros_like(self), self * log)
    return jnp.where(jnp.isnan(other), other, out)


@register("special_xlog1py.default", "special_xlog1py.self_scalar", "special_xlog1py.other_scalar",
          promote=INT_TO_FLOAT)
def xlog1py(self, other):
    self, other = jnp.broadcast_arrays(self, other)
    log1p = _round_to(jnp.log1p(other), out_dtype())  # as xlogy's log
    out = jnp.where(self == 0, jnp.zeros_like(self), self * log1p)
    return jnp.where(jnp.isnan(other), other, out)


@register("heaviside.default", promote=DEFAULT, first_call_check=_dtype_rules_on_cpu(torch.heaviside))
def heaviside(self, values):
    # NaN input gives 0 (NaN > 0 is false), as PyTorch's kernel
    return jnp.where(self == 0, values, (self > 0).astype(self.dtype))


# ---- classification ----------------------------------------------------------------------

def _all_false(x):
    return jnp.zeros(x.shape, jnp.bool_)


register("isnan.default")(lambda self: jnp.isnan(self) if _is_float(self) else _all_false(self))
register("isinf.default")(lambda self: jnp.isinf(self) if _is_float(self) else _all_false(self))
register("isposinf.default")(lambda self: self == jnp.inf if _is_float(self) else _all_false(self))
register("isneginf.default")(lambda self: self == -jnp.inf if _is_float(self) else _all_false(self))


@register("signbit.default")
def signbit(self):
    if _is_float(self):
        return jnp.signbit(self)  # sees -0.0 and -NaN
    return self < 0 if jnp.issubdtype(self.dtype, jnp.signedinteger) else _all_false(self)


# ---- comparisons and logic ------------------------------------------------------------------

for _name, _f in {"eq": jnp.equal, "ne": jnp.not_equal, "lt": jnp.less, "le": jnp.less_equal,
                  "gt": jnp.greater, "ge": jnp.greater_equal}.items():
    register(f"{_name}.Tensor", f"{_name}.Scalar", promote=ALWAYS_BOOL)(_f)


def _truth(x):
    return jnp.asarray(x) != 0  # NaN is true, as in C


register("logical_and.default")(lambda self, other: _truth(self) & _truth(other))
register("logical_or.default")(lambda self, other: _truth(self) | _truth(other))
register("logical_xor.default")(lambda self, other: _truth(self) ^ _truth(other))
register("logical_not.default")(lambda self: ~_truth(self))

register("bitwise_not.default", promote=DEFAULT)(_lift(jnp.invert))
for _name, _f in {"and": jnp.bitwise_and, "or": jnp.bitwise_or, "xor": jnp.bitwise_xor}.items():
    register(f"bitwise_{_name}.Tensor", f"bitwise_{_name}.Scalar", f"bitwise_{_name}.Scalar_Tensor",
             promote=DEFAULT)(_f)


def _lshift(a, b):
    # XLA gives 0 for shifts >= the bit width or negative, as PyTorch does
    return lax.shift_left(a, b)


def _rshift(a, b):
    # signed: shifts out of range fill with the sign bit; unsigned: 0
    if jnp.issubdtype(a.dtype, jnp.signedinteger):
        return lax.shift_right_arithmetic(a, b)
    return lax.shift_right_logical(a, b)


def _shift(shift):
    def f(a, b):
        if _is_float(a):  # PyTorch's CPU kernels have no float shifts either
            raise NotImplementedError(f"{shift.__name__[1:]}_tpu not implemented for '{a.dtype}'")
        return shift(*_operands(a, b))
    return f


register("bitwise_left_shift.Tensor", "bitwise_left_shift.Tensor_Scalar",
         "bitwise_left_shift.Scalar_Tensor", promote=DEFAULT)(_shift(_lshift))
register("bitwise_right_shift.Tensor", "bitwise_right_shift.Tensor_Scalar",
         "bitwise_right_shift.Scalar_Tensor", promote=DEFAULT)(_shift(_rshift))
register("__lshift__.Tensor", "__lshift__.Scalar", promote=DEFAULT)(_shift(_lshift))
register("__rshift__.Tensor", "__rshift__.Scalar", promote=DEFAULT)(_shift(_rshift))
# x <<= y has its own names, which the registry's sibling search does not find
for _name, _sh in (("__ilshift__", _lshift), ("__irshift__", _rshift)):
    for _ovl in ("Tensor", "Scalar"):
        register(f"{_name}.{_ovl}", mode="inplace", promote=DEFAULT)(_shift(_sh))


# ---- selection ----------------------------------------------------------------------

@register("where.self")
def where(condition, self, other):
    dt = out_dtype()
    return jnp.where(jnp.asarray(condition).astype(jnp.bool_), _cast(dt, self), _cast(dt, other))


@register("masked_fill.Scalar", "masked_fill.Tensor", checked_scalars=("value",))
def masked_fill(self, mask, value):
    return jnp.where(mask.astype(jnp.bool_), jnp.asarray(value).astype(self.dtype), self)


# ---- activations ----------------------------------------------------------------------

@register("relu.default", promote=DEFAULT)
def relu(self):
    if self.dtype == jnp.bool_:
        raise RuntimeError("Boolean inputs not supported for relu")
    return _maximum(self, jnp.zeros((), self.dtype))


@register("hardtanh.default", checked_scalars=("min_val", "max_val"))
def hardtanh(self, min_val=-1, max_val=1):
    ct = _ct()
    return _clamp(self.astype(ct), jnp.asarray(min_val, ct), jnp.asarray(max_val, ct))


@register("hardtanh_backward.default")
def hardtanh_backward(grad_output, self, min_val, max_val):
    ct = _ct()
    g, x, lo, hi = _cast(ct, grad_output, self, min_val, max_val)
    return jnp.where((x <= lo) | (x >= hi), jnp.zeros_like(g), g)


@register("leaky_relu.default", opmath=True)
def leaky_relu(x, s=0.01):
    return jnp.where(x > 0, x, x * s)


@register("leaky_relu_backward.default", opmath=True)
def leaky_relu_backward(g, x, s, self_is_result):
    return jnp.where(x > 0, g, g * s)


_NEGATIVE_SLOPE = ("In-place {} backward calculation is triggered with a negative slope which is not supported. "
                   "This is caused by calling in-place forward function with a negative slope, please call "
                   "out-of-place version instead.{}")


def _refuse_negative_slope(slope, from_result, name, tail=""):
    """The backward of an in-place elu_/leaky_relu_ (from its result) with a
    negative slope cannot tell the input's sign: the CPU kernel refuses it."""
    def check(bound):
        if bound[from_result] and bound[slope] < 0:
            raise RuntimeError(_NEGATIVE_SLOPE.format(name, tail))
    return check


@register("elu.default", opmath=True)
def elu(x, a=1, s=1, i=1):
    return jnp.where(x <= 0, jnp.expm1(x * i) * (a * s), x * s)


@register("elu_backward.default")
def elu_backward(grad_output, alpha, scale, input_scale, is_result, self_or_result):
    g, a, s, i, y = _cast(_ct(), grad_output, alpha, scale, input_scale, self_or_result)
    neg_coef = a * s
    if is_result:  # y = elu(x): the derivative from the output
        neg = g * i * (y + neg_coef)
    else:
        neg = g * i * neg_coef * jnp.exp(y * i)
    return jnp.where(y <= 0, neg, g * s)


_SQRT1_2 = 1 / math.sqrt(2)
_TANH_BETA = math.sqrt(2) * (2 / math.sqrt(math.pi)) * 0.5  # sqrt(2 / pi)
_TANH_KAPPA = 0.044715


@register("gelu.default", opmath=True)
def gelu(x, approximate="none"):
    c = lambda v: jnp.asarray(v, x.dtype)  # noqa: E731
    if approximate == "tanh":
        inner = c(_TANH_BETA) * (x + c(_TANH_KAPPA) * x * x * x)
        return c(0.5) * x * (1 + jnp.tanh(inner))
    return x * c(0.5) * (1 + lax.erf(x * c(_SQRT1_2)))


@register("gelu_backward.default", opmath=True)
def gelu_backward(g, x, approximate="none"):
    c = lambda v: jnp.asarray(v, x.dtype)  # noqa: E731
    if approximate == "tanh":
        x_sq = x * x
        tanh_inner = jnp.tanh(c(_TANH_BETA) * (x + c(_TANH_KAPPA) * x_sq * x))
        left, right = c(0.5) * x, 1 + tanh_inner
        d_inner = c(_TANH_BETA) * (1 + c(3 * _TANH_KAPPA) * x_sq)
        return g * (c(0.5) * right + left * (1 - tanh_inner * tanh_inner) * d_inner)
    cdf = c(0.5) * (1 + lax.erf(x * c(_SQRT1_2)))
    pdf = jnp.exp(c(-0.5) * x * x) * c(2 / math.sqrt(math.pi) * _SQRT1_2 * 0.5)
    return g * (cdf + x * pdf)


@register("silu.default", opmath=True)
def silu(x):
    return x / (1 + jnp.exp(-x))


@register("silu_backward.default", opmath=True)
def silu_backward(g, x):
    s = _sigmoid(x)
    return g * s * (1 + x * (1 - s))


@register("mish.default", opmath=True)
def mish(x):
    return x * jnp.tanh(jnp.log1p(jnp.exp(x)))


@register("mish_backward.default", opmath=True)
def mish_backward(g, x):
    t = jnp.tanh(jnp.log1p(jnp.exp(x)))
    return g * (t + x * _sigmoid(x) * (1 - t * t))


@register("hardsigmoid.default", opmath=True)
def hardsigmoid(x):
    return true_div(jnp.minimum(jnp.maximum(x + 3, 0), 6), 6)


@register("hardsigmoid_backward.default", opmath=True)
def hardsigmoid_backward(g, x):
    return jnp.where((x > -3) & (x < 3), true_div(g, 6), jnp.zeros_like(g))


@register("hardswish.default", opmath=True)
def hardswish(x):
    return true_div(x * jnp.minimum(jnp.maximum(x + 3, 0), 6), 6)


@register("hardswish_backward.default", opmath=True)
def hardswish_backward(g, x):
    # PyTorch's kinks: 0 at x = -3, the full gradient at x = 3
    return jnp.where(x <= -3, jnp.zeros_like(g), jnp.where(x < 3, g * (true_div(x, 3) + 0.5), g))


@register("softplus.default")
def softplus(self, beta=1, threshold=20):
    x, b, t = _cast(_ct(), self, beta, threshold)
    # above the threshold softplus is the identity (and exp would overflow)
    return jnp.where(x * b > t, x, true_div(jnp.log1p(jnp.exp(x * b)), b))


@register("softplus_backward.default", opmath=True)
def softplus_backward(g, x, b, t):
    z = jnp.exp(x * b)
    return jnp.where(x * b > t, g, g * z / (z + 1))


@register("threshold.default", opmath=True, checked_scalars=("threshold", "value"))
def threshold(x, t, v):
    return jnp.where(x <= t, v, x)


@register("threshold_backward.default", opmath=True)
def threshold_backward(g, x, t):
    return jnp.where(x <= t, jnp.zeros_like(g), g)


# (complex: the gradient times the derivative's conjugate, as ATen's kernels)
@register("sigmoid_backward.default", opmath=True)
def sigmoid_backward(g, y):
    if jnp.iscomplexobj(y):
        return g * jnp.conj((1 - y) * y)
    return g * (1 - y) * y


@register("tanh_backward.default", opmath=True)
def tanh_backward(g, y):
    if jnp.iscomplexobj(y):
        return g * jnp.conj(1 - y * y)
    return g * (1 - y * y)


@register("logit_backward.default")
def logit_backward(grad_output, self, eps=None):
    # the bounds in the tensor's dtype, as PyTorch (1 - eps may round to 1)
    g, x = _cast(_ct(), grad_output, self)
    lo = _round_to(jnp.asarray(0.0 if eps is None else eps, x.dtype), self.dtype)
    hi = _round_to(1 - lo, self.dtype)
    edge = (x == 0) | (x == 1)
    d = jnp.where(edge, g * jnp.inf, true_div(g, jnp.where(edge, 1, x * (1 - x))))
    outside = jnp.full_like(g, jnp.nan) if eps is None else jnp.zeros_like(g)
    return jnp.where((x < lo) | (x > hi), outside, d)


@register("_prelu_kernel.default", opmath=True)
def prelu(x, w):
    return jnp.where(x > 0, x, w * x)


@register("_prelu_kernel_backward.default", opmath=True)
def prelu_backward(g, x, w):
    positive = x > 0
    return jnp.where(positive, g, w * g), jnp.where(positive, jnp.zeros_like(g), x * g)


def _halves(x, dim):
    n = x.shape[dim] // 2
    return lax.slice_in_dim(x, 0, n, axis=dim), lax.slice_in_dim(x, n, 2 * n, axis=dim)


@register("glu.default")
def glu(self, dim=-1):
    a, b = _halves(self.astype(_ct()), dim)
    return a * _sigmoid(b)


@register("glu_backward.default")
def glu_backward(grad_output, self, dim):
    g, x = _cast(_ct(), grad_output, self)
    a, b = _halves(x, dim)
    # PyTorch stores sigmoid(b) in the gradient's dtype first, then uses that rounded value
    s = _round_to(_sigmoid(b), self.dtype)
    return jnp.concatenate([s * g, (1 - s) * s * a * g], axis=dim)


@register("softshrink.default", opmath=True)
def softshrink(x, lam=0.5):
    # x * 0 in the dead zone keeps -0.0 and NaN, as PyTorch's kernel
    return jnp.where(x > lam, x - lam, jnp.where(x < -lam, x + lam, x * 0))


@register("hardshrink.default", opmath=True)
def hardshrink(x, lam=0.5):
    return jnp.where((x >= -lam) & (x <= lam), jnp.zeros_like(x), x)


@register("softshrink_backward.default", "hardshrink_backward.default", opmath=True)
def shrink_backward(g, x, lam):
    return jnp.where((x >= -lam) & (x <= lam), jnp.zeros_like(g), g)


@register("log_sigmoid_forward.default", opmath=True)
def log_sigmoid_forward(x):
    z = jnp.exp(-jnp.abs(x))
    return jnp.minimum(x, 0) - jnp.log1p(z), z  # (output, buffer), as PyTorch's CPU kernel


@register("log_sigmoid_backward.default", opmath=True)
def log_sigmoid_backward(g, x, buffer):
    negative = x < 0
    z = jnp.exp(-jnp.abs(x))
    return g * (jnp.where(negative, 1, 0) - jnp.where(negative, 1, -1) * (z / (1 + z)))


# ---- added for Hugging Face models ----

@register("isin.Tensor_Tensor", "isin.Tensor_Scalar", "isin.Scalar_Tensor")
def isin(elements, test_elements, *, assume_unique=False, invert=False):
    common = jnp.result_type(elements, test_elements)
    e = jnp.asarray(elements).astype(common)
    t = jnp.asarray(test_elements).astype(common).reshape(-1)
    # one broadcast compare: generate() calls this on a handful of token ids
    hit = (e[..., None] == t).any(-1) if t.size else jnp.zeros(e.shape, bool)
    return ~hit if invert else hit


# ---- integer and float decomposition -----------------------------------------------------

def _gcd(a, b):
    """Math.h's calc_gcd: Euclid on |a|, |b| with C remainders (abs(INT_MIN) wraps, as on the CPU)."""
    a, b = jnp.abs(a), jnp.abs(b)

    def body(state):
        a, b = state
        live = a != 0
        safe = jnp.where(live, a, jnp.ones_like(a))
        return jnp.where(live, lax.rem(b, safe), a), jnp.where(live, a, b)

    return lax.while_loop(lambda s: jnp.any(s[0] != 0), body, (a, b))[1]


@register("gcd.default", promote=DEFAULT)
def gcd(self, other):
    return _gcd(*_operands(self, other))


@register("lcm.default", promote=DEFAULT)
def lcm(self, other):
    a, b = _operands(self, other)
    g = _gcd(a, b)
    return jnp.where(g == 0, jnp.zeros_like(a), jnp.abs(lax.div(a, jnp.where(g == 0, 1, g).astype(a.dtype)) * b))


def _integers_only(name):
    """PyTorch's CPU kernel dispatches on integer types only: the same error, before tracing."""
    def check(bound):
        dtype = torch.result_type(bound["self"], bound["other"])
        if dtype.is_floating_point or dtype.is_complex:
            raise NotImplementedError(f'"{name}_tpu" not implemented for \'{dtypes.aten_name(dtype)}\'')
    return check


guard("elu_backward.default", prepare=_refuse_negative_slope("alpha", "is_result", "elu"))
guard("leaky_relu_backward.default", prepare=_refuse_negative_slope(
    "negative_slope", "self_is_result", "leakyReLu", " File an issue at https://github.com/pytorch/pytorch if you do "
    "require supporting in-place leakRelu backward calculation with negative slope"))
guard("gcd.default", prepare=_integers_only("gcd"))
guard("lcm.default", prepare=_integers_only("lcm"))


def _check_frexp(args, kwargs):
    """Complex and integer inputs: the CPU's error, before tracing."""
    if not args[0].is_floating_point():
        raise RuntimeError("torch.frexp() only supports floating-point dtypes")


@register("frexp.Tensor", first_call_check=_check_frexp)
def frexp(self):
    x = self.astype(dtypes.opmath(self.dtype))
    mantissa, exponent = _frexp_bits(x)
    return mantissa.astype(self.dtype), exponent


def _frexp_bits(x):
    """std::frexp from the bit pattern: XLA's arithmetic flushes subnormals to
    zero, so the exponent field is read directly (and subnormals normalised by
    counting leading zeros)."""
    if x.dtype == np.float64:
        uint, sint, mant_bits, bias = np.uint64, np.int64, 52, 1022
    else:
        uint, sint, mant_bits, bias = np.uint32, np.int32, 23, 126
    total = 8 * np.dtype(uint).itemsize
    bits = lax.bitcast_convert_type(x, uint)
    sign = bits & uint(1 << (total - 1))
    field = ((bits >> uint(mant_bits)) & uint((1 << (total - 1 - mant_bits)) - 1)).astype(sint)
    frac = bits & uint((1 << mant_bits) - 1)
    # subnormal: frac's top bit h sets the exponent; shift it up to a normal fraction
    h = (total - 1) - lax.clz(frac).astype(sint)
    sub_frac = (frac << (mant_bits - h).astype(uint)) & uint((1 << mant_bits) - 1)
    subnormal = (field == 0) & (frac != 0)
    exponent = jnp.where(subnormal, h - (mant_bits + bias) + 1, field - bias)
    frac = jnp.where(subnormal, sub_frac, frac)
    mantissa = lax.bitcast_convert_type(sign | (uint(bias) << uint(mant_bits)) | frac, x.dtype)
    # std::frexp: zeros, infinities and NaN come back as they are, with exponent 0
    plain = (x == 0) & ~subnormal | ~jnp.isfinite(x)
    return jnp.where(plain, x, mantissa), jnp.where(plain, 0, exponent).astype(np.int32)


# ---- complex construction --------------------------------------------------------------------

@register("complex.default")
def complex_(real, imag):
    dt = out_dtype()
    return lax.complex(*jnp.broadcast_arrays(real, imag)).astype(dt)


@register("polar.default")
def polar(abs, angle):
    dt = out_dtype()
    return lax.complex(*jnp.broadcast_arrays(abs * jnp.cos(angle), abs * jnp.sin(angle))).astype(dt)


def _parts_checked_on_cpu(op, first, second):
    """The CPU's dtype rules for the two parts (Half/Float/Double, the same)
    and the out= dtype: the op on empty CPU tensors of the same dtypes."""
    def prepare(bound):
        out = bound.get("out")
        extra = {} if out is None else {"out": torch.empty(0, dtype=out.dtype)}
        op(torch.empty(0, dtype=bound[first].dtype), torch.empty(0, dtype=bound[second].dtype), **extra)
    return prepare


guard("complex.default", prepare=_parts_checked_on_cpu(torch.complex, "real", "imag"))
guard("polar.default", prepare=_parts_checked_on_cpu(torch.polar, "abs", "angle"))
