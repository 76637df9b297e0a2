"""Pointwise ops: arithmetic, comparisons, logic, math functions.

Operands arrive already cast to PyTorch's computation dtype (``promote=``,
the same rules as ``torch._refs``); results are cast to PyTorch's result dtype.
"""
import jax
import jax.numpy as jnp
from jax import lax

from .registry import PROMOTE, compute_dtype, register

DEFAULT, INT_TO_FLOAT, ALWAYS_BOOL = PROMOTE.DEFAULT, PROMOTE.INT_TO_FLOAT, PROMOTE.ALWAYS_BOOL


@register("add.Tensor", "add.Scalar", promote=DEFAULT)
def add(self, other, alpha=1):
    return self + other * alpha


@register("sub.Tensor", "sub.Scalar", promote=DEFAULT)
def sub(self, other, alpha=1):
    return self - other * alpha


@register("mul.Tensor", "mul.Scalar", promote=DEFAULT)
def mul(self, other):
    return self * other


@register("eq.Tensor", "eq.Scalar", promote=ALWAYS_BOOL)
def eq(self, other):
    return self == other


@register("ne.Tensor", "ne.Scalar", promote=ALWAYS_BOOL)
def ne(self, other):
    return self != other


@register("abs.default", promote=DEFAULT)
def abs_(self):
    return jnp.abs(self)
