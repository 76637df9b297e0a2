"""Host values onto the device and back: ``put(host)`` is
``jax.device_put(host, runtime.jax_device())`` and ``fetch(values)`` is
``jax.device_get(values)`` for a list, each at the transfer's own cost.

``jax.device_put`` wraps the one C++ call that copies a NumPy array into a
device buffer in ~50 us of Python per call (argument flattening, sharding and
layout resolution, abstractification, transfer-guard scopes).  Every
``tensor.to("tpu")`` and ``torch.tensor(..., device="tpu")`` of a small value
paid it: 130 us where PyTorch's CPU takes 4.  ``put`` calls JAX's batched put
directly, with the device's sharding and each shape's abstract value made
once (~5 us).  The array is the same as ``jax.device_put``'s: committed to the
device, the dtype unchanged (x64 is on, so nothing is canonicalized).
"""
import jax
import numpy as np

from .. import runtime

try:  # JAX's own step under device_put (private, so checked once at first use)
    from jax._src import core as _jax_core
    from jax._src.interpreters.pxla import batched_device_put as _batched_put
except ImportError:  # pragma: no cover -- a JAX that moved it: device_put's path
    _batched_put = None

_MAX_AVALS = 4096  # distinct (shape, dtype) pairs remembered; past it, forgotten all at once
_avals = {}
_target = None  # (device, its SingleDeviceSharding), or False when the fast path is off


def put(host: np.ndarray) -> jax.Array:
    """``host`` (a NumPy array or scalar of a dtype the device holds) as a new
    array on the device."""
    target = _target if _target is not None else _start()
    if not target:
        return jax.device_put(host, runtime.jax_device())
    host = np.asarray(host)
    key = (host.shape, host.dtype)
    aval = _avals.get(key)
    if aval is None:
        if len(_avals) >= _MAX_AVALS:
            _avals.clear()
        aval = _avals[key] = _jax_core.ShapedArray(host.shape, host.dtype)
    device, sharding = target
    return _batched_put(aval, sharding, [host], [device])


def _start():
    """The device and its sharding, once; the fast path kept only if it gives
    what ``jax.device_put`` gives."""
    global _target
    device = runtime.jax_device()
    target = False
    if _batched_put is not None:
        sharding = jax.sharding.SingleDeviceSharding(device)
        try:
            probe = np.arange(3, dtype=np.int64)
            got = _batched_put(_jax_core.ShapedArray(probe.shape, probe.dtype), sharding, [probe], [device])
            if (isinstance(got, jax.Array) and got.dtype == probe.dtype and got.committed
                    and got.devices() == {device} and np.array_equal(np.asarray(got), probe)):
                target = (device, sharding)
        except Exception:  # noqa: BLE001 -- a JAX whose signature differs: device_put's path
            target = False
    _target = target
    return target


def fetch(values) -> list:
    """The host values (NumPy arrays) of a list of device arrays (or host
    values), as ``jax.device_get`` gives them.  device_get spends ~10 us of
    Python per array (its tree walk and profiler scopes around each copy); a
    pending check's few numbers cost ~1 us each read directly.  On an
    accelerator every copy is started first, so the transfers overlap."""
    if runtime.jax_device().platform != "cpu":
        for v in values:
            if isinstance(v, jax.Array):
                v.copy_to_host_async()
    return [np.asarray(v) for v in values]
