"""``topology_aware_mesh``: a rank layout tensor for ``DeviceMesh("tpu", ...)``."""
import math

import torch


def _world_size():
    import torch.distributed as dist
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size()
    import os
    return int(os.environ.get("WORLD_SIZE", "1"))


def topology_aware_mesh(mesh_shape, *, dcn_mesh_shape=None, allow_split_physical_axes=False,
                        contiguous_submeshes=False):
    """An int64 tensor of ranks shaped ``mesh_shape`` (times ``dcn_mesh_shape``).

    Ranks are one process per device.  Without a physical interconnect to
    follow (the CPU), consecutive ranks fill the innermost axis, so inner
    axes stay within a host, which is what the ICI-first layout gives too.
    """
    shape = tuple(int(s) for s in mesh_shape)
    if dcn_mesh_shape is not None:
        dcn = tuple(int(s) for s in dcn_mesh_shape)
        if len(dcn) != len(shape):
            raise ValueError(f"dcn_mesh_shape {dcn} must have as many axes as mesh_shape {shape}")
        per_slice = math.prod(shape)
        # The slice (DCN) index is the outermost factor of every axis.
        inner = torch.arange(per_slice, dtype=torch.int64).reshape(shape)
        blocks = torch.arange(math.prod(dcn), dtype=torch.int64).reshape(dcn) * per_slice
        full = blocks.reshape(sum(([d, 1] for d in dcn), [])) + \
            inner.reshape(sum(([1, s] for s in shape), []))
        shape = tuple(d * s for d, s in zip(dcn, shape))
        mesh = full.reshape(shape)
    else:
        mesh = torch.arange(math.prod(shape), dtype=torch.int64).reshape(shape)
    world = _world_size()
    if mesh.numel() != world:
        raise ValueError(f"mesh of shape {shape} has {mesh.numel()} ranks but the world has {world}")
    return mesh
