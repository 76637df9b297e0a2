"""tpu work as ranges in ``torch.profiler`` tables and Chrome traces.

PyTorch's dispatcher already records each ATen op (``aten::add``), but tpu
ops are asynchronous, so that range only covers dispatch.  While a profiler
is active, the hooks run the op's executable inside a ``tpu::<op>`` range
and wait for it, so the range holds the device time (first calls, which
compile, are named ``tpu::compile+run <op>``).  Off the profiler the hooks
cost one attribute read (``torch_profiler._is_profiler_enabled``).
"""
import jax
from torch.autograd import profiler as torch_profiler  # noqa: F401  (hooks read _is_profiler_enabled)
from torch.autograd.profiler import record_function


def run(name, fn, inputs):
    """``fn(*inputs)`` inside a profiler range, waiting for the device."""
    size = getattr(fn, "_cache_size", None)
    label = ("tpu::compile+run " if size is not None and size() == 0 else "tpu::") + name
    with record_function(label):
        out = fn(*inputs)
        jax.block_until_ready(out)
    return out
