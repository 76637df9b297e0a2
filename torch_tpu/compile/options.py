"""``torch.tpu.compiler.custom_compiler_options({...})``: XLA compiler options
for the executables compiled inside the block (torch.compile graphs and
fused-eager chains), passed through to XLA as they are."""
import contextlib
import threading

_local = threading.local()


def current() -> dict:
    return dict(getattr(_local, "options", {}))


@contextlib.contextmanager
def custom_compiler_options(options: dict):
    if not isinstance(options, dict):
        raise TypeError("custom_compiler_options takes a dict of XLA option names to values")
    previous = current()
    _local.options = {**previous, **{str(k): v for k, v in options.items()}}
    try:
        yield
    finally:
        _local.options = previous
