"""OpInfo conformance: run PyTorch's OpInfo samples on the CPU and on tpu and compare.

Used by ``tests/test_opinfo.py`` (pytest), ``tests/tools/opinfo_sweep.py`` (the
process-isolated sweep that writes ``tests/opinfo_expected_failures.py``) and
``tests/tools/opinfo_report.py`` (the summary).

One *entry* is one OpInfo of ``op_db``, named ``op.name`` plus
``"." + op.variant_test_name`` when it has one (the names PyTorch's own test ids use).

What a check does (``check_forward`` / ``check_gradient``):

* samples: ``op.sample_inputs("cpu", dtype, requires_grad=...)``, drawn under a
  seed derived from the entry name (reproducible), the first ``N`` whose tensors
  hold at most ``MAX_SAMPLE_NUMEL`` elements in all (bigger samples are skipped,
  there is no per-sample timeout);
* the tpu run gets a copy of every tensor of the sample (input, args, kwargs,
  recursively, 0-dim tensors included, aliasing kept), made before the CPU run so
  an op that mutates its input cannot leak the mutation;
* each strided tpu result of two elements or more has the CPU result's
  strides along its dims of more than one element (a ``.view`` then works on
  tpu where it does on the CPU), except the column-major LAPACK-style results
  of ``COLUMN_MAJOR_ON_THE_CPU``, row-major here;
* the entry passes only if every sample matches *and* nothing ran through the
  CPU fallback (``torch_tpu.fallback_ops()`` before/after), every tpu output is a
  tpu tensor, and no error was raised on tpu that the CPU did not raise;
* ``sample.output_process_fn_grad`` is applied to both results (it canonicalises
  outputs that are not unique, e.g. singular vectors' signs);
* entries whose OpInfo says the CPU-vs-device comparison is meaningless
  (a ``test_compare_cpu`` skip whose reason says "non-deterministic" /
  "undefined": random ops, ``empty*``, ``unique`` ...) are compared on output
  structure, shape and dtype only;
* an unstable sort, ``topk`` and ``mode`` may order the indices of equal
  elements differently (their documentation leaves it open): their index
  output passes when the values match and tpu's indices pick the same input
  values as the CPU's, each index once (``_same_up_to_tie_order``);
* in bfloat16 and float16, a result that misses the CPU's passes when every
  element is within tolerance of the float64 result or no further from it than
  the CPU's own element (``_no_further_from_float64``): some CPU half kernels
  round intermediates (grid_sample, conv_transpose) or return NaN (matrix_exp)
  where tpu computes in float32 and rounds once.

Gradients: the op on a sample with ``requires_grad=True``; the vector-Jacobian
product with fixed random cotangents (``torch.autograd.grad(outs, inputs,
grad_outputs=w)``) is compared, strides included, for the first ``N_GRAD`` samples; the same
no-fallback rule covers forward and backward.

Tolerances (``tolerance(op, dtype)``), in order:

1. the dtype's base tolerance, torch.testing.assert_close's defaults:
   float32 rtol=1.3e-6 atol=1e-5, bfloat16 rtol=1.6e-2 atol=1e-5;
2. "relaxed" ops (``is_relaxed``) -- those whose result depends on evaluation
   order or on a libm (transcendental functions, reductions/scans, matmul /
   convolution / norms / softmax / losses, linear algebra) -- get
   float32 rtol=atol=1e-5 (about 80 ulp), linalg decompositions 1e-4;
   bfloat16 rtol=atol=3.2e-2 (4 bf16 ulp);
3. the OpInfo's own hints (``toleranceOverride`` / ``precisionOverride`` not tied to
   another device type), taking the larger value -- capped at 1e-3 for float32,
   the flat tolerance PyTorch itself uses for its CPU-vs-device test
   (``TestCommon.test_compare_cpu``);
4. gradients always use the relaxed tolerance (one more evaluation order).
"""
import dataclasses
import itertools
import math
import re
import traceback
import warnings
import zlib

import torch

import torch_tpu  # noqa: F401  (registers the device)

N_FORWARD = 8          # samples compared per entry (forward)
N_GRAD = 3             # samples compared per entry (gradient)
MAX_SAMPLE_NUMEL = 1 << 16   # skip samples holding more elements than this (all tensors together)
MAX_SCAN = 64          # samples looked at to find N that fit

# The bfloat16 default run (``--runslow``: every entry that supports bfloat16 on the CPU):
# common ops that models run in bfloat16.
BF16_DEFAULT_ENTRIES = [
    "add", "sub", "mul", "div.no_rounding_mode", "neg", "exp", "log", "sqrt", "rsqrt", "sin", "cos",
    "tanh", "sigmoid", "pow", "clamp", "where", "maximum", "sum", "mean", "amax", "var",
    "softmax", "log_softmax", "matmul", "mm", "bmm", "addmm", "nn.functional.linear",
    "nn.functional.relu", "nn.functional.gelu", "nn.functional.silu", "nn.functional.layer_norm",
    "nn.functional.rms_norm", "nn.functional.embedding", "nn.functional.cross_entropy",
    "nn.functional.scaled_dot_product_attention", "cat", "transpose", "reshape", "cumsum",
    "div.trunc_rounding", "native_layer_norm",
]

# The float16 default run (``--runslow``: every entry that supports float16 on the CPU).
FLOAT16_DEFAULT_ENTRIES = [
    "add", "mul", "div.no_rounding_mode", "div.trunc_rounding", "exp", "log", "sqrt", "sigmoid", "tanh",
    "sum", "mean", "softmax", "log_softmax", "matmul", "addmm", "nn.functional.linear",
    "nn.functional.gelu", "nn.functional.layer_norm", "nn.functional.scaled_dot_product_attention",
    "nn.functional.cross_entropy", "cumsum", "cat",
]

# The complex64 default run (``--runslow``: every entry that supports complex64 on the CPU).
COMPLEX_DEFAULT_ENTRIES = [
    "add", "mul", "div.no_rounding_mode", "neg", "abs", "angle", "exp", "log", "sqrt", "sin", "tanh",
    "pow", "sgn", "conj_physical", "real", "imag", "sum", "mean", "prod", "cumsum", "matmul", "mm",
    "linalg.vector_norm", "fft.fft", "fft.ifft", "cat", "reshape", "transpose", "flip", "where",
    "exp2", "logaddexp", "logsumexp", "logcumsumexp",
]


# The float64 default run (``--runslow``: every entry that supports float64 on the CPU).
FLOAT64_DEFAULT_ENTRIES = [
    "add", "mul", "div.no_rounding_mode", "exp", "log", "sin", "pow", "sum", "mean", "var", "cumsum",
    "matmul", "addmm", "linalg.solve", "linalg.eigh", "softmax", "nn.functional.layer_norm",
    "nn.functional.conv2d", "nn.functional.scaled_dot_product_attention",
    "nn.functional.interpolate.bilinear", "nn.functional.interpolate.linear", "nn.functional.cross_entropy",
]


# Checks that repeat the forward check in another dtype (named by it).
DTYPE_CHECKS = ("bfloat16", "float16", "complex64", "float64")
# ... and the gradient check in complex64 (a backward kernel that forgets a
# conjugate is right for real inputs only).
COMPLEX_GRADIENT = "complex_gradient"


def applies(check, name) -> bool:
    """Whether ``check`` runs for entry ``name``: the dtype checks where the OpInfo
    supports the dtype on the CPU (its backward, for the complex gradient check)."""
    if check in DTYPE_CHECKS:
        return getattr(torch, check) in ops()[name].supported_dtypes("cpu")
    if check == COMPLEX_GRADIENT:
        op = ops()[name]
        return op.supports_autograd and torch.complex64 in op.supported_backward_dtypes("cpu")
    return True


# The default (non-slow) run: a fixed spread over op families.
DEFAULT_ENTRIES = [
    # pointwise
    "add", "sub", "mul", "div.no_rounding_mode", "div.floor_rounding", "neg", "abs", "exp", "log",
    "sqrt", "rsqrt", "sin", "tanh", "sigmoid", "pow", "clamp", "where", "maximum", "eq", "lt",
    "erf", "floor", "nan_to_num", "lerp", "sgn",
    # reductions / scans
    "sum", "mean", "amax", "argmax", "var", "std", "prod", "all", "any", "cumsum", "logsumexp",
    "norm",
    # linear algebra
    "matmul", "mm", "bmm", "addmm", "einsum", "linalg.vector_norm", "linalg.solve", "linalg.svd",
    "linalg.eigh", "linalg.cholesky", "linalg.qr", "linalg.det",
    # special functions
    "special.zeta", "special.modified_bessel_i0", "polygamma.polygamma_n_1", "lgamma",
    # nn
    "softmax", "log_softmax", "nn.functional.relu", "nn.functional.gelu", "nn.functional.silu",
    "nn.functional.layer_norm", "nn.functional.linear", "nn.functional.conv2d",
    "nn.functional.cross_entropy", "nn.functional.embedding", "nn.functional.max_pool2d",
    "nn.functional.dropout", "nn.functional.mse_loss", "nn.functional.pad.constant",
    "nn.functional.interpolate.nearest-exact", "nn.functional.interpolate.bicubic",
    "nn.functional.channel_shuffle", "cdist", "nn.functional.embedding_bag", "nn.functional.max_unpool2d",
    "nn.functional.multi_margin_loss", "nn.functional.grid_sample",
    # indexing
    "gather", "index_select", "scatter_add", "index_add", "masked_fill", "take_along_dim",
    "index_reduce.amax",
    # shape
    "cat", "stack", "reshape", "transpose", "permute", "expand", "squeeze", "unsqueeze",
    "flatten", "split", "chunk", "narrow", "flip", "roll", "repeat", "tril", "unfold",
    # sorting / selection
    "sort", "topk", "argsort",
    # factories / random
    "zeros_like", "ones_like", "full_like", "arange", "randn_like", "linspace",
    # conversion
    "to", "clone", "contiguous",
]


# ---- the op table -----------------------------------------------------------

_OPS = None


def entry_name(op) -> str:
    return op.name + ("." + op.variant_test_name if op.variant_test_name else "")


def ops() -> dict:
    """{entry name: OpInfo} over ``op_db``, in op_db's order."""
    global _OPS
    if _OPS is None:
        from torch.testing._internal.common_methods_invocations import op_db
        _OPS = {entry_name(op): op for op in op_db}
    return _OPS


def primary_dtype(op):
    """float32 when the op supports it on the CPU, else the op's most common other dtype."""
    supported = op.supported_dtypes("cpu")
    for dt in (torch.float32, torch.int64, torch.int32, torch.bool, torch.uint8):
        if dt in supported:
            return dt
    return None


# ---- tolerances -------------------------------------------------------------

_BASE = {torch.float32: (1.3e-6, 1e-5), torch.bfloat16: (1.6e-2, 1e-5), torch.float16: (1e-3, 1e-5),
         torch.float64: (1e-7, 1e-7)}
_RELAXED = {torch.float32: (1e-5, 1e-5), torch.bfloat16: (3.2e-2, 3.2e-2), torch.float16: (2e-3, 2e-3),
            torch.float64: (1e-7, 1e-7)}
_LINALG = {torch.float32: (1e-4, 1e-4), torch.bfloat16: (3.2e-2, 3.2e-2), torch.float16: (2e-3, 2e-3),
           torch.float64: (1e-6, 1e-6)}
_HINT_CAP = 1e-3

# Pointwise ops that are correctly rounded (or exact) in IEEE arithmetic: base tolerance.
_EXACT_POINTWISE = {
    "add", "sub", "mul", "div", "true_divide", "neg", "abs", "positive", "sign", "sgn", "signbit",
    "maximum", "minimum", "fmax", "fmin", "clamp", "clamp_min", "clamp_max", "clip", "floor", "ceil",
    "trunc", "round", "frac", "fmod", "remainder", "sqrt", "copysign", "nextafter", "heaviside",
    "eq", "ne", "lt", "le", "gt", "ge", "isnan", "isinf", "isfinite", "isposinf", "isneginf",
    "isreal", "logical_and", "logical_or", "logical_xor", "logical_not", "nan_to_num", "square",
    "reciprocal", "where", "masked_fill", "rsub", "floor_divide", "nn.functional.relu",
    "nn.functional.relu6", "nn.functional.hardtanh", "nn.functional.threshold",
    "nn.functional.leaky_relu", "nn.functional.hardshrink", "nn.functional.softshrink",
    "float_power",
}
_RELAXED_PATTERNS = re.compile(
    r"(matmul|mm$|mv$|bmm|addm|addb|addr|baddbmm|dot|einsum|tensordot|inner|outer|kron|chain_matmul|"
    r"conv|linear|bilinear|norm|softmax|softmin|loss|entropy|pool|interpolate|upsample|grid_sample|"
    r"affine_grid|cdist|pdist|cosine|pairwise|attention|cum|logsumexp|logcumsumexp|var|std|mean|sum|"
    r"prod|trapz|trapezoid|cross|fft|stft|polar|embedding_bag|gelu|silu|mish|elu|selu|celu|softplus|"
    r"sigmoid|tanh|logit|erf|gamma|lgamma|digamma|polygamma|bessel|special|xlog|log|exp|pow|sin|cos|"
    r"tan|atan|asin|acos|sinc|hypot|rsqrt|lerp|addcdiv|addcmul|glu|hardswish|hardsigmoid|"
    r"renorm|normalize|vander|cov|corrcoef|histc|i0|ldexp|frexp|angle|rad2deg|deg2rad)")


def is_linalg(op) -> bool:
    n = op.name
    return n.startswith("linalg.") and n not in ("linalg.vector_norm", "linalg.norm", "linalg.matrix_norm",
                                                 "linalg.vecdot", "linalg.cross", "linalg.multi_dot") or \
        n in ("cholesky", "cholesky_solve", "cholesky_inverse", "inverse", "det", "logdet", "slogdet",
              "pinverse", "qr", "svd", "triangular_solve", "lu", "lu_solve", "lu_unpack", "geqrf",
              "ormqr", "householder_product", "matrix_exp", "svd_lowrank", "pca_lowrank", "lstsq")


def is_relaxed(op) -> bool:
    if op.name in _EXACT_POINTWISE:
        return False
    cls = type(op).__name__
    if cls in ("ReductionOpInfo", "SpectralFuncInfo"):
        return True
    return bool(_RELAXED_PATTERNS.search(op.name))


def _hints(op, dtype):
    """The OpInfo's own (rtol, atol) hints for ``dtype`` not tied to another device type."""
    rtol = atol = 0.0
    for d in op.decorators:
        wrapped = [d]
        if type(d).__name__ == "DecorateInfo":
            if d.device_type not in (None, "cpu") or (d.dtypes is not None and dtype not in d.dtypes):
                continue
            wrapped = d.decorators
        for w in wrapped:
            kind = type(w).__name__
            if kind == "toleranceOverride" and dtype in w.d:
                atol, rtol = max(atol, w.d[dtype].atol), max(rtol, w.d[dtype].rtol)
            elif kind == "precisionOverride" and dtype in w.d:
                atol = max(atol, w.d[dtype])
    return rtol, atol


def tolerance(op, dtype, gradient=False):
    """(rtol, atol) for comparing ``op``'s tpu results with the CPU ones; see the module doc."""
    if not (dtype.is_floating_point or dtype.is_complex):
        return 0.0, 0.0
    if is_linalg(op):
        rtol, atol = _LINALG.get(dtype, _RELAXED[torch.float32])
    elif gradient or is_relaxed(op):
        rtol, atol = _RELAXED.get(dtype, _RELAXED[torch.float32])
    else:
        rtol, atol = _BASE.get(dtype, _BASE[torch.float32])
    hr, ha = _hints(op, dtype)
    cap = _HINT_CAP if dtype in (torch.float32, torch.float64) else math.inf
    return max(rtol, min(hr, cap)), max(atol, min(ha, cap))


# Entries whose output is uninitialized memory but whose OpInfo skips
# test_compare_cpu without saying why ("Skipped!"), unlike empty/empty_like.
_UNINITIALIZED = {"empty_strided"}


def values_comparable(op, sample=None):
    """None when values can be compared, else the OpInfo's reason why not."""
    if op.name in _UNINITIALIZED:
        return "output is uninitialized memory"
    for d in op.decorators:
        if type(d).__name__ != "DecorateInfo" or d.test_name != "test_compare_cpu":
            continue
        if d.device_type not in (None, "cpu"):
            continue
        for w in d.decorators:
            reason = _skip_reason(w)
            if reason and ("non-deterministic" in reason or "undefined" in reason):
                if "dropout_p > 0" in reason and sample is not None and not sample.kwargs.get("dropout_p", 0):
                    continue
                return reason
    return None


def _skip_reason(fn):
    cells = getattr(fn, "__closure__", None)
    if not cells:
        return None
    return dict(zip(fn.__code__.co_freevars, (c.cell_contents for c in cells))).get("reason")


# ---- results -------------------------------------------------------------------

@dataclasses.dataclass
class Result:
    entry: str
    dtype: str
    check: str                 # "forward" | "gradient"
    status: str                # "pass" | "fail" | "skip"
    kind: str = ""             # fail: "missing_kernel" | "numeric" | "error" | "crash" | "timeout"; pass: "values" | "meta"
    reason: str = ""
    missing: list = dataclasses.field(default_factory=list)   # aten ops that had no tpu kernel
    samples: int = 0
    seconds: float = 0.0

    def to_json(self):
        return dataclasses.asdict(self)


# ---- moving samples --------------------------------------------------------------

def _tree(x, fn):
    if isinstance(x, torch.Tensor):
        return fn(x)
    if isinstance(x, tuple) and hasattr(x, "_fields"):
        return type(x)(*(_tree(e, fn) for e in x))
    if isinstance(x, (list, tuple)):
        return type(x)([_tree(e, fn) for e in x])
    if isinstance(x, dict):
        return {k: _tree(v, fn) for k, v in x.items()}
    return x


def _leaves(x):
    out = []
    _tree(x, out.append)
    return out


def _sample_parts(sample):
    return [sample.input, list(sample.args), dict(sample.kwargs)]


def _to_tpu(parts, keep_grad):
    memo = {}

    def move(t):
        key = id(t)
        if key not in memo:
            m = t.detach().to("tpu")
            if keep_grad and t.requires_grad:
                m.requires_grad_(True)
            memo[key] = m
        return memo[key]
    return _tree(parts, move), memo


def _clone_cpu(parts, keep_grad):
    memo = {}

    def clone(t):
        key = id(t)
        if key not in memo:
            c = t.detach().clone()
            if keep_grad and t.requires_grad:
                c.requires_grad_(True)
            memo[key] = c
        return memo[key]
    return _tree(parts, clone), memo


def _numel(parts):
    return sum(t.numel() for t in _leaves(parts))


def _mentions_cpu(parts):
    flat = []

    def walk(x):
        if isinstance(x, (list, tuple)):
            for e in x:
                walk(e)
        elif isinstance(x, dict):
            for e in x.values():
                walk(e)
        else:
            flat.append(x)
    walk(parts)
    return any((isinstance(x, torch.device) and x.type == "cpu") or x == "cpu" for x in flat
               if isinstance(x, (torch.device, str)))


def samples(op, dtype, requires_grad, n):
    """The first ``n`` samples small enough to run, drawn reproducibly."""
    torch.manual_seed(zlib.crc32(entry_name(op).encode()) & 0x7FFFFFFF)
    out = []
    for s in itertools.islice(op.sample_inputs("cpu", dtype, requires_grad=requires_grad), MAX_SCAN):
        if _numel(_sample_parts(s)) <= MAX_SAMPLE_NUMEL:
            out.append(s)
            if len(out) == n:
                break
    return out


# ---- failures ------------------------------------------------------------------------

_NO_KERNEL = re.compile(r"(\S+) (?:has no tpu kernel|is a view op with no tpu kernel)")


class Mismatch(AssertionError):
    pass


def _missing_from_error(e):
    m = _NO_KERNEL.search(str(e))
    return m.group(1) if m else None


def _short(e, limit=240):
    text = str(e).strip().splitlines()
    first = text[0] if text else ""
    return f"{type(e).__name__}: {first}"[:limit]


def _summarise_mismatch(msg):
    """A one-line digest of assert_close's message."""
    lines = [ln.strip() for ln in str(msg).splitlines() if ln.strip()]
    keep = []
    for ln in lines:
        if ln.startswith(("Mismatched elements", "Greatest absolute", "Greatest relative", "The values for attribute",
                          "The failure occurred", "Expected",
                          "The length of the sequences", "Booleans mismatch", "Sparse")):
            keep.append(re.sub(r" at index \([^)]*\)", "", ln))
    return "; ".join(keep)[:400] if keep else (lines[0][:400] if lines else "mismatch")


def _fallback_delta(before):
    after = torch_tpu.fallback_ops()
    return sorted(k for k, v in after.items() if v > before.get(k, 0))


def _compare(got, expected, rtol, atol, values=True):
    """got: the tpu result already moved to the CPU."""
    if isinstance(expected, torch.Tensor):
        if not isinstance(got, torch.Tensor):
            raise Mismatch(f"expected a tensor, got {type(got).__name__}")
        if got.dtype != expected.dtype:
            raise Mismatch(f"wrong dtype: {got.dtype} vs CPU {expected.dtype}")
        if got.shape != expected.shape:
            raise Mismatch(f"wrong shape: {tuple(got.shape)} vs CPU {tuple(expected.shape)}")
        if not values:
            return
        if expected.layout != torch.strided:
            expected, got = expected.to_dense(), got.to_dense()
        if expected.dtype == torch.bool or not (expected.is_floating_point() or expected.is_complex()):
            if not torch.equal(got, expected):
                bad = (got != expected).sum().item()
                raise Mismatch(f"{expected.dtype} values differ at {bad} of {expected.numel()} elements")
            return
        try:
            torch.testing.assert_close(got, expected, rtol=rtol, atol=atol, equal_nan=True)
        except AssertionError as e:
            raise Mismatch(_summarise_mismatch(e)) from None
        return
    if isinstance(expected, (list, tuple)):
        if not isinstance(got, (list, tuple)) or len(got) != len(expected):
            raise Mismatch(f"output structure differs: {type(got).__name__} vs CPU {type(expected).__name__}")
        for i, (g, x) in enumerate(zip(got, expected)):
            try:
                _compare(g, x, rtol, atol, values)
            except Mismatch as e:
                raise Mismatch(f"output[{i}]: {e}") from None
        return
    if isinstance(expected, float) and isinstance(got, float) and values:
        if not (math.isclose(got, expected, rel_tol=rtol, abs_tol=atol) or (math.isnan(got) and math.isnan(expected))):
            raise Mismatch(f"scalar {got} vs CPU {expected}")
        return
    if values and got != expected:
        raise Mismatch(f"{got!r} vs CPU {expected!r}")


def _tie_order_dim(name, sample):
    """(dim, keepdim) for an op whose documented result leaves the order of equal
    elements' indices unspecified (an unstable sort, topk, mode), else None."""
    args, kwargs = sample.args, sample.kwargs

    def arg(position, key, default):
        return args[position] if len(args) > position else kwargs.get(key, default)
    if name in ("sort", "argsort") and not kwargs.get("stable", False):
        return arg(0, "dim", -1), True
    if name == "topk":
        return arg(1, "dim", -1), True
    if name == "mode":
        return arg(0, "dim", -1), arg(1, "keepdim", False)
    return None


def _same_up_to_tie_order(name, sample, got, expected, rtol, atol):
    """Whether tpu's indices differ from the CPU's only among equal elements:
    the values match, and the indices pick the same values from the input (for
    sort/argsort/topk also distinct indices per slice, so nothing is picked twice)."""
    spec = _tie_order_dim(name, sample)
    x = sample.input
    if spec is None or not isinstance(x, torch.Tensor) or x.dim() == 0:
        return False
    dim, keepdim = spec
    if name == "argsort":
        if not isinstance(got, torch.Tensor):
            return False
        got_idx, exp_idx = got, expected
    else:
        if not (isinstance(got, tuple) and len(got) == len(expected) == 2):
            return False
        try:
            _compare(got[0], expected[0], rtol, atol)
        except Mismatch:
            return False
        got_idx, exp_idx = got[1], expected[1]
    if got_idx.shape != exp_idx.shape or got_idx.dtype != exp_idx.dtype:
        return False
    if not keepdim:
        got_idx, exp_idx = got_idx.unsqueeze(dim), exp_idx.unsqueeze(dim)
    if got_idx.numel() and (got_idx.min() < 0 or got_idx.max() >= x.shape[dim]):
        return False
    picked, wanted = torch.take_along_dim(x, got_idx, dim), torch.take_along_dim(x, exp_idx, dim)
    if not torch.equal(picked.nan_to_num(), wanted.nan_to_num()) or \
            not torch.equal(picked.isnan(), wanted.isnan()):
        return False
    if name != "mode" and got_idx.size(dim) > 1:  # no index used twice within a slice
        ordered = got_idx.sort(dim).values
        if (ordered.diff(dim=dim) == 0).any():
            return False
    return True


def _no_further_from_float64(op, sample, parts, got, expected, dtype, rtol, atol):
    """For a half-dtype check: whether every tpu element is within tolerance of
    the float64 result, or no further from it than the CPU's own half-precision
    element (some CPU half kernels round intermediates, or return NaN, where
    tpu computes in float32 and rounds once)."""
    if dtype not in (torch.bfloat16, torch.float16):
        return False
    try:
        widened = _tree(_clone_cpu(parts, False)[0], lambda t: t.double() if t.dtype == dtype else t)
        exact = sample.output_process_fn_grad(op(widened[0], *widened[1], **widened[2]))
    except Exception:
        return False
    # the same structure, non-tensor parts and tensor dtypes as the CPU's: only values may differ
    if _tree(got, lambda t: t.dtype) != _tree(expected, lambda t: t.dtype):
        return False
    trios = list(zip(_leaves(got), _leaves(expected), _leaves(exact)))
    if len(trios) != len(_leaves(expected)):
        return False
    for g, c, r in trios:
        if not (g.is_floating_point() and c.is_floating_point() and r.is_floating_point()):
            if not torch.equal(g, c):
                return False
            continue
        if not g.shape == c.shape == r.shape:
            return False
        g, c, r = g.double(), c.double(), r.double()
        inf = float("inf")
        cpu_error = (c - r).abs().nan_to_num(nan=inf)
        tpu_error = torch.where(g.isnan() & r.isnan(), 0.0, (g - r).abs()).nan_to_num(nan=inf)
        if not (tpu_error <= torch.maximum(cpu_error, atol + rtol * r.abs())).all():
            return False
    return True


def _cpu_tree(x):
    return _tree(x, lambda t: t.detach().cpu())


# Results the CPU lays out column-major (LAPACK's order; nonzero's transposed
# result) and tpu row-major: the more permissive layout (a ``.view`` that works
# on the CPU works here), kept rather than paid for with a transpose per call.
COLUMN_MAJOR_ON_THE_CPU = {"geqrf", "linalg.eig", "linalg.lstsq", "linalg.lstsq.grad_oriented", "argwhere"}


def _layout(t):
    """A result's strides along the dims with more than one element (the rest address nothing)."""
    return tuple(st for st, n in zip(t.stride(), t.shape) if n > 1)


def _compare_layouts(name, got, expected):
    """Each strided tpu result has the CPU result's strides (before any copy to the host)."""
    if name in COLUMN_MAJOR_ON_THE_CPU:
        return
    got, expected = _leaves(got), _leaves(expected)
    if len(got) != len(expected):
        return  # (the comparison of values names the difference in structure)
    for i, (g, e) in enumerate(zip(got, expected)):
        if (isinstance(g, torch.Tensor) and isinstance(e, torch.Tensor) and g.layout == e.layout == torch.strided
                and g.shape == e.shape and e.numel() > 1 and _layout(g) != _layout(e)):  # (an empty one addresses nothing)
            raise Mismatch(f"output {i} strided {tuple(g.stride())} vs CPU {tuple(e.stride())} (shape {tuple(e.shape)})")


def _check_on_tpu(out):
    for t in _leaves(out):
        if t.device.type != "tpu":
            raise Mismatch(f"an output is on {t.device}, not on tpu")


# ---- the checks --------------------------------------------------------------------------

def _fail_from_exception(res, e, missing, where=""):
    name = _missing_from_error(e)
    missing = sorted(set(missing) | ({name} if name else set()))
    if missing:
        res.kind, res.missing = "missing_kernel", missing
        res.reason = "no kernel: " + ", ".join(f"aten::{m}" if "::" not in m else m for m in missing) + \
            " (falls back to CPU)"
    elif isinstance(e, Mismatch):
        res.kind, res.reason = "numeric", str(e)
    else:
        res.kind, res.reason = "error", _short(e) + (f" [{where}]" if where else "")
    res.status = "fail"
    return res


def check_forward(op, dtype=None, n=N_FORWARD) -> Result:
    import time
    start = time.perf_counter()
    dtype = dtype or primary_dtype(op)
    res = Result(entry_name(op), str(dtype).replace("torch.", ""), "forward", "skip")
    if dtype is None or dtype not in op.supported_dtypes("cpu"):
        res.reason = f"OpInfo has no CPU support for {dtype}"
        return res
    try:
        batch = samples(op, dtype, False, n)
    except Exception as e:
        res.reason = "could not draw CPU samples: " + _short(e)
        return res
    rtol, atol = tolerance(op, dtype)
    missing = set()
    ran = 0
    where = ""
    meta_reasons = set()
    try:
        for i, s in enumerate(batch):
            where = f"sample {i}: {_describe(s)}"
            parts = _sample_parts(s)
            try:
                expected = _run_cpu(op, s, parts, seed=0)
            except Exception:
                continue  # the sample is invalid on the CPU too
            reason_meta = values_comparable(op, s)
            if reason_meta is None and _seed_sensitive(op, s, parts, expected):
                reason_meta = "output changes with the CPU seed"
            before = torch_tpu.fallback_ops()
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    got = _run_tpu(op, s, parts, False)[0]
            finally:
                missing.update(_fallback_delta(before))
            ran += 1
            if not _mentions_cpu(parts):
                _check_on_tpu(got)
            try:
                _compare_layouts(entry_name(op), got, expected)
            except Mismatch as e:
                raise Mismatch(f"sample {i} ({_describe(s)}): {e}") from None
            if reason_meta is not None:
                meta_reasons.add(reason_meta)
            try:
                try:
                    _compare(_cpu_tree(got), expected, rtol, atol, values=reason_meta is None)
                except Mismatch:
                    if not (_same_up_to_tie_order(op.name, s, _cpu_tree(got), expected, rtol, atol) or
                            _no_further_from_float64(op, s, parts, _cpu_tree(got), expected, dtype, rtol, atol)):
                        raise
            except Mismatch as e:
                raise Mismatch(f"sample {i} ({_describe(s)}): {e}") from None
    except Exception as e:
        res.samples = ran
        res.seconds = round(time.perf_counter() - start, 2)
        return _fail_from_exception(res, e, missing, where)
    res.samples = ran
    res.seconds = round(time.perf_counter() - start, 2)
    if missing:
        return _fail_from_exception(res, RuntimeError("fallback"), missing)
    if ran == 0:
        res.reason = "no sample runs on the CPU within the size limit"
        return res
    res.status = "pass"
    res.kind = "meta" if meta_reasons else "values"
    if meta_reasons:
        res.reason = "values not compared (" + "; ".join(sorted(meta_reasons)) + "); shape/dtype match"
    return res


def _run_cpu(op, s, parts, seed):
    cpu_parts, _ = _clone_cpu(parts, False)
    torch.manual_seed(seed)
    return s.output_process_fn_grad(op(cpu_parts[0], *cpu_parts[1], **cpu_parts[2]))


def _seed_sensitive(op, s, parts, expected):
    """Does the CPU result change with the RNG seed?  Then tpu's values cannot match it.

    OpInfo runs random ops under ``wrapper_set_seed`` (a fixed seed 42): for those the
    rerun swaps in another seed.
    """
    fn = op.op
    glb = getattr(fn, "__globals__", None)
    if glb is not None and "wrapper_set_seed" in getattr(getattr(fn, "__code__", None), "co_names", ()):
        original = glb["wrapper_set_seed"]

        def other_seed(f, *a, **k):
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(4321)
                return f(*a, **k)
        glb["wrapper_set_seed"] = other_seed
        try:
            again = _run_cpu(op, s, parts, seed=1)
        finally:
            glb["wrapper_set_seed"] = original
    else:
        again = _run_cpu(op, s, parts, seed=1)
    return not _same(expected, again)


def _same(a, b):
    """Bitwise-equal results (NaNs equal): is the op deterministic for this sample?"""
    la, lb = _leaves(a), _leaves(b)
    if len(la) != len(lb):
        return False
    for x, y in zip(la, lb):
        if not isinstance(x, torch.Tensor) or not isinstance(y, torch.Tensor):
            if x != y and x == x:
                return False
            continue
        if x.shape != y.shape or x.dtype != y.dtype:
            return False
        if x.layout != torch.strided:
            x, y = x.to_dense(), y.to_dense()
        if x.dtype == torch.complex32:  # no CPU kernels for complex32 comparisons
            x, y = x.to(torch.complex64), y.to(torch.complex64)
        if not torch.equal(x, y) and not (x.is_floating_point() and torch.equal(x.nan_to_num(), y.nan_to_num())):
            return False
    return True


_ON_CPU = re.compile(r"to be on cpu|on cpu, but|must be a CPU tensor|expected .* on CPU", re.I)


def _run_tpu(op, s, parts, keep_grad):
    """The op on a tpu copy of the sample: (result, memo of copies).

    Every tensor moves to tpu.  Only when PyTorch's device contract itself demands a
    CPU argument (e.g. tensor_split's ``tensor_indices_or_sections``, which must be a CPU
    tensor on CUDA too) is the sample rerun with its integer argument tensors (not
    ``input``) left on the CPU.
    """
    tpu_parts, memo = _to_tpu(parts, keep_grad)
    try:
        return s.output_process_fn_grad(op(tpu_parts[0], *tpu_parts[1], **tpu_parts[2])), memo
    except RuntimeError as e:
        if not _ON_CPU.search(str(e)):
            raise
    tpu_input, memo = _to_tpu(parts[0], keep_grad)

    def move(t):
        if t.is_floating_point() or t.is_complex():
            if id(t) not in memo:
                memo[id(t)] = t.detach().to("tpu").requires_grad_(keep_grad and t.requires_grad)
            return memo[id(t)]
        return t
    rest = _tree(parts[1:], move)
    return s.output_process_fn_grad(op(tpu_input, *rest[0], **rest[1])), memo


def _describe(s):
    def d(x):
        if isinstance(x, torch.Tensor):
            return f"{str(x.dtype).replace('torch.', '')}{list(x.shape)}"
        if isinstance(x, (list, tuple)):
            return "[" + ", ".join(d(e) for e in x) + "]"
        return repr(x)
    parts = [d(s.input)] + [d(a) for a in s.args] + [f"{k}={d(v)}" for k, v in s.kwargs.items()]
    return ", ".join(parts)[:160]


def _differentiable_outputs(out):
    return [t for t in _leaves(out) if t.requires_grad and (t.is_floating_point() or t.is_complex())]


def check_gradient(op, dtype=torch.float32, n=N_GRAD) -> Result:
    import time
    start = time.perf_counter()
    res = Result(entry_name(op), str(dtype).replace("torch.", ""), "gradient", "skip")
    if not op.supports_autograd:
        res.reason = "OpInfo: no autograd support"
        return res
    if dtype not in op.supported_backward_dtypes("cpu"):
        res.reason = f"OpInfo: no CPU backward for {dtype}"
        return res
    try:
        batch = samples(op, dtype, True, n)
    except Exception as e:
        res.reason = "could not draw CPU samples: " + _short(e)
        return res
    rtol, atol = tolerance(op, dtype, gradient=True)
    missing = set()
    ran = 0
    gen = torch.Generator().manual_seed(1234)
    where = ""
    try:
        for i, s in enumerate(batch):
            where = f"sample {i}: {_describe(s)}"
            parts = _sample_parts(s)
            cpu_parts, cpu_memo = _clone_cpu(parts, True)
            leaves = [t for t in _leaves(parts) if t.requires_grad]
            if not leaves or values_comparable(op, s) is not None:
                continue
            try:
                torch.manual_seed(0)
                out = s.output_process_fn_grad(op(cpu_parts[0], *cpu_parts[1], **cpu_parts[2]))
                if _seed_sensitive(op, s, parts, _cpu_tree(out)):
                    continue  # random output: gradients not comparable
                outs = _differentiable_outputs(out)
                if not outs:
                    continue
                ws = [torch.randn(o.shape, dtype=o.dtype, generator=gen) for o in outs]
                cpu_inputs = [cpu_memo[id(t)] for t in leaves]
                expected = torch.autograd.grad(outs, cpu_inputs, grad_outputs=ws, allow_unused=True)
            except Exception:
                continue  # not differentiable on the CPU for this sample
            before = torch_tpu.fallback_ops()
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    tout, tpu_memo = _run_tpu(op, s, parts, True)
                    tout = _differentiable_outputs(tout)
                    if len(tout) != len(outs):
                        raise Mismatch(f"sample {i}: {len(tout)} differentiable outputs vs CPU {len(outs)}")
                    tpu_inputs = [tpu_memo[id(t)] for t in leaves]
                    got = torch.autograd.grad(tout, tpu_inputs, grad_outputs=[w.to(o.device) for w, o in zip(ws, tout)],
                                              allow_unused=True)
            finally:
                missing.update(_fallback_delta(before))
            ran += 1
            for k, (g, x) in enumerate(zip(got, expected)):
                if (g is None) != (x is None):
                    # An unused input's gradient may be None on one side and zeros on the other.
                    z = g if g is not None else x
                    if torch.count_nonzero(z.detach().cpu()).item() == 0:
                        continue
                    raise Mismatch(f"sample {i}: grad[{k}] is {'None' if g is None else 'a tensor'} "
                                   f"vs CPU {'None' if x is None else 'a tensor'}")
                if g is None:
                    continue
                try:
                    _check_on_tpu(g)
                    _compare_layouts(entry_name(op), g, x)
                    _compare(g.detach().cpu(), x, rtol, atol)
                except Mismatch as e:
                    raise Mismatch(f"sample {i} ({_describe(s)}): grad[{k}]: {e}") from None
    except Exception as e:
        res.samples = ran
        res.seconds = round(time.perf_counter() - start, 2)
        return _fail_from_exception(res, e, missing, where)
    res.samples = ran
    res.seconds = round(time.perf_counter() - start, 2)
    if missing:
        return _fail_from_exception(res, RuntimeError("fallback"), missing)
    if ran == 0:
        res.reason = "no differentiable sample within the size limit"
        return res
    res.status, res.kind = "pass", "values"
    return res


def run_check(check, name, dtype=None):
    """One check by entry name, never raising: crashes of the harness itself become 'error'."""
    op = ops()[name]
    try:
        if check == "forward":
            return check_forward(op, dtype)
        if check in DTYPE_CHECKS:
            r = check_forward(op, getattr(torch, check))
            r.check = check
            return r
        if check == "gradient":
            return check_gradient(op)
        if check == COMPLEX_GRADIENT:
            r = check_gradient(op, torch.complex64)
            r.check = check
            return r
        raise ValueError(check)
    except Exception as e:  # pragma: no cover - a bug in the harness
        return Result(name, str(dtype), check, "fail", "error",
                      "harness: " + _short(e) + " | " + traceback.format_exc(limit=2).replace("\n", " ")[-200:])
