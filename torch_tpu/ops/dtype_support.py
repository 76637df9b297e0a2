"""The CPU's refusals of an input dtype, for ops whose tpu kernel would accept it.

PyTorch's meta kernels check shapes, not which dtypes a kernel is built for:
``sort`` of a complex tensor, ``mm`` of bool tensors, ``frac`` of an integer
tensor run on tpu (XLA accepts them) where the CPU raises "not implemented
for 'Bool'", and others reach JAX and fail with its own message.  So on the
first call with a signature whose inputs have a non-floating dtype, the op runs
once on the CPU on stand-ins filled with ones (no division by zero): of the
same shapes when they are small, else with each dimension 1 (or 0).  If that
raises, and the same call with float32 in place of one suspect dtype does not,
the refusal is the dtype's: raised here, as the CPU raises it.  An accepted
call is remembered per op and dtypes.  float16/bfloat16 support beyond the
CPU's is kept on purpose (TPUs compute in them).

The same stand-ins answer two rarer questions, only when something failed:
which error the CPU gives for a call whose kernel XLA refused to build
(``cpu_error``), and what the CPU does with a small call its meta kernel
refused (``cpu_answer``).
"""
import re
import warnings

import torch

_FLOATS = frozenset({torch.float16, torch.bfloat16, torch.float32, torch.float64})
_EXACT_NUMEL = 4096  # stand-ins of the real shapes up to this many elements in all
_supported: set = set()  # (op, input dtypes, string and bool arguments) the CPU accepts
_CPU_NAMES = [(re.compile(r"_cpu((?:_\w*)?['\"])"), r"_tpu\1"), (re.compile(r"\bon CPU\b"), "on TPU")]
_DTYPE_REFUSAL = re.compile(r"not implemented for '|does not support (complex|bool)|only supports? floating")


# Ops that accept every dtype and warn about some (a complex-to-real cast, a
# uint8 mask): a stand-in's C++ warning would reach the user on top of ours
# (it is emitted when the user's call returns, past any filter set here).
_EVERY_DTYPE = frozenset({"aten::copy_", "aten::_to_copy", "aten::index", "aten::index_put",
                          "aten::index_put_", "aten::_index_put_impl_"})


# Ops whose tpu kernel takes dtypes the CPU's refuses, as CUDA's does, because
# code written for accelerators passes them (Hugging Face's MoE layers count
# experts with an integer histc everywhere but the CPU and MPS); the kernel
# refuses the rest itself.
_ACCELERATOR_DTYPES = frozenset({"aten::histc"})


def _skipped(op) -> bool:
    """Ops whose stand-in call could differ from the real one: random draws
    (they would advance the CPU generator) and ops that take an output size;
    and those that take more dtypes than the CPU (_ACCELERATOR_DTYPES)."""
    schema = op._schema
    return (torch.Tag.nondeterministic_seeded in op.tags
            or op.namespace != "aten" or schema.name in _EVERY_DTYPE or schema.name in _ACCELERATOR_DTYPES
            or any(a.name == "size" for a in schema.arguments)
            or schema.name.startswith(("aten::new_", "aten::resize")))


def _tensors(x):
    if isinstance(x, torch.Tensor):
        yield x
    elif isinstance(x, (list, tuple)):
        for y in x:
            yield from _tensors(y)


def _stand_in(x, replace, exact):
    if isinstance(x, torch.Tensor):
        dtype = torch.float32 if x.dtype in replace else x.dtype
        return torch.ones(x.shape if exact else [min(s, 1) for s in x.shape], dtype=dtype)
    if isinstance(x, (list, tuple)):
        return type(x)(_stand_in(y, replace, exact) for y in x)
    if isinstance(x, torch.device):
        return torch.device("cpu")
    return x


def _empty_out(x, replace):
    if isinstance(x, torch.Tensor):
        return torch.empty(0, dtype=torch.float32 if x.dtype in replace else x.dtype)
    if isinstance(x, (list, tuple)):
        return type(x)(_empty_out(y, replace) for y in x)
    return x


def _run(op, args, kwargs, replace, exact):
    # a _foreach_* op's packed ``scalars`` (a small CPU tensor, one number per
    # position) is passed as it is: a shorter stand-in would be refused for its length
    names = [x.name for x in op._schema.arguments]
    a = [x if names[i] == "scalars" and isinstance(x, torch.Tensor) and x.device.type == "cpu"
         else _stand_in(x, replace, exact) for i, x in enumerate(args)]
    # out= stand-ins are empty: resizing one does not warn ("an output with one or more elements was resized")
    outs = {x.name for x in op._schema.arguments if x.kwarg_only and x.alias_info is not None and x.alias_info.is_write}
    k = {n: _stand_in(v, replace, exact) if n not in outs else _empty_out(v, replace) for n, v in kwargs.items()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (what Python itself warns about)
        return op(*a, **k)


def _as_raised_here(refusal):
    message = str(refusal)
    for pattern, repl in _CPU_NAMES:
        message = pattern.sub(repl, message)
    try:
        return type(refusal)(message)
    except Exception:  # an exception type with a constructor of its own
        return RuntimeError(message)


def _exact(args, kwargs) -> bool:
    return sum(t.numel() for t in _tensors((args, list(kwargs.values())))) <= _EXACT_NUMEL


def check(op, args, kwargs):
    """Raise the CPU's error if it refuses the dtypes of this call's tensors."""
    dtypes = tuple(t.dtype for t in _tensors((args, list(kwargs.values()))))
    suspects = set(dtypes) - _FLOATS
    if not suspects:
        return
    # a string or a flag picks the kernel as a dtype does (scatter_reduce's "sum" takes bools, its
    # "mean" not; index_reduce's prod of complex numbers include_self=True only)
    key = (op, dtypes, tuple(a for a in args if isinstance(a, (str, bool))),
           tuple((n, v) for n, v in kwargs.items() if isinstance(v, (str, bool))))
    if key in _supported or _skipped(op):
        return
    exact = _exact(args, kwargs)
    try:
        _run(op, args, kwargs, (), exact)
    except Exception as refusal:  # the CPU refuses: because of a dtype?
        for suspect in suspects:
            try:
                _run(op, args, kwargs, (suspect,), exact)
            except Exception:
                continue  # float32 fails as well (an index, a shape or value the stand-ins miss)
            raise _as_raised_here(refusal) from None
        return
    _supported.add(key)


def cpu_error(op, args, kwargs):
    """The CPU's error for a call whose kernel failed to build here (XLA
    refused a dtype: ``bitwise_and`` of floats, ``det`` of float16), or None:
    the CPU names the problem as PyTorch users know it, JAX does not."""
    if _skipped(op):
        return None
    exact = _exact(args, kwargs)
    try:
        _run(op, args, kwargs, (), exact)
    except Exception as e:
        if exact or _DTYPE_REFUSAL.search(str(e)):
            return _as_raised_here(e)
    return None


def cpu_answer(op, args, kwargs):
    """For a call whose meta kernel raised: the CPU's own answer on stand-ins
    of the real (small) shapes, as ("error", exception) or ("result", its
    results), or None when the inputs are too large to ask cheaply.  Meta
    kernels sometimes refuse what the CPU computes (a full ``sum`` of a
    65-dim tensor) or refuse it in other words."""
    if _skipped(op) or not _exact(args, kwargs):
        return None
    try:
        return "result", _run(op, args, kwargs, (), True)
    except Exception as e:
        return "error", _as_raised_here(e)
