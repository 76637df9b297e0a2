"""The one way work reaches the device: every op's executable, a registered
kernel's or a hand-written (raw) kernel's, and every compiled graph, is
launched here.

``launch`` records the call in fused mode (when the caller can say the
shapes of its results), else runs it: inside a ``torch.profiler`` range while
a profiler is active, with a failure named after the op (never a JAX
traceback), and then notes the launch for ``synchronize`` (debug mode waits
for it there).
"""
from . import fusion, modes, pending
from . import ranges as _prof

_FUSED, _DEBUG = modes.EagerMode.FUSED, modes.EagerMode.DEBUG


def launch(name: str, fn, inputs, out_buffers=None):
    """``fn(*inputs)`` as op ``name``: its results (arrays, or LazyBuffers when
    recorded).  ``out_buffers`` [(shape, dtype)] lets fused mode record it; a
    call whose result sizes depend on device values (``nonzero``) passes None
    and always runs."""
    mode = modes._mode  # read once: this runs for every op
    if mode is _FUSED and out_buffers is not None:
        return fusion.record(fn, inputs, out_buffers)
    try:
        results = (fn(*inputs) if not _prof.torch_profiler._is_profiler_enabled
                   else _prof.run(name, fn, inputs))
    except Exception as e:  # an XLA runtime failure: name the op, not JAX internals
        raise failure(name, e) from None
    if mode is _DEBUG:
        modes.after_op(name, results)  # waits for the results
    else:
        pending.note(results)
    return results


def failure(name: str, e: Exception) -> RuntimeError:
    first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return RuntimeError(f"tpu: {name} failed on the device: {first}")
