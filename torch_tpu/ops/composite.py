"""Composite ops run as ONE program: PyTorch's own decomposition, traced once
per signature on meta tensors, with every step computed by the registered
kernel's graph form (the same ``apply`` its eager kernel runs, with the dtypes
PyTorch's meta kernels give each step).

A CompositeImplicitAutograd op (``isclose``) otherwise reaches the device as
the ops it is made of: ``torch.isclose`` is 11-14 kernels, so a new shape
compiled 11-14 programs (every ``assertEqual`` of two tpu tensors of a new
shape in PyTorch's test suites).  Run this way it compiles one, and its
results are the decomposition's, bit for bit: the same steps in the same
dtypes.
"""
import functools

import numpy as np
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from .. import dtypes
from . import registry
from .core import same_device_cast

aten = torch.ops.aten


def _functional(op):
    """The functional overload an in-place step (``bitwise_or_``) stands for:
    the decomposition's in-place steps write a fresh intermediate of the
    result's own dtype, so the functional result is the same value."""
    packet = op._schema.name.split("::")[1]
    if not packet.endswith("_"):
        return op
    base = getattr(aten, packet[:-1], None)
    return getattr(base, op._overloadname, op) if base is not None else op


@functools.lru_cache(maxsize=1024)
def _graph(fn, specs, static, default_dtype):
    """PyTorch's decomposition of ``fn(*tensors, *static)`` for inputs of
    ``specs`` ((shape, torch dtype) each), as an fx graph of aten ops
    (``default_dtype``: what an integer operand is cast to, part of the key)."""
    metas = [torch.empty(shape, dtype=dtype, device="meta") for shape, dtype in specs]
    return make_fx(lambda *ts: fn(*ts, *static))(*metas)


def _meta(v):
    if isinstance(v, torch.fx.Node):
        val = v.meta["val"]
        return torch.empty_strided(val.shape, val.stride(), dtype=val.dtype, device="meta")
    if isinstance(v, (list, tuple)):
        return type(v)(_meta(e) for e in v)
    return v


def supported(op) -> bool:
    return op is aten._to_copy.default or registry.graph_form(_functional(op)) is not None


def run(fn, arrays, *static):
    """``fn(*tensors, *static)`` (a torch function of tensors) on the traced
    ``arrays``: PyTorch's decomposition of it, every step by its graph form."""
    specs = tuple((tuple(a.shape), dtypes.NP_TO_TORCH[np.dtype(a.dtype)]) for a in arrays)
    graph = _graph(fn, specs, static, torch.get_default_dtype())
    env = {}
    inputs = iter(arrays)
    result = None

    def value(v):
        if isinstance(v, torch.fx.Node):
            return env[v]
        if isinstance(v, (list, tuple)):
            return type(v)(value(e) for e in v)
        return v

    for node in graph.graph.nodes:
        if node.op == "placeholder":
            env[node] = next(inputs)
        elif node.op == "call_function":
            op = _functional(node.target)
            val = node.meta["val"]
            out_dtypes = [dtypes.to_np(val.dtype)]
            args, kwargs = list(value(node.args)), value(dict(node.kwargs))
            if op is aten._to_copy.default:  # a cast on the device (bool/int operands of isclose)
                env[node] = same_device_cast.apply(args, {"dtype": kwargs.get("dtype")}, None, out_dtypes)[0]
                continue
            form = registry.graph_form(op)
            if form is None:
                raise NotImplementedError(f"composite step {node.target} has no graph form")
            promote = form.promote_dtype(_meta(node.args), _meta(dict(node.kwargs)))
            env[node] = form.apply(args, kwargs, promote, out_dtypes)[0]
        elif node.op == "output":
            result = value(node.args[0])
    return result


# -- isclose -------------------------------------------------------------------

def _isclose_cpu(self, other, rtol, atol, equal_nan):
    return aten.isclose.default(self, other, rtol, atol, equal_nan)


@registry.register("isclose.default")
def isclose(self, other, rtol=1e-05, atol=1e-08, equal_nan=False):
    return run(_isclose_cpu, (self, other), float(rtol), float(atol), bool(equal_nan))


# A tpu kernel of a CompositeImplicitAutograd op takes the composite away from
# autograd too; isclose's result (bool) has no gradient, so its autograd
# kernel only steps below autograd, as the composite's bool result is made.
@registry.register_raw("isclose.default", dispatch_key="AutogradPrivateUse1")
def _isclose_below_autograd(self, other, rtol=1e-05, atol=1e-08, equal_nan=False):
    with torch._C._AutoDispatchBelowAutograd():
        return aten.isclose.default(self, other, rtol, atol, equal_nan)
