"""PyTorch-style errors for the tpu device (never a JAX traceback)."""
import re

import torch


def device_mismatch(op_name: str, cpu_tensor: torch.Tensor):
    raise RuntimeError(
        "Expected all tensors to be on the same device, but found at least two devices, "
        f"tpu:0 and {cpu_tensor.device}! (when checking arguments for {op_name})")


def rewrite_meta_error(e: Exception, op_name: str, args=()) -> Exception:
    """PyTorch's own error from the meta kernel, with the device named as the
    user sees it, and the CPU's wording where the meta kernel words it
    differently (a shape mismatch reads the same on every device)."""
    msg = re.sub(r"\bmeta\b", "tpu", str(e).replace("device='meta'", "device='tpu:0'"))
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
    return None


def _channels_mismatch(match, tensors, args):
    x, w = tensors[:2]
    groups = args[8] if len(args) > 8 else 1
    return (f"Given groups={groups}, weight of size {list(w.shape)}, expected input{list(x.shape)} to have "
            f"{w.shape[1] * groups} channels, but got {x.shape[1]} channels instead")


# (meta kernel message, the CPU's message from it and the op's arguments)
_CPU_WORDING = [
    (r"a and b must have same reduction dim, but got \[(\d+), (\d+)\] X \[(\d+), (\d+)\]",
     lambda m, t, a: "mat1 and mat2 shapes cannot be multiplied ({}x{} and {}x{})".format(*m.groups())),
    (r"Attempting to broadcast a dimension of length", _broadcast_mismatch),
    (r"Invalid channel dimensions", _channels_mismatch),
]


def unsupported_dtype(op_name, dtype) -> TypeError:
    prefix = f"{op_name}: " if op_name else ""
    return TypeError(f"{prefix}the tpu device does not support dtype {dtype}")
