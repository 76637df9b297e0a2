"""The one table that maps torch dtypes to JAX/NumPy dtypes and back."""
import ml_dtypes
import numpy as np
import torch

from . import tpu_dtypes
from .unsupported import UnsupportedOnTpu

TORCH_TO_NP = {
    torch.float32: np.dtype(np.float32),
    torch.float64: np.dtype(np.float64),
    torch.float16: np.dtype(np.float16),
    torch.bfloat16: np.dtype(ml_dtypes.bfloat16),
    torch.int8: np.dtype(np.int8),
    torch.int16: np.dtype(np.int16),
    torch.int32: np.dtype(np.int32),
    torch.int64: np.dtype(np.int64),
    torch.uint8: np.dtype(np.uint8),
    torch.uint16: np.dtype(np.uint16),
    torch.uint32: np.dtype(np.uint32),
    torch.uint64: np.dtype(np.uint64),
    torch.bool: np.dtype(np.bool_),
    torch.complex64: np.dtype(np.complex64),
    torch.complex128: np.dtype(np.complex128),
    torch.float8_e4m3fn: np.dtype(ml_dtypes.float8_e4m3fn),
    torch.float8_e5m2: np.dtype(ml_dtypes.float8_e5m2),
}
NP_TO_TORCH = {v: k for k, v in TORCH_TO_NP.items()}

# numpy cannot hand these to torch.from_numpy; they travel as same-width integers.
_BITS_CARRIER = {
    torch.bfloat16: torch.int16,
    torch.float8_e4m3fn: torch.uint8,
    torch.float8_e5m2: torch.uint8,
}


# ATen's C++ names of the scalar types, as its "not implemented for 'Float'" errors spell them
_ATEN_NAMES = {torch.float32: "Float", torch.float64: "Double", torch.float16: "Half", torch.bfloat16: "BFloat16",
               torch.complex64: "ComplexFloat", torch.complex128: "ComplexDouble", torch.int64: "Long",
               torch.int32: "Int", torch.int16: "Short", torch.int8: "Char", torch.uint8: "Byte",
               torch.bool: "Bool"}


def aten_name(dtype: torch.dtype) -> str:
    return _ATEN_NAMES.get(dtype, str(dtype).replace("torch.", ""))


def to_np(dtype: torch.dtype) -> np.dtype:
    try:
        return TORCH_TO_NP[dtype]
    except KeyError:
        raise UnsupportedOnTpu(f"the tpu device does not support dtype {dtype}") from None


def to_torch(dtype) -> torch.dtype:
    return NP_TO_TORCH[np.dtype(dtype)]


def numpy_from_cpu_tensor(t: torch.Tensor) -> np.ndarray:
    """A fresh, contiguous NumPy copy of a CPU tensor, any dtype (bf16 too)."""
    if tpu_dtypes.active:  # on a TPU: float64 warns, complex128 is refused
        tpu_dtypes.entering(t.dtype)
    if t.dim() == 0:  # scalars (step counts, CPU scalar operands): .item() is exact in every dtype
        return np.array(t.item(), dtype=TORCH_TO_NP[t.dtype])
    # Copied by PyTorch into a NumPy array of our own (~2 us less than a DLPack
    # view copied by NumPy; and .numpy() would mark the user's storage as not
    # resizable).  copy_ resolves lazy conjugate and negative views.
    t = t.detach()
    host = np.empty(tuple(t.shape), TORCH_TO_NP[t.dtype])
    carrier = _BITS_CARRIER.get(t.dtype)
    if carrier is None:
        torch.from_numpy(host).copy_(t)
    else:  # a dtype NumPy-to-torch cannot name (bfloat16, float8): its bits
        torch.from_numpy(host.view(TORCH_TO_NP[carrier])).copy_(t.resolve_neg().view(carrier))
    return host


def cpu_tensor_from_numpy(a: np.ndarray) -> torch.Tensor:
    """A new (resizable, row-major) CPU tensor holding a copy of ``a``."""
    dtype = to_torch(a.dtype)
    carrier = _BITS_CARRIER.get(dtype)
    if carrier is None and a.flags.c_contiguous:  # (torch.tensor copies without a read-only warning)
        return torch.tensor(a)
    out = torch.empty(a.shape, dtype=dtype)
    if carrier is not None:
        a = a.view(TORCH_TO_NP[carrier])
    if not a.flags.writeable:  # a read-only view of a device buffer: torch would warn
        a = a.copy()
    src = torch.from_numpy(a)
    (out.view(carrier) if carrier is not None else out).copy_(src)
    return out


_HALF = (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))


def opmath(dtype) -> np.dtype:
    """The dtype PyTorch's CPU kernels compute a ``dtype`` op in: float32 for
    float16 and bfloat16, else ``dtype`` itself (ATen's ``opmath_type``)."""
    dtype = np.dtype(dtype)
    return np.dtype(np.float32) if dtype in _HALF else dtype


def to_opmath(x):
    """Array ``x`` in its opmath dtype (see ``opmath``)."""
    return x.astype(np.float32) if x.dtype in _HALF else x
