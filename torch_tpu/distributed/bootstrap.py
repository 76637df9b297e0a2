"""Starting JAX's multi-process runtime for the default process group.

Rank 0 picks a free port for JAX's coordination service and publishes it in
the c10d store, so torchrun's MASTER_ADDR/MASTER_PORT rendezvous is the only
one the user configures.  Each rank then publishes which jax device it drives;
every group's mesh is built from that table.
"""
import os
import socket
import warnings

import jax

from .. import runtime

_state = {"transport": None, "reason": "", "devices": None, "store": None}


def transport():
    return _state["transport"]


def reason():
    return _state["reason"]


def device_of_rank(global_rank):
    return _state["devices"][global_rank]


def store():
    """The default group's c10d store (every rank's), or None before start."""
    return _state["store"]


def _free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def _distributed_client():
    from jax._src import distributed
    return distributed.global_state.client


def _backend_started():
    from jax._src import xla_bridge
    return xla_bridge.backends_are_initialized()


def _use_gloo(why):
    _state.update(transport="gloo", reason=why, devices=None)
    return "gloo"


def start(store, rank, world, timeout_s):
    """Bring up the runtime the world group uses; returns "xla" or "gloo"."""
    forced = os.environ.get("TORCH_TPU_DIST_TRANSPORT", "").strip().lower()
    if forced == "gloo":
        return _use_gloo("TORCH_TPU_DIST_TRANSPORT=gloo")
    if world > 1 and _distributed_client() is None:
        if _backend_started():
            why = ("the JAX runtime was already started in this process before "
                   "init_process_group, and jax.distributed.initialize must come first")
            warnings.warn(f"tpu_dist: collectives will go through Gloo on CPU copies: {why}. "
                          "Call init_process_group before touching tpu tensors.", stacklevel=3)
            return _use_gloo(why)
        # XLA's CPU client only does cross-process collectives with this set.
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        if rank == 0:
            host = os.environ.get("MASTER_ADDR", "127.0.0.1")
            store.set("tpu_dist/coordinator", f"{host}:{_free_port()}")
        address = store.get("tpu_dist/coordinator").decode()
        seconds = max(1, int(timeout_s))
        jax.distributed.initialize(address, world, rank, initialization_timeout=seconds,
                                   shutdown_timeout_seconds=min(seconds, 60))
    device = runtime.jax_device()
    if world > 1 and device not in jax.local_devices():
        raise RuntimeError(
            f"tpu_dist: rank {rank} drives {device}, which belongs to another process; "
            "set LOCAL_RANK (torchrun does) so each process picks its own device")
    store.set(f"tpu_dist/device/{rank}", str(device.id))
    by_id = {d.id: d for d in jax.devices(device.platform)}
    devices = [by_id[int(store.get(f"tpu_dist/device/{r}").decode())] for r in range(world)]
    if len(set(devices)) != world:
        raise RuntimeError(f"tpu_dist: two ranks drive the same device: {devices}")
    _state.update(transport="xla", reason="", devices=devices, store=store)
    return "xla"
