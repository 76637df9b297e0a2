"""``torch.autocast("tpu", dtype=torch.bfloat16)``: the CUDA casting policy on
the AutocastPrivateUse1 key.  Matmul-like ops run in the autocast dtype;
precision-sensitive ops run in float32; ops that mix dtypes promote."""
import torch
from torch._C import DispatchKey, DispatchKeySet

# The same lists CUDA's autocast uses (aten/src/ATen/autocast_mode.cpp).
LOWER_PRECISION = [
    "_convolution.deprecated", "_convolution.default", "conv1d.default", "conv2d.default",
    "conv3d.default", "conv_tbc.default", "conv_transpose1d.default",
    "conv_transpose2d.input", "conv_transpose3d.input", "convolution.default", "prelu.default",
    "addmm.default", "addmv.default", "addr.default", "matmul.default", "einsum.default",
    "mm.default", "mv.default", "linear.default", "addbmm.default", "baddbmm.default",
    "bmm.default", "chain_matmul.default", "linalg_multi_dot.default",
    "scaled_dot_product_attention.default",
]
FLOAT32 = [
    "acos.default", "asin.default", "cosh.default", "erfinv.default", "exp.default",
    "expm1.default", "log.default", "log10.default", "log2.default", "log1p.default",
    "reciprocal.default", "rsqrt.default", "sinh.default", "tan.default",
    "pow.Tensor_Scalar", "pow.Tensor_Tensor", "pow.Scalar", "softplus.default",
    "layer_norm.default", "native_layer_norm.default", "group_norm.default",
    "norm.Scalar", "norm.ScalarOpt_dim", "cosine_similarity.default",
    "poisson_nll_loss.default", "cosine_embedding_loss.default", "nll_loss.default",
    "nll_loss2d.default", "hinge_embedding_loss.default", "kl_div.default",
    "l1_loss.default", "smooth_l1_loss.default", "huber_loss.default", "mse_loss.default",
    "margin_ranking_loss.default", "multilabel_margin_loss.default",
    "soft_margin_loss.default", "triplet_margin_loss.default", "multi_margin_loss.default",
    "binary_cross_entropy_with_logits.default", "dist.default", "pdist.default",
    "cdist.default", "renorm.default", "logsumexp.default",
    "softmax.int", "log_softmax.int", "cross_entropy_loss.default",
    "cumsum.default", "cumprod.default", "sum.default", "prod.default",
]
PROMOTE = [
    "addcdiv.default", "addcmul.default", "atan2.default", "bilinear.default",
    "cross.default", "dot.default", "vdot.default", "grid_sampler.default",
    "index_put.default", "scatter_add.default", "tensordot.default", "cat.default",
    "stack.default",
]

_AUTOCAST = DispatchKeySet(DispatchKey.AutocastPrivateUse1)
_lib = None


def _cast(x, dtype):
    if isinstance(x, torch.Tensor) and x.is_floating_point() and x.device.type == "tpu" \
            and x.dtype != torch.float64:
        return x.to(dtype)
    if isinstance(x, (list, tuple)):
        return type(x)(_cast(e, dtype) for e in x)
    return x


def _widest(args):
    widest = None
    for x in args:
        for t in (x if isinstance(x, (list, tuple)) else [x]):
            if isinstance(t, torch.Tensor) and t.is_floating_point():
                widest = t.dtype if widest is None else torch.promote_types(widest, t.dtype)
    return widest


def _kernel(op, policy):
    def run(*args, **kwargs):
        if policy == "lower":
            dtype = torch.get_autocast_dtype("tpu")
        elif policy == "float32":
            dtype = torch.float32
        else:
            dtype = _widest(list(args) + list(kwargs.values()))
        if dtype is not None:
            args = _cast(args, dtype)
            kwargs = {k: _cast(v, dtype) for k, v in kwargs.items()}
        with torch._C._ExcludeDispatchKeyGuard(_AUTOCAST):
            return op(*args, **kwargs)
    return run


def install() -> None:
    global _lib
    _lib = torch.library.Library("aten", "IMPL")
    fallthrough = torch.library.Library("_", "IMPL")
    fallthrough.fallback(torch.library.fallthrough_kernel, "AutocastPrivateUse1")
    _lib._fallthrough = fallthrough
    for names, policy in ((LOWER_PRECISION, "lower"), (FLOAT32, "float32"), (PROMOTE, "promote")):
        for name in names:
            packet, _, overload = name.partition(".")
            op = getattr(getattr(torch.ops.aten, packet, None), overload, None)
            if op is not None:
                _lib.impl(op, _kernel(op, policy), "AutocastPrivateUse1")

