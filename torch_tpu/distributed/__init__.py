"""Distributed training on tpu: the ``tpu_dist`` c10d backend and
``torch.tpu.distributed`` (launch env, mesh helpers, ``spmd_safe``)."""
import sys
import types

from .launch import launch_env, set_tpu_launch_env  # noqa: F401
from .mesh import topology_aware_mesh  # noqa: F401
from .spmd import spmd_safe  # noqa: F401


def _public_module():
    mod = types.ModuleType("torch.tpu.distributed", __doc__)
    mod.set_tpu_launch_env = set_tpu_launch_env
    mod.topology_aware_mesh = topology_aware_mesh
    mod.spmd_safe = spmd_safe
    mod.launch_env = launch_env
    mod.window_num_stripes = 1  # DMA striping knobs: no effect off TPU
    mod.window_stripe_chunk_mb = 4
    return mod


def install() -> None:
    from ..device import module as tpu_module

    mod = _public_module()
    tpu_module.distributed = mod
    sys.modules["torch.tpu.distributed"] = mod
