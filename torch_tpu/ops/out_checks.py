"""Rules for ``out=`` (and in-place) destinations that PyTorch's CPU kernels
enforce but its meta kernels do not: the registry's kernel wrapper asks these
on the first call with a signature (dtype rules) or on every call (overlap)."""
import re
import warnings

import torch
from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, compute_elementwise_output_strides, elementwise_dtypes

from .. import dtypes


def computes_before_out(kernel) -> bool:
    """Elementwise ops (a promotion rule, opmath, pow) compute in their own
    result dtype, whatever out='s dtype is."""
    return kernel.opts.promote is not None or kernel.opts.opmath or kernel.op._schema.name == "aten::pow"


def result_before_out_cast(kernel, args, kwargs, out_specs):
    """An elementwise op computes its own result dtype and only then casts it
    into ``out=`` (float16 33000 + 33000 is inf, even into a float64 out):
    ``out_specs`` with the op's result dtype, for the copy into out to cast."""
    if len(out_specs) != 1:
        return out_specs
    from .registry import _SCALAR_TYPES, _flat, to_meta
    kwargs = {k: v for k, v in kwargs.items() if k not in kernel.out_names}
    operands = [to_meta(a) for a in _flat(args) + _flat(list(kwargs.values()))
                if isinstance(a, torch.Tensor) or type(a) in _SCALAR_TYPES]
    if not operands:
        return out_specs
    kind = kernel.opts.promote or (ELEMENTWISE_TYPE_PROMOTION_KIND.BOOL_TO_LONG if kernel.op._schema.name == "aten::pow"
                                   else ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT)  # opmath ops: pow, gelu, ...
    _, result = elementwise_dtypes(*operands, type_promotion_kind=kind)
    return [out_specs[0]._replace(dtype=dtypes.to_np(result))]


# ---- the destination's dtype, as the CPU kernel checks it ------------------------

# What a CPU dtype complaint about out= says (other CPU errors on zero-filled
# stand-ins, e.g. about values, say nothing about the real call).
_DTYPE_ERROR = re.compile(r"dtype|scalar type|can't be cast|only supports bool|non-boolean", re.IGNORECASE)
_PROBE_NUMEL = 1 << 16  # larger calls skip the probe (out of a test suite's size)


def _cpu_stand_in(x, out):
    if isinstance(x, torch.Tensor):
        return torch.empty(x.shape, dtype=x.dtype) if out else torch.zeros(x.shape, dtype=x.dtype)
    if isinstance(x, (list, tuple)):
        return type(x)(_cpu_stand_in(e, out) for e in x)
    if isinstance(x, torch.device):
        return torch.device("cpu")
    return x


def _cpu_verdict(kernel, args, kwargs):
    """PyTorch's CPU kernel on zero-filled CPU stand-ins of the same shapes and
    dtypes: "same" (out= dtypes equal the input's: nothing to ask), "skip"
    (too large to probe), "ok", or the CPU's dtype error."""
    from .registry import _flat
    outs = [o for n in kernel.out_names for o in _flat([kwargs.get(n)]) if isinstance(o, torch.Tensor)]
    inputs = [a for a in _flat(list(args) + [v for k, v in kwargs.items() if k not in kernel.out_names])
              if isinstance(a, torch.Tensor)]
    # (one out= of the input's dtype: nothing to ask; several (frexp's mantissa
    # and exponent) may each need their own dtype)
    if not inputs or not outs or (len(outs) == 1 and outs[0].dtype == inputs[0].dtype):
        return "same"
    if sum(t.numel() for t in inputs + outs) > _PROBE_NUMEL:
        return "skip"
    error = _cpu_error(kernel, args, kwargs)
    return error if error is not None and _DTYPE_ERROR.search(str(error)) else "ok"


def _cpu_error(kernel, args, kwargs):
    """The error PyTorch's CPU kernel raises on zero-filled CPU stand-ins of
    the arguments (same shapes and dtypes), or None."""
    cpu_args = [_cpu_stand_in(a, False) for a in args]
    cpu_kwargs = {k: _cpu_stand_in(v, k in kernel.out_names) for k, v in kwargs.items()}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            kernel.op(*cpu_args, **cpu_kwargs)
    except (RuntimeError, TypeError) as e:
        return type(e)(str(e))
    return None


def check_out_dtype_like_cpu(kernel, args, kwargs):
    """When an ``out=`` tensor's dtype differs from the input's, ask PyTorch's
    CPU kernel whether it accepts it: most ops refuse ("Found dtype Double but
    expected Float"), elementwise ones with casting rules accept; meta kernels
    check only some.  Raises the CPU's dtype error; first call of a signature only."""
    verdict = _cpu_verdict(kernel, args, kwargs)
    if isinstance(verdict, Exception):
        raise verdict from None


def instead_of_meta_error(kernel, args, kwargs, error):
    """A meta kernel's dtype complaint about an out= or in-place destination,
    where PyTorch's CPU kernel (on stand-ins) says otherwise: raises the CPU's
    own error (``isposinf does not support non-boolean outputs``, ``In-place
    abs is not supported for complex tensors``); or, where the CPU accepts the
    out= (abs of a complex tensor into a complex out: the CPU computes the real
    result and casts it), kwargs with out= replaced by an empty meta tensor of
    the op's own result dtype, for the meta kernel to describe the result (the
    copy into the real out casts).  None: keep the meta kernel's error."""
    if kernel.mode not in ("out", "inplace") or not _DTYPE_ERROR.search(str(error)):
        return None
    if sum(t.numel() for t in args if isinstance(t, torch.Tensor)) > _PROBE_NUMEL:
        return None
    error = _cpu_error(kernel, args, kwargs)
    if error is not None:
        raise error from None
    if kernel.mode != "out" or kernel.opts.promote is None or len(kernel.out_names) != 1:
        return None
    from .registry import _SCALAR_TYPES, _flat, to_meta
    name = kernel.out_names[0]
    operands = [to_meta(a) for a in _flat(list(args) + [v for k, v in kwargs.items() if k != name])
                if isinstance(a, torch.Tensor) or type(a) in _SCALAR_TYPES]
    _, result = elementwise_dtypes(*operands, type_promotion_kind=kernel.opts.promote)
    return {**{k: to_meta(v) for k, v in kwargs.items()},
            name: torch.empty(kwargs[name].shape, dtype=result, device="meta")}


# ---- overlapping destinations ------------------------------------------------------

_OVERLAP = ("unsupported operation: more than one element of the written-to tensor refers to a "
            "single memory location. Please clone() the tensor before performing the operation.")
# In-place ops whose CPU kernels accept an expanded destination (they write
# every alias the same value, or warn instead).
_OVERLAP_ALLOWED = {"fill_", "zero_", "index_put_", "_index_put_impl_", "masked_fill_"}


# Elementwise ops registered with no promotion rule: TensorIterator kernels on
# the CPU all the same (their destinations are checked as the others').  The
# activations among them (elu_, leaky_relu_, ...; not threshold_, whose CPU
# kernel lets an expanded destination through).
_TENSOR_ITERATOR = {"pow", "logit", "logical_and", "logical_or", "logical_xor", "logical_not",
                    "elu", "leaky_relu", "hardswish", "hardsigmoid", "hardtanh", "silu", "mish", "gelu",
                    "softplus", "softshrink", "hardshrink"}
PARTIAL_OVERLAP = ("unsupported operation: some elements of the input tensor and the written-to tensor refer to a "
            "single memory location. Please clone() the tensor before performing the operation.")


def checks_overlap(kernel) -> bool:
    """Whether ``kernel`` refuses a destination with internal overlap, or one
    that partly overlaps an input, as PyTorch's TensorIterator kernels
    (elementwise, random, copy) do."""
    if kernel.mode not in ("inplace", "out") or kernel.writes_list:
        return False
    base = kernel.op._schema.name.split("::")[1]
    if base in _OVERLAP_ALLOWED:
        return False
    return (kernel.opts.promote is not None or kernel.opts.rng or base == "copy_"
            or base.rstrip("_") in _TENSOR_ITERATOR
            or base == "cat")  # (ATen's cat refuses an out= with internal overlap too; a list input is not checked)


def check_overlap(kernel, args, kwargs) -> None:
    """The destination (self of an in-place op, or out=) must not have two
    elements at one address (an ``expand``-ed tensor), nor share only part of
    its memory with an input (``torch.sin(x[1:4], out=x[0:3])``): the CPU
    refuses both.  The same memory exactly (``torch.sin(x, out=x)``) is fine."""
    dst = args[0] if kernel.mode == "inplace" else kwargs.get(kernel.out_names[0])
    if not isinstance(dst, torch.Tensor):
        return
    check_no_internal_overlap(dst)
    storage = None
    for x in args:
        if isinstance(x, torch.Tensor) and x is not dst:
            storage = storage or dst.untyped_storage()._cdata
            if x.untyped_storage()._cdata == storage and partly_overlap(dst, x):
                raise RuntimeError(PARTIAL_OVERLAP)


# In-place index and scatter ops: ATen checks their destination against their
# index and source tensors itself (not TensorIterator): assert_no_overlap, which
# refuses the same memory as well as a part of it, or assert_no_partial_overlap
# (masked_fill_'s mask).  An expanded destination is refused, or only warned
# about (the ops that write every alias the same value).
# in-place name -> (expanded self refused, arguments checked against self, same memory refused)
_INDEXED = {
    "index_add_": (True, ("index", "source"), True),
    "index_copy_": (True, ("index", "source"), True),
    "index_fill_": (False, ("index",), True),
    "index_put_": (False, ("values", "indices"), True),
    "_index_put_impl_": (False, ("values", "indices"), True),
    "put_": (True, ("index", "source"), True),
    "masked_fill_": (False, ("mask",), False),
    "masked_scatter_": (True, (), True),
    "scatter_": (True, ("index", "src"), True),
    "scatter_add_": (True, ("index", "src"), True),
    "scatter_reduce_": (True, ("index", "src"), True),
}
_EXPANDED_EXAMPLE = {"index_put_": "tensor[indices] = tensor", "_index_put_impl_": "tensor[indices] = tensor"}


def indexed_overlap_rule(kernel):
    """The _INDEXED rule of an in-place index/scatter kernel, or None."""
    if kernel.mode != "inplace":
        return None
    return _INDEXED.get(kernel.op._schema.name.split("::")[1])


def check_indexed_overlap(kernel, rule, args, kwargs) -> None:
    """The CPU's overlap checks of an in-place index/scatter op (``rule``:
    its _INDEXED entry): an expanded ``self`` refused (or warned about), then
    each index/source tensor that shares memory with ``self``."""
    refuse_expanded, names, refuse_same = rule
    bound = dict(zip(kernel.arg_names, args))
    bound.update(kwargs)
    dst = bound.get(kernel.arg_names[0])
    if not isinstance(dst, torch.Tensor):
        return
    if torch._debug_has_internal_overlap(dst) == 1:
        if refuse_expanded:
            raise RuntimeError(_OVERLAP)
        base = kernel.op._schema.name.split("::")[1]
        name = base.lstrip("_").replace("_impl", "") if base.startswith("_index_put") else base
        warnings.warn(f"Use of {name} on expanded tensors is deprecated. Please clone() the tensor before "
                      "performing this operation. This also applies to advanced indexing e.g. "
                      f"{_EXPANDED_EXAMPLE.get(base, 'tensor[mask] = scalar')}", UserWarning, stacklevel=3)
    storage = None
    for n in names:
        for x in (bound.get(n) if isinstance(bound.get(n), (list, tuple)) else (bound.get(n),)):
            if not isinstance(x, torch.Tensor) or x.device != dst.device:
                continue
            storage = storage or dst.untyped_storage()._cdata
            if x.untyped_storage()._cdata == storage and (
                    _overlaps(dst, x) if refuse_same else partly_overlap(dst, x)):
                raise RuntimeError(PARTIAL_OVERLAP)


def _overlaps(a, b) -> bool:
    """ATen's get_overlap_status(a, b) is Full or Partial, for two tensors of one storage."""
    if a.numel() == 0 or b.numel() == 0 or not (_dense(a) and _dense(b)):
        return False
    a_begin, b_begin = a.storage_offset() * a.element_size(), b.storage_offset() * b.element_size()
    a_end, b_end = a_begin + a.numel() * a.element_size(), b_begin + b.numel() * b.element_size()
    return a_begin < b_end and b_begin < a_end


def check_no_internal_overlap(t) -> None:
    """``t`` (a destination) must not have two elements at one address
    (an ``expand``-ed tensor): the CPU refuses such writes."""
    if isinstance(t, torch.Tensor) and torch._debug_has_internal_overlap(t) == 1:
        raise RuntimeError(_OVERLAP)


def partly_overlap(a, b) -> bool:
    """ATen's get_overlap_status(a, b) == Partial, for two tensors of one storage."""
    if a.numel() == 0 or b.numel() == 0:
        return False
    if not (_dense(a) and _dense(b)):
        return False  # "too hard": the CPU does not refuse
    a_begin, b_begin = a.storage_offset() * a.element_size(), b.storage_offset() * b.element_size()
    a_end, b_end = a_begin + a.numel() * a.element_size(), b_begin + b.numel() * b.element_size()
    if a_begin == b_begin and a_end == b_end:
        return a.stride() != b.stride()
    return a_begin < b_end and b_begin < a_end


def _dense(t) -> bool:
    """Non-overlapping and dense: its elements fill a block of memory, in some order."""
    if t.is_contiguous() or t.is_contiguous(memory_format=torch.channels_last):
        return True
    dims = sorted((st, sz) for st, sz in zip(t.stride(), t.shape) if sz != 1)
    expected = 1
    for st, sz in dims:
        if st != expected:
            return False
        expected *= sz
    return True


RESIZED = "An output with one or more elements was resized"
_META = torch.device("meta")


def restride_resized_out(out, args) -> None:
    """An elementwise op's out= that was resized takes the layout TensorIterator
    gives its result (the inputs' permutation, size-1 dimensions included), as
    the CPU's set_output_raw_strided does; not row-major."""
    shape = tuple(out.shape)
    try:
        operands = [to_meta_like(a).expand(shape) for a in args if isinstance(a, torch.Tensor) and a.dim()]
    except RuntimeError:  # an operand that does not broadcast to the result: not an elementwise layout
        return
    if not operands:
        return
    strides = tuple(compute_elementwise_output_strides(*operands))
    if strides != out.stride():
        out.as_strided_(shape, strides)


def to_meta_like(t):
    """A meta tensor of ``t``'s geometry (no data)."""
    return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")


def resize_output(out, shape) -> None:
    """Resize an out= tensor as PyTorch's resize_output does: one with elements
    gets its deprecation warning (asked of a meta stand-in: PyTorch's own words)."""
    if out.numel():
        torch.ops.aten._resize_output_.default(torch.empty(out.shape, device=_META), shape, _META)
    out.resize_(shape)
