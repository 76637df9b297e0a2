"""Matrix products: mm, bmm, addmm and friends.

float32 products use ``torch.tpu.precision`` (HIGHEST unless the user lowers
it with ``torch.set_float32_matmul_precision``), so by default results match CPU
float32 (XLA's default on TPU would round operands to bf16); half types accumulate in f32;
integer products stay integer and exact.
"""
import jax
import jax.numpy as jnp
import numpy as np
import torch

from .. import precision
from ..dtypes import aten_name, opmath
from .registry import PROMOTE, guard, out_dtype, register

DEFAULT = PROMOTE.DEFAULT


def _acc_type(dtype):
    dtype = np.dtype(dtype)
    if dtype == np.bool_:  # CPU: bool products are logical or-of-ands; count in int
        return np.dtype(np.int64)
    return opmath(dtype)


def matmul(a, b):
    """a @ b with PyTorch CPU accuracy; the result is in the accumulation dtype."""
    acc = _acc_type(jnp.result_type(a, b))
    if np.dtype(acc) == np.int64 and jnp.result_type(a, b) == np.bool_:
        a, b = a.astype(acc), b.astype(acc)
    return jnp.matmul(a, b, precision=precision.for_operands(a, b), preferred_element_type=acc)


def _fin(x):
    """Cast a product to the op's result dtype (bool: any nonzero)."""
    if out_dtype() == np.bool_:
        return x != 0
    return x.astype(out_dtype())


def _scaled_add(self, product, beta, alpha):
    """beta * self + alpha * product; beta == 0 ignores self (NaN/inf included), as on CPU."""
    if not jnp.issubdtype(out_dtype(), jnp.inexact):  # ATen casts them to an integral result's type first
        beta, alpha = (_truncated(v, out_dtype()) for v in (beta, alpha))
    acc = product.dtype
    scaled = product * jnp.asarray(alpha).astype(acc) if not _is_one(alpha) else product
    if _is_zero(beta):
        return jnp.broadcast_to(scaled, jnp.broadcast_shapes(self.shape, scaled.shape))
    s = self.astype(acc)
    if isinstance(beta, (int, float, bool)) and beta == 1:
        return s + scaled
    b = jnp.asarray(beta).astype(acc)
    return jnp.where(b == 0, jnp.zeros((), acc), b * s) + scaled


def _truncated(x, dtype):
    if isinstance(x, float):  # a static number keeps the fast paths for 0 and 1
        return int(x)
    return x if isinstance(x, (int, bool)) else jnp.asarray(x).astype(dtype)


def _is_one(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool) and x == 1


def _is_zero(x):
    return isinstance(x, (int, float, bool)) and x == 0


@register("mm.default", promote=DEFAULT)
def mm(self, mat2):
    return _fin(matmul(self, mat2))


@register("bmm.default", promote=DEFAULT)
def bmm(self, mat2):
    return _fin(matmul(self, mat2))


@register("mv.default", promote=DEFAULT)
def mv(self, vec):
    return _fin(matmul(self, vec))


@register("dot.default", promote=DEFAULT)
def dot(self, tensor):
    return _fin(matmul(self, tensor))


@register("vdot.default", promote=DEFAULT)
def vdot(self, other):
    # conjugates the first operand (a no-op for real dtypes)
    return _fin(matmul(jnp.conj(self), other))


@register("addmm.default", promote=DEFAULT)
def addmm(self, mat1, mat2, beta=1, alpha=1):
    return _fin(_scaled_add(self, matmul(mat1, mat2), beta, alpha))


# no promote=: it would also cast the static use_gelu flag to a number
@register("_addmm_activation.default")
def _addmm_activation(self, mat1, mat2, beta=1, alpha=1, use_gelu=False):
    dt = out_dtype()
    y = _scaled_add(self.astype(dt), matmul(mat1.astype(dt), mat2.astype(dt)), beta, alpha)
    # CPU uses the tanh-free (erf) gelu here
    y = jax.nn.gelu(y, approximate=False) if use_gelu else jnp.maximum(y, 0)
    return _fin(y)


@register("addmv.default", promote=DEFAULT)
def addmv(self, mat, vec, beta=1, alpha=1):
    return _fin(_scaled_add(self, matmul(mat, vec), beta, alpha))


@register("baddbmm.default", promote=DEFAULT)
def baddbmm(self, batch1, batch2, beta=1, alpha=1):
    return _fin(_scaled_add(self, matmul(batch1, batch2), beta, alpha))


@register("addbmm.default", promote=DEFAULT)
def addbmm(self, batch1, batch2, beta=1, alpha=1):
    # sum over the batch inside one contraction: (b,n,k) x (b,k,m) -> (n,m)
    acc = _acc_type(jnp.result_type(batch1, batch2))
    prod = jnp.einsum("bnk,bkm->nm", batch1, batch2, precision=precision.for_operands(batch1, batch2),
                      preferred_element_type=acc)
    return _fin(_scaled_add(self, prod, beta, alpha))


@register("addr.default", promote=DEFAULT)
def addr(self, vec1, vec2, beta=1, alpha=1):
    acc = _acc_type(jnp.result_type(vec1, vec2))
    if out_dtype() == np.bool_:  # bool addr: (beta and self) or (alpha and outer)
        outer = jnp.logical_and(vec1[:, None], vec2[None, :])
        return jnp.logical_or(jnp.logical_and(self, bool(beta)), jnp.logical_and(outer, bool(alpha)))
    if opmath(out_dtype()) != out_dtype():  # float16, bfloat16
        return _half_addr(self, vec1, vec2, beta, alpha, out_dtype())
    outer = vec1[:, None].astype(acc) * vec2[None, :].astype(acc)
    return _fin(_scaled_add(self, outer, beta, alpha))


def _half_addr(self, vec1, vec2, beta, alpha, dtype):
    """The CPU's half addr, bit for bit: beta * self + (alpha * vec1) * vec2 with
    alpha and beta cast to the half dtype and every operation rounded to it
    (its vectorized half arithmetic computes each op in float32 and rounds)."""
    def op(x, y, f):
        return f(x.astype(np.float32), y.astype(np.float32)).astype(dtype)
    a, b = jnp.asarray(alpha).astype(dtype), jnp.asarray(beta).astype(dtype)
    product = op(op(a, vec1[:, None].astype(dtype), jnp.multiply), vec2[None, :].astype(dtype), jnp.multiply)
    scaled_self = jnp.where(b == 0, jnp.zeros((), dtype), op(b, self.astype(dtype), jnp.multiply))  # beta 0 ignores NaN
    return op(scaled_self, product, jnp.add)


# ---- int8 products (torchao's quantized linear layers) ------------------------------

@register("_int_mm.default")
def _int_mm(self, mat2):
    # int8 x int8 -> exact int32 sums
    return jnp.matmul(self, mat2, preferred_element_type=np.int32)


@register("_weight_int8pack_mm.default")
def _weight_int8pack_mm(self, mat2, scales):
    # activations (M, K) times int8 weights (N, K) with one scale per output channel
    acc = _acc_type(self.dtype)
    product = jnp.matmul(self.astype(acc), mat2.T.astype(acc), precision=precision.for_operands(self))
    return (product * scales.astype(acc)).astype(self.dtype)


# ---- mixed operand dtypes raise, in the CPU's words (never silently promoted) ----

_C_NAMES = {torch.float32: "float", torch.float64: "double", torch.float16: "c10::Half",
            torch.bfloat16: "c10::BFloat16"}


def _same_dtypes(*checks):
    """A guard: for each (first, second, message) the two arguments' dtypes must agree."""
    def prepare(bound):
        for first, second, message in checks:
            a, b = bound[first].dtype, bound[second].dtype
            if a != b:
                raise RuntimeError(message(a, b))
    return prepare


def _mm_message(a, b):
    return f"expected m1 and m2 to have the same dtype, but got: {_C_NAMES.get(a, a)} != {_C_NAMES.get(b, b)}"


def _found(a, b):
    return f"expected scalar type {aten_name(a)} but found {aten_name(b)}"


# (per_signature: a signature holds the dtypes, so a cached one passed already)
guard("mm.default", per_signature=True, prepare=_same_dtypes(("self", "mat2", _mm_message)))
guard("addmm.default", per_signature=True, prepare=_same_dtypes(
    ("self", "mat2", lambda a, b: f"self and mat2 must have the same dtype, but got {aten_name(a)} and {aten_name(b)}"),
    ("mat1", "mat2", _mm_message)))
guard("bmm.default", per_signature=True, prepare=_same_dtypes(("self", "mat2", _found)))
guard("baddbmm.default", per_signature=True,
      prepare=_same_dtypes(("batch1", "batch2", _found), ("self", "batch2", _found)))
guard("mv.default", per_signature=True, prepare=_same_dtypes(
    ("self", "vec", lambda a, b: f"mv: expected both tensors to have the same dtype, but got {aten_name(a)} and {aten_name(b)}")))
guard("dot.default", per_signature=True, prepare=_same_dtypes(
    ("self", "tensor", lambda a, b: f"dot : expected both vectors to have same dtype, but found {aten_name(a)} and {aten_name(b)}")))


def _integral_addr_scalars(bound):
    """addr refuses a float beta or alpha for integral tensors (the others truncate)."""
    common = torch.result_type(bound["vec1"], bound["vec2"])
    if not (common.is_floating_point or common.is_complex):
        for name in ("beta", "alpha"):
            if isinstance(bound.get(name), float):
                raise RuntimeError(f"For integral input tensors, argument {name} must not be a floating point number.")


guard("addr.default", prepare=_integral_addr_scalars)


def _addmv_sizes(bound):
    """The CPU's size check, before the meta kernel (which words it as a broadcast)."""
    self, mat, vec = bound["self"], bound["mat"], bound["vec"]
    if mat.dim() == 2 and vec.dim() == 1 and self.dim() <= 1:
        if mat.shape[1] != vec.shape[0] or (self.numel() not in (1, mat.shape[0])):
            size = self.shape[0] if self.dim() else self.numel()
            raise RuntimeError(f"size mismatch, got input ({size}), mat ({mat.shape[0]}x{mat.shape[1]}), "
                               f"vec ({vec.shape[0]})")


guard("addmv.default", prepare=_addmv_sizes)
