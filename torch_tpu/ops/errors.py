"""PyTorch-style errors for the tpu device (never a JAX traceback)."""
import ast
import os
import re
import sys
import warnings

import torch

from ..unsupported import UnsupportedOnTpu


def device_mismatch(op_name: str, cpu_tensor: torch.Tensor):
    raise RuntimeError(
        "Expected all tensors to be on the same device, but found at least two devices, "
        f"tpu:0 and {cpu_tensor.device}! (when checking arguments for {op_name})")


def rewrite_meta_error(e: Exception, op_name: str, args=()) -> Exception:
    """PyTorch's own error from the meta kernel, with the device named as the
    user sees it, and the CPU's wording where the meta kernel words it
    differently (a shape mismatch reads the same on every device)."""
    msg = re.sub(r"\bmeta\b", "tpu", str(e).replace("device='meta'", "device='tpu:0'"))
    msg = _untuple(msg)
    for pattern, exc_type, message in _CPU_ERRORS:
        match = re.match(pattern, msg)
        if match and (exc_type is not IndexError or "index" in op_name):
            return exc_type(message(match, args) if callable(message) else message)
    for pattern, cpu_wording in _CPU_WORDING:
        match = re.match(pattern, msg)
        if match:
            msg = cpu_wording(match, [a for a in args if isinstance(a, torch.Tensor)], args) or msg
            break
    if isinstance(e, AssertionError):  # a meta kernel's assert: a RuntimeError on the CPU
        return RuntimeError(msg)
    try:
        return type(e)(msg)
    except Exception:
        return RuntimeError(msg)


def _broadcast_mismatch(match, tensors, args):
    """The CPU's message names the first two operands whose sizes clash."""
    for i, a in enumerate(tensors):
        for b in tensors[i + 1:]:
            rank = max(a.dim(), b.dim())
            for d in range(rank - 1, -1, -1):
                sa = a.shape[d - rank + a.dim()] if d - rank + a.dim() >= 0 else 1
                sb = b.shape[d - rank + b.dim()] if d - rank + b.dim() >= 0 else 1
                if sa != sb and 1 not in (sa, sb):
                    return (f"The size of tensor a ({sa}) must match the size of tensor b ({sb}) "
                            f"at non-singleton dimension {d}")
    # a _foreach_* op: the CPU's loop names the first position whose tensors clash
    lists = [a for a in args if isinstance(a, (list, tuple)) and a and all(isinstance(t, torch.Tensor) for t in a)]
    for position in zip(*lists):
        if (message := _broadcast_mismatch(match, list(position), ())) is not None:
            return message
    return None


def _channels_mismatch(match, tensors, args):
    x, w = tensors[:2]
    groups = args[8] if len(args) > 8 else 1
    return (f"Given groups={groups}, weight of size {list(w.shape)}, expected input{list(x.shape)} to have "
            f"{w.shape[1] * groups} channels, but got {x.shape[1]} channels instead")


# (meta kernel message, the CPU's message from it and the op's arguments)
def _repeated_dim(match, tensors, args):
    """The CPU names the (wrapped) dim listed twice."""
    dims = next((a for a in args[1:] if isinstance(a, (list, tuple))), None)
    if not tensors or dims is None:
        return None
    seen = set()
    for d in dims:
        d %= max(tensors[0].dim(), 1)
        if d in seen:
            return f"dim {d} appears multiple times in the list of dims"
        seen.add(d)
    return None


_CPU_WORDING = [
    (r"duplicate value in the list of dims", _repeated_dim),
    (r"a and b must have same reduction dim, but got \[(\d+), (\d+)\] X \[(\d+), (\d+)\]",
     lambda m, t, a: "mat1 and mat2 shapes cannot be multiplied ({}x{} and {}x{})".format(*m.groups())),
    (r"Attempting to broadcast a dimension of length", _broadcast_mismatch),
    (r"Invalid channel dimensions", _channels_mismatch),
    # (the meta kernel's message keeps its source line's indentation and drops "but grad_output has sizes")
    (r"(adaptive_avg_pool2d_backward\(\): Expected grad_output to have non-zero)\s+"
     r"(size for non-batch dimensions), torch\.Size\((\[.*\])\) (with dimension \d+ being empty)",
     lambda m, t, a: "{} {}, but grad_output has sizes {} {}".format(*m.groups())),
]


def _untuple(msg):
    """A message some torch._refs checks build as a tuple of parts, joined."""
    if msg.startswith("('") and msg.endswith("')"):
        try:
            parts = ast.literal_eval(msg)
        except (ValueError, SyntaxError):
            return msg
        if isinstance(parts, tuple) and all(isinstance(p, str) for p in parts):
            return "".join(parts)
    return msg


def _index_shapes(match, args):
    indices = args[1] if len(args) > 1 and isinstance(args[1], (list, tuple)) else ()
    shapes = ", ".join(str(list(i.shape)) for i in indices if isinstance(i, torch.Tensor))
    return f"shape mismatch: indexing tensors could not be broadcast together with shapes {shapes}"


# (meta kernel message, the CPU's exception type, its message or a function of
# the match and the op's arguments): where the CPU raises another type.
# IndexError entries apply to indexing ops only.
_CPU_ERRORS = [
    (r"clamp called but both min and max are none", RuntimeError,
     "torch.clamp: At least one of 'min' or 'max' must not be None"),
    (r"alpha argument of type <class 'float'> cannot be safely cast to type <class 'int'>", RuntimeError,
     "For integral input tensors, argument alpha must not be a floating point number."),
    (r"alpha argument of type <class 'complex'> cannot be safely cast to type <class '(float|int|bool)'>",
     RuntimeError, "For non-complex input tensors, argument alpha must not be a complex number."),
    (r"Attempting to broadcast a dimension of length", IndexError, _index_shapes),
    # torch._prims_common's wording of the CPU's in-place/out= cast refusal
    (r"result type torch\.(\w+) can't be cast to the desired output type torch\.(\w+)", RuntimeError,
     lambda match, args: _cast_refusal(match.group(1), match.group(2))),
    (r"Attempting to cast from torch\.(\w+) to out tensor with dtype torch\.(\w+), but this can't be cast",
     RuntimeError, lambda match, args: _cast_refusal(match.group(1), match.group(2))),
    (r"Promotion of \w+\.add/sub_\(\w+\) in in-place ops are not possible", RuntimeError,
     lambda match, args: _cannot_cast_result(args)),
]


def _cannot_cast_result(args):
    """The CPU's in-place refusal: ``int_tensor.add_(1.5)``, ``bool_tensor.add_(uint8_tensor)``."""
    self, other = args[0], args[1]
    if isinstance(self, (list, tuple)):  # a _foreach_*_ op: the CPU's loop refuses at the first position
        pairs = list(zip(self, other if isinstance(other, (list, tuple)) else [other] * len(self)))
        self, other = next(((s, o) for s, o in pairs if not torch.can_cast(torch.result_type(s, o), s.dtype)),
                           pairs[0])
    return cast_refusal(torch.result_type(self, other), self.dtype)


def _cast_refusal(result: str, out: str) -> str:
    return cast_refusal(getattr(torch, result), getattr(torch, out))


def cast_refusal(result: torch.dtype, out: torch.dtype) -> str:
    """The CPU's message for an in-place or out= result that ``out`` cannot hold."""
    return f"result type {scalar_type_name(result)} can't be cast to the desired output type {scalar_type_name(out)}"


def scalar_type_name(dtype: torch.dtype) -> str:
    """ATen's name of a dtype, as CPU error messages spell it (Float, Long)."""
    return _SCALAR_TYPE_NAMES.get(dtype, str(dtype).replace("torch.", ""))


_SCALAR_TYPE_NAMES = {
    torch.float32: "Float", torch.float64: "Double", torch.float16: "Half", torch.bfloat16: "BFloat16",
    torch.int64: "Long", torch.int32: "Int", torch.int16: "Short", torch.int8: "Char", torch.uint8: "Byte",
    torch.bool: "Bool", torch.complex64: "ComplexFloat", torch.complex128: "ComplexDouble", torch.complex32: "ComplexHalf",
    torch.uint16: "UInt16", torch.uint32: "UInt32", torch.uint64: "UInt64",
}

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_TORCH = os.path.dirname(os.path.abspath(torch.__file__))


def warn_at_caller(message: str, category=UserWarning) -> None:
    """A warning attributed to the user's line (outside torch_tpu and torch), as
    PyTorch's C++ warnings are: two indexing lines warn twice."""
    level, frame = 2, sys._getframe(1)  # stacklevel 2: the caller of this function
    while frame is not None and frame.f_code.co_filename.startswith((_PACKAGE, _TORCH)):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level)


def unsupported_dtype(op_name, dtype) -> UnsupportedOnTpu:
    prefix = f"{op_name}: " if op_name else ""
    return UnsupportedOnTpu(f"{prefix}the tpu device does not support dtype {dtype}")
