"""``torch.tpu.profiler``: XLA device traces of tpu code, with Google
torch_tpu's ``TpuProfilerConfig`` keys.

    with torch.tpu.profiler.trace("./tpu_trace"):
        train_step()
    # ./tpu_trace/plugins/profile/<run>/*.xplane.pb and *.trace.json.gz:
    # open with TensorBoard's profile plugin, XProf or Perfetto.

``torch.profiler.profile`` works too and lists the ``tpu::`` op ranges
(``torch_tpu/eager/ranges.py``).  This module is imported early by ``torch_tpu.ops``, so it
keeps its own imports light.
"""
import sys

from . import compiles as _compiles
from .calls import python_calls  # noqa: F401
from .compiles import xla_compiles  # noqa: F401
from .config import TpuProfilerConfig  # noqa: F401
from .trace import is_tracing, profile, start, stop, trace  # noqa: F401


def install() -> None:
    """Expose ``torch.tpu.profiler`` and apply ``TORCH_TPU_LOGS`` (from torch_tpu/__init__)."""
    from .. import logs
    from ..device import module as tpu_module
    tpu_module.profiler = sys.modules[__name__]
    sys.modules["torch.tpu.profiler"] = sys.modules[__name__]
    logs.install()
    _compiles.install()  # count XLA compiles from the first one on
