"""The TPU generations the lowering check targets, and lowering for one of
them on a machine that has none.

Pallas kernels lower through Mosaic, whose rules depend on the chip (tiling,
supported ops and dtypes); the lowering asks JAX for the current device's
kind and refuses "cpu".  JAX's public abstract-mesh API carries a chip
instead: inside ``jax.sharding.use_abstract_mesh`` with an ``AbstractDevice``
the Pallas lowering reads that device's kind.  The device-kind strings are the
ones a real chip reports (``jax.devices()[0].device_kind``); this module is
the one place that names them, and tests/test_lowering_check.py fails if JAX
stops recognising them.
"""
import contextlib
import dataclasses

import jax


@dataclasses.dataclass(frozen=True)
class Chip:
    name: str          # what users pass: "v5e"
    device_kind: str   # what the chip's PJRT device reports
    cores: int         # TensorCores per JAX device (2 where megacore joins them)


CHIPS = {c.name: c for c in (
    Chip("v4", "TPU v4", 2),
    Chip("v5e", "TPU v5 lite", 1),
    Chip("v5p", "TPU v5", 2),
    Chip("v6e", "TPU v6 lite", 1),
    Chip("v7x", "TPU7x", 1),
)}
DEFAULT_CHIPS = ("v4", "v5e", "v5p", "v6e")


def chip(name) -> Chip:
    if isinstance(name, Chip):
        return name
    key = str(name).lower().removeprefix("tpu").strip(" _-")
    if key in ("v5litepod", "v5lite"):
        key = "v5e"
    if key in ("7x", "ironwood"):
        key = "v7x"
    found = CHIPS.get(key)
    if found is None:
        raise ValueError(f"unknown TPU generation {name!r}; expected one of {', '.join(CHIPS)}")
    return found


@contextlib.contextmanager
def lowering_for(c: Chip):
    """Trace and lower as for one device of chip ``c`` (no TPU needed)."""
    device = jax.sharding.AbstractDevice(device_kind=c.device_kind, num_cores=c.cores, platform="tpu")
    mesh = jax.sharding.AbstractMesh((1,), ("chip",), (jax.sharding.AxisType.Auto,),
                                     abstract_device=device)
    with jax.sharding.use_abstract_mesh(mesh):
        yield
