"""Registering ``tpu_dist`` (alias ``tpu``) as a c10d backend (at ``import torch``:
the first group loads torch_tpu)."""
from datetime import timedelta

import torch.distributed as dist

from .. import loading

NAME = "tpu_dist"
ALIASES = ("tpu",)


def _create(opts, backend_options=None):
    loading.load()
    from . import bootstrap
    from .process_group import ProcessGroupTpu
    timeout = opts.timeout if isinstance(opts.timeout, timedelta) else timedelta(seconds=opts.timeout)
    ranks = list(opts.global_ranks_in_group)
    if not ranks:  # the default group: bring up the device runtime first
        bootstrap.start(opts.store, opts.group_rank, opts.group_size, timeout.total_seconds())
    return ProcessGroupTpu(opts.store, opts.group_rank, opts.group_size, timeout, ranks)


def register() -> None:
    if not dist.is_available() or NAME.upper() in dist.Backend._plugins:
        return
    # Claims the tpu device for init_process_group() with no backend; the
    # group also serves cpu tensors, so one backend covers a whole script.
    dist.Backend.register_backend(NAME, _create, extended_api=True, devices=["tpu", "cpu"])
    for alias in ALIASES:
        dist.Backend.register_backend(alias, _create, extended_api=True, devices=["tpu", "cpu"])
