"""How many XLA executables this process has built: compiled by XLA, or
loaded from JAX's persistent compilation cache (either way a new executable
for a new program or shape, which is what a shape-stable loop must avoid).

    before = torch_tpu.profiler.xla_compiles()
    model.generate(ids, max_new_tokens=32)
    print(torch_tpu.profiler.xla_compiles() - before)

Counted from JAX's own monitoring event around each compile-or-load
(``backend_compile_duration``), so every path counts: eager kernels, fused
chains, ``torch.compile`` graphs and jax_op kernels.
"""
import threading

import jax

_BACKEND_COMPILE = "/jax/core/compile/backend_compile_duration"

_lock = threading.Lock()  # compiles may finish on several threads
_count = 0
_installed = False


def _on_duration(event, duration_secs, **kwargs):
    global _count
    if event == _BACKEND_COMPILE:
        with _lock:
            _count += 1


def install() -> None:
    global _installed
    if not _installed:
        jax.monitoring.register_event_duration_secs_listener(_on_duration)
        _installed = True


def xla_compiles() -> int:
    """XLA executables built so far in this process (a monotonic count)."""
    return _count
