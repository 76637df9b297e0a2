"""PyTorch-style errors for the tpu device (never a JAX traceback)."""
import re

import torch


def device_mismatch(op_name: str, cpu_tensor: torch.Tensor):
    raise RuntimeError(
        "Expected all tensors to be on the same device, but found at least two devices, "
        f"tpu:0 and {cpu_tensor.device}! (when checking arguments for {op_name})")


def rewrite_meta_error(e: Exception, op_name: str) -> Exception:
    """PyTorch's own error from the meta kernel, with the device named as the user sees it."""
    msg = re.sub(r"\bmeta\b", "tpu", str(e).replace("device='meta'", "device='tpu:0'"))
    try:
        return type(e)(msg)
    except Exception:
        return RuntimeError(msg)


def runtime_failure(op_name: str, e: Exception) -> RuntimeError:
    first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return RuntimeError(f"tpu: {op_name} failed on the device: {first}")


def unsupported_dtype(op_name: str, dtype) -> TypeError:
    return TypeError(f"{op_name}: the tpu device does not support dtype {dtype}")
