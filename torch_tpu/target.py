"""The platform kernels are chosen and lowered for.

Normally the platform the ``tpu`` device runs on.  The TPU lowering check
(``torch.tpu.lowering_check``) builds programs for a TPU on a machine without
one, so two choices consult this module instead of the running device:

* ``kernel_platform()``: which kernels the ops pick while tracing (SDPA picks
  the Pallas flash kernel for a TPU);
* ``pallas_platform()``: how a Pallas kernel lowers (Mosaic for a TPU,
  interpreted elsewhere).

They differ during a check: graphs are traced with TPU kernels, lowered for
the TPU inside ``lowering_for_tpu()``, and also run here on the CPU platform,
where their Pallas kernels run interpreted.
"""
import contextlib
import contextvars

from . import runtime

_kernels = contextvars.ContextVar("torch_tpu_kernel_platform", default=None)
_pallas = contextvars.ContextVar("torch_tpu_pallas_platform", default=None)


def kernel_platform() -> str:
    return _kernels.get() or runtime.jax_device().platform


def pallas_platform() -> str:
    return _pallas.get() or runtime.jax_device().platform


@contextlib.contextmanager
def _set(var, platform):
    token = var.set(platform)
    try:
        yield
    finally:
        var.reset(token)


def kernels_for(platform: str):
    """Trace with the kernels ``platform`` would pick."""
    return _set(_kernels, platform)


def lowering_for_tpu():
    """Lower Pallas kernels through Mosaic, as on a TPU."""
    return _set(_pallas, "tpu")
