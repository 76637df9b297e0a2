"""Argument values that PyTorch's CPU kernels refuse while they compute: an
integer division by zero, a probability outside [0, 1], a negative standard
deviation, an invalid multinomial distribution, a sorter index out of range.

XLA would compute something (-1 for an integer division by zero, NaN for the
log of a probability above 1): a wrong answer where PyTorch raises.  These
guards raise PyTorch's exception and message instead: at the op for a Python
number or a CPU scalar, at the next host wait for a tpu tensor
(``eager.checks``), so a step never stops to look at device values.  The one
exception is normal's tensor std, which ATen checks at the op on every device.
"""
import jax.numpy as jnp
import numpy as np
import torch

from .. import dtypes
from ..eager import checks
from .indexing import _check_range
from .registry import guard

_FLAG = ((), np.dtype(np.bool_))   # a check's summary: one bool ...
_CODE = ((), np.dtype(np.int32))   # ... or one code (0: fine), the first failure in CPU order


def _on_tpu(x) -> bool:
    return isinstance(x, torch.Tensor) and x.device.type == "tpu"


def _numel_of_broadcast(*args):
    """Elements of the broadcast of tensors and numbers; None when the shapes
    do not broadcast (the op's meta kernel then raises PyTorch's error)."""
    try:
        shape = torch.broadcast_shapes(*[tuple(a.shape) if isinstance(a, torch.Tensor) else () for a in args])
    except RuntimeError:
        return None
    return int(np.prod(shape))


def _flag_verdict(make_error):
    return lambda flag: make_error() if bool(flag) else None


def _first_failure(codes):
    """The first nonzero code along the last axis (0 where there is none):
    the failure a CPU loop over the elements in order meets first."""
    first = jnp.argmax(codes != 0, axis=-1)[..., None]
    return jnp.take_along_axis(codes, first, axis=-1)[..., 0]


def _code_verdict(messages):
    """A verdict raising RuntimeError(messages[code]) for a nonzero code."""
    return lambda code: RuntimeError(messages[int(code)]) if int(code) else None


# ---- integer division by zero ---------------------------------------------------

def _any_zero(divisor, xp=jnp):  # xp=numpy: on the host (``checks.defer(host=True)``)
    return xp.any(divisor == 0)


def _zero_division():
    return RuntimeError("ZeroDivisionError")


def _integer_division(kernel_name):
    """The guard of an integer division: ``kernel_name`` names its kernel in
    the NotImplementedError for bool, as the CPU's "div_floor_cpu" does (for
    div with a rounding mode: None, the mode names it)."""
    def prepare(bound):
        self, other = bound["self"], bound["other"]
        name = kernel_name
        if name is None:
            mode = bound.get("rounding_mode")
            if mode is None:  # true division: a float result
                return
            name = f"div_{mode}"
        dtype = torch.result_type(self, other)
        if dtype == torch.bool:
            raise NotImplementedError(f'"{name}_tpu" not implemented for \'Bool\'')
        if dtype.is_floating_point or dtype.is_complex or not _numel_of_broadcast(self, other):
            return
        if _on_tpu(other):
            checks.defer(other, _any_zero, _FLAG, _flag_verdict(_zero_division), host=True)
        elif isinstance(other, torch.Tensor):
            if other.dim() == 0 and other.item() == 0:  # a CPU scalar (others: the op's device error)
                raise _zero_division()
        elif other == 0:
            raise _zero_division()
    return prepare


guard("floor_divide.default", "floor_divide.Scalar", prepare=_integer_division("div_floor"))
guard("div.Tensor_mode", "div.Scalar_mode", prepare=_integer_division(None))
guard("remainder.Tensor", "remainder.Scalar", "remainder.Scalar_Tensor", prepare=_integer_division("remainder"))
guard("fmod.Tensor", "fmod.Scalar", prepare=_integer_division("fmod"))


# ---- probabilities and standard deviations ----------------------------------------

def _outside_unit_interval(p, xp=jnp):
    return xp.any(~((p >= 0) & (p <= 1)))  # NaN is outside


def _bad_probability():
    return RuntimeError("Expected p_in >= 0 && p_in <= 1 to be true, but got false.  (Could this error "
                        "message be improved?  If so, please report an enhancement request to PyTorch.)")


def _bernoulli_tensor(bound):
    p = bound.get("p")
    p = bound["self"] if p is None else p
    if _on_tpu(p) and p.numel():
        checks.defer(p, _outside_unit_interval, _FLAG, _flag_verdict(_bad_probability), host=True)


def _bernoulli_float(bound):
    p = bound.get("p", 0.5)
    if not 0 <= p <= 1:
        raise RuntimeError(f"bernoulli_ expects p to be in [0, 1], but got p={p:g}")


guard("bernoulli.default", "bernoulli.Tensor", prepare=_bernoulli_tensor)
guard("bernoulli.p", prepare=_bernoulli_float)


def _normal_std(bound):
    """ATen checks a tensor std at the op on every device (CUDA as well: its
    ``std.min().ge(0).item()`` waits for the device), and PyTorch's tests expect
    the error there, so this guard reads the verdict back too (NaN fails)."""
    std = bound["std"]
    if _on_tpu(std) and std.numel() and not bool((std.min() >= 0).item()):
        raise RuntimeError("normal expects all elements of std >= 0.0")


guard("normal.Tensor_Tensor", "normal.float_Tensor", prepare=_normal_std)


def _bce_first_failure(x, target):
    """1 or 2 when an input or a target element lies outside [0, 1]: the
    CPU's kernel checks both at each element, in order."""
    x, target = jnp.broadcast_arrays(x, target)
    code = jnp.where(~((x >= 0) & (x <= 1)), 1, jnp.where(~((target >= 0) & (target <= 1)), 2, 0))
    return _first_failure(code.reshape(-1)).astype(np.int32)


_BCE_MESSAGES = {1: "all elements of input should be between 0 and 1",
                 2: "all elements of target should be between 0 and 1"}


def _binary_cross_entropy(bound):
    x, target = bound["self"], bound["target"]
    if _on_tpu(x) and _on_tpu(target) and _numel_of_broadcast(x, target):
        checks.defer((x, target), _bce_first_failure, _CODE, _code_verdict(_BCE_MESSAGES))


guard("binary_cross_entropy.default", prepare=_binary_cross_entropy)


# ---- multinomial -------------------------------------------------------------------

def _multinomial_fast_path_failure(p):
    """The checks before drawing without replacement or one sample: max < inf
    and min >= 0 over the whole tensor (NaN fails), then no row summing to 0."""
    valid = (jnp.max(p) < jnp.inf) & (jnp.min(p) >= 0)
    rows = p.reshape(-1, p.shape[-1]).astype(_accumulation(p.dtype))
    return jnp.where(~valid, 1, jnp.where(jnp.any(jnp.sum(rows, axis=1) == 0), 3, 0)).astype(np.int32)


def _multinomial_row_failure(p):
    """The checks of drawing several samples with replacement, row by row:
    each entry >= 0 (NaN fails here) and finite, then the row's sum > 0."""
    rows = p.reshape(-1, p.shape[-1]).astype(_accumulation(p.dtype))
    entry = jnp.where(~(rows >= 0), 1, jnp.where(~jnp.isfinite(rows), 2, 0))
    first = _first_failure(entry)
    row = jnp.where(first != 0, first, jnp.where(jnp.sum(rows, axis=1) <= 0, 3, 0))
    return _first_failure(row).astype(np.int32)


def _accumulation(dtype):
    return np.float64 if dtype == np.float64 else np.float32


_MULTINOMIAL_SUM = "invalid multinomial distribution (sum of probabilities <= 0)"
_FAST_PATH_MESSAGES = {1: "probability tensor contains either `inf`, `nan` or element < 0", 3: _MULTINOMIAL_SUM}
_ROW_MESSAGES = {1: "invalid multinomial distribution (encountering probability entry < 0)",
                 2: "invalid multinomial distribution (encountering probability entry = infinity or NaN)",
                 3: _MULTINOMIAL_SUM}


def _multinomial(bound):
    p, n = bound["self"], bound["num_samples"]
    replacement = bound.get("replacement", False)
    if not 1 <= p.dim() <= 2:
        raise RuntimeError("prob_dist must be 1 or 2 dim")
    if not p.dtype.is_floating_point:
        raise RuntimeError(f"multinomial only supports floating-point dtypes for input, got: {dtypes.aten_name(p.dtype)}")
    if n <= 0:
        raise RuntimeError("cannot sample n_sample <= 0 samples")
    if not replacement and n > p.shape[-1]:
        raise RuntimeError("cannot sample n_sample > prob_dist.size(-1) samples without replacement")
    if p.shape[-1] > 2 ** 24:
        raise RuntimeError("number of categories cannot exceed 2^24")
    if _on_tpu(p) and p.numel():
        if not replacement or n == 1:
            checks.defer(p, _multinomial_fast_path_failure, _CODE, _code_verdict(_FAST_PATH_MESSAGES))
        else:
            checks.defer(p, _multinomial_row_failure, _CODE, _code_verdict(_ROW_MESSAGES))


guard("multinomial.default", prepare=_multinomial)


# ---- searchsorted's sorter --------------------------------------------------------

def _searchsorted(bound):
    seq = bound["sorted_sequence"]
    if not isinstance(bound["self"], torch.Tensor) and seq.dim() != 1:  # the meta kernel fails on it
        raise RuntimeError("torch.searchsorted(): input value can be a scalar only when boundaries tensor "
                           f"dimension is 1, but we got boundaries tensor dim({seq.dim()}) and input value's "
                           "dim(0) numel(1)")
    sorter = bound.get("sorter")
    if sorter is not None:
        seq = bound["sorted_sequence"]
        _check_range(sorter, 0, seq.shape[-1] if seq.dim() else 1,
                     lambda _: RuntimeError("torch.searchsorted(): sorter index out of range"))


guard("searchsorted.Tensor", "searchsorted.Scalar", prepare=_searchsorted)
