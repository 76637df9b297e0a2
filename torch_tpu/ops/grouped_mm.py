"""``torch._grouped_mm`` / ``F.grouped_mm``: the expert matmuls of mixture-of-
experts layers.  Transformers calls it on tpu in eager and compiled modes for
every dtype (ATen's own kernels and meta checks allow only bfloat16 outside
the CPU).

Layouts, with ``offs`` the int32 running ends of the groups:
  2-d x 3-d  rows of ``mat_a`` grouped, group g times ``mat_b[g]`` (lax.ragged_dot)
  2-d x 2-d  the contraction grouped: one (M, N) product per group (weight gradients)
  3-d x 2-d  columns of ``mat_b`` grouped, group g times ``mat_a[g]``
  3-d x 3-d  a batched matmul, no ``offs``
Products accumulate in float32 for half types, as ATen's.  Rows or columns
past the last offset come out 0.
"""
import jax
import jax.numpy as jnp
import numpy as np
import torch
from torch._subclasses import fake_impls

from .. import dtypes, precision
from . import linalg
from .registry import guard, register


def _group_of(n, offs):
    """The group of each of n positions (len(offs) past the last offset)."""
    return jnp.searchsorted(offs.astype(np.int64), jnp.arange(n), side="right")


def _products(a, b, offs):
    acc = linalg._acc_type(jnp.result_type(a, b))
    prec = precision.for_operands(a, b)
    if a.ndim == 3 and b.ndim == 3:
        return jnp.matmul(a, b, precision=prec, preferred_element_type=acc)
    if a.ndim == 2 and b.ndim == 3:
        sizes = jnp.diff(offs.astype(np.int32), prepend=0)
        rows = jax.lax.ragged_dot(a, b, sizes, precision=prec, preferred_element_type=acc)
        return jnp.where((jnp.arange(a.shape[0]) < offs[-1])[:, None], rows, 0)
    if a.ndim == 2 and b.ndim == 2:
        onehot = _group_of(a.shape[1], offs)[None, :] == jnp.arange(offs.shape[0])[:, None]
        return jnp.einsum("mk,gk,kn->gmn", a.astype(acc), onehot.astype(acc), b.astype(acc),
                          precision=prec)
    products = jnp.einsum("gmk,kn->gmn", a, b, precision=prec, preferred_element_type=acc)
    group = _group_of(b.shape[1], offs)  # 3-d x 2-d: the columns' groups
    picked = jnp.take_along_axis(products, jnp.minimum(group, a.shape[0] - 1)[None, None, :], axis=0)[0]
    return jnp.where((group < a.shape[0])[None, :], picked, 0)


def _out_shape(a, b, offs):
    if a.dim() == 2:
        return (offs.shape[0], a.shape[0], b.shape[1]) if b.dim() == 2 else (a.shape[0], b.shape[-1])
    return (a.shape[1], b.shape[1]) if b.dim() == 2 else (a.shape[0], a.shape[1], b.shape[-1])


def _check(a, b, offs, bias):
    """PyTorch's shape checks (its meta kernel's), without the dtype and stride rules."""
    torch._check(a.dim() in (2, 3) and b.dim() in (2, 3),
                 lambda: f"Multiplicands must be 2D or 3D but got mat_a.dim()={a.dim()} and mat_b.dim()={b.dim()}")
    torch._check(a.dtype == b.dtype, lambda: f"mat_a and mat_b must have the same dtype, got {a.dtype} and {b.dtype}")
    if a.dim() == 3 or b.dim() == 3:
        torch._check(a.shape[-1] == b.shape[-2], lambda: "contraction dimension of mat_a and mat_b must match")
    if a.dim() == 3 and b.dim() == 3:
        torch._check(offs is None, lambda: "Offsets tensor provided, but is not needed for 3D/3D multiplicand layouts.")
        torch._check(a.shape[0] == b.shape[0], lambda: "batched dimension has to match")
    else:
        torch._check(offs is not None, lambda: "Offsets tensor must be provided for 2D/3D multiplicand layouts.")
        torch._check(offs.dim() == 1, lambda: f"Offsets tensor must be 1D, but got offs.dim()={offs.dim()}.")
        torch._check(offs.dtype == torch.int32,
                     lambda: f"Offsets tensor must be integer (int32) tensor, but got {offs.dtype}.")
        if a.dim() != b.dim():
            torch._check(offs.shape[0] == (b if b.dim() == 3 else a).shape[0],
                         lambda: "matrix batch sizes have to match")
    torch._check(bias is None, lambda: "Bias tensor provided, but it is not supported yet.")


# meta=False: PyTorch's meta kernel insists on bfloat16 (CUDA's rule)
@register("_grouped_mm.default", meta=False)
def _grouped_mm(self, mat2, offs=None, bias=None, out_dtype=None):
    dtype = self.dtype if out_dtype is None else dtypes.to_np(out_dtype)
    return _products(self, mat2, offs).astype(dtype)


guard("_grouped_mm.default",
               prepare=lambda bound: _check(bound["self"], bound["mat2"], bound.get("offs"), bound.get("bias")))


@fake_impls.register_op_impl(lambda op: op is torch.ops.aten._grouped_mm.default)
def _grouped_mm_fake(fake_mode, func, mat_a, mat_b, offs=None, bias=None, out_dtype=None):
    """Shapes under torch.compile: tpu inputs of any dtype; other devices keep
    PyTorch's own rules (NotImplemented hands them back)."""
    if mat_a.device.type != "tpu":
        return NotImplemented
    _check(mat_a, mat_b, offs, bias)
    return mat_a.new_empty(_out_shape(mat_a, mat_b, offs), dtype=out_dtype or mat_a.dtype)
