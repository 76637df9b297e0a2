"""Ops with no tpu kernel run on the CPU: copy in, PyTorch's CPU kernel, copy
back.  Each op warns once; ``TORCH_TPU_STRICT=1`` makes it an error, and
``torch_tpu.fallback_ops()`` lists the ops that fell back in this process."""
import os
import warnings

import torch
from torch.utils._pytree import tree_map

from .. import logs, runtime
from ..device import first_op
from . import core

_fallen_back: dict = {}


def fallback_ops() -> dict:
    """{op name: call count} of the ops that ran on the CPU in this process."""
    return dict(_fallen_back)


def _strict() -> bool:
    return os.environ.get("TORCH_TPU_STRICT", "0") not in ("", "0")


def _is_view_op(op) -> bool:
    return any(r.alias_info is not None and not r.alias_info.is_write for r in op._schema.returns)


def cpu_fallback(op, *args, **kwargs):
    name = str(op._schema.name) + ("." + op._overloadname if op._overloadname != "default" else "")
    if _strict():
        raise NotImplementedError(
            f"{name} has no tpu kernel (TORCH_TPU_STRICT=1 forbids running it on the CPU)")
    if _is_view_op(op):
        raise NotImplementedError(
            f"{name} is a view op with no tpu kernel; running it on the CPU would break aliasing")
    if name not in _fallen_back:
        warnings.warn(f"torch_tpu: {name} has no tpu kernel yet; it runs on the CPU "
                      "(copies in and out). Set TORCH_TPU_STRICT=1 to make this an error.",
                      stacklevel=2)
    _fallen_back[name] = _fallen_back.get(name, 0) + 1
    logs.fallback(name, args, kwargs)  # TORCH_TPU_LOGS=fallback

    originals = {}

    def to_cpu(x):
        if isinstance(x, torch.Tensor) and x.device.type == "tpu":
            c = core.to_cpu_tensor(x)
            originals[id(c)] = x
            return c
        if isinstance(x, torch.device) and x.type == "tpu":
            runtime.check_device(x)
            return torch.device("cpu")
        return x

    cargs = tree_map(to_cpu, args)
    ckwargs = tree_map(to_cpu, kwargs)
    out = op(*cargs, **ckwargs)

    # Arguments the op wrote (self_, out=) get the CPU result back.
    schema_args = op._schema.arguments
    for i, a in enumerate(schema_args):
        if a.alias_info is None or not a.alias_info.is_write:
            continue
        cval = cargs[i] if i < len(cargs) else ckwargs.get(a.name)
        for c in (cval if isinstance(cval, (list, tuple)) else [cval]):
            orig = originals.get(id(c))
            if orig is not None:
                if tuple(orig.shape) != tuple(c.shape):
                    orig.resize_(c.shape)
                core.copy_into(orig, c)

    def back(x):
        if isinstance(x, torch.Tensor):
            orig = originals.get(id(x))
            if orig is not None:
                return orig
            if x.device.type == "cpu":
                return x.to("tpu")
        return x
    return tree_map(back, out)


first_op.set_without_kernel(cpu_fallback)  # (the PrivateUse1 fallback kernel, registered at import torch)
