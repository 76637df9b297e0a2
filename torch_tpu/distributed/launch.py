"""Launch helpers of ``torch.tpu.distributed`` (names as in Google's torch_tpu).

``set_tpu_launch_env`` runs in the parent before torchrun / mp.spawn and
exports what the workers need; ``python -m torch_tpu.distributed`` prints it
for shell launchers (``eval $(...)``).
"""
import os
import socket

_BASE_PORT = 8476


def _hosts():
    names = [h for h in os.environ.get("TPU_WORKER_HOSTNAMES", "").split(",") if h]
    return names


def _local_devices():
    n = os.environ.get("TORCH_TPU_DEVICES_PER_HOST")
    if n:
        return int(n)
    from .. import runtime
    if runtime.platform_name() == "cpu":
        return 1  # one CPU "chip" per host unless told otherwise
    import jax
    return max(1, jax.local_device_count())


def launch_env(*, nnodes=None, nproc_per_node=None):
    """The launch variables as a dict (nothing is exported)."""
    hosts = _hosts()
    multi = len(hosts) > 1 or "JOB_COMPLETION_INDEX" in os.environ
    nnodes = nnodes or (len(hosts) if len(hosts) > 1 else int(os.environ.get("NNODES", "1")))
    nproc = nproc_per_node or _local_devices()
    base = int(os.environ.get("TORCH_TPU_BASE_PORT", _BASE_PORT))
    node_rank = int(os.environ.get("JOB_COMPLETION_INDEX", os.environ.get("NODE_RANK", "0")))
    names = hosts if multi and hosts else [socket.gethostname()] * nnodes
    addrs = [f"{names[n]}:{base + i}" for n in range(nnodes) for i in range(nproc)]
    env = {
        "TORCH_TPU_SLICEBUILDER_ADDRESSES": ",".join(addrs),
        "TORCH_TPU_TOPOLOGY": _topology(nnodes * nproc),
        "TORCH_TPU_XPROF_SESSION_ID": os.environ.get("TORCH_TPU_XPROF_SESSION_ID", str(os.getpid())),
        "WORLD_SIZE": str(nnodes * nproc),
        "NODE_RANK": str(node_rank),
    }
    if multi:
        env.update(NNODES=str(nnodes), MASTER_ADDR=names[0],
                   MASTER_PORT=os.environ.get("MASTER_PORT", "29500"))
    return env


def _topology(n):
    # Small slices are 2-D chip grids; anything else is laid out as a line.
    return {1: "1,1,1", 2: "2,1,1", 4: "2,2,1", 8: "2,4,1"}.get(n, f"{n},1,1")


def set_tpu_launch_env(*, nnodes=None, nproc_per_node=None):
    """Export the launch variables into ``os.environ`` (call in the parent)."""
    env = launch_env(nnodes=nnodes, nproc_per_node=nproc_per_node)
    os.environ.update(env)
    return env
