"""One log line for each thing that makes tpu code slower than it looks:
recompilations, CPU fallbacks and host synchronizations.

    TORCH_TPU_LOGS=recompiles,fallback,sync python train.py   # or "all"
    TORCH_TPU_LOGS=+recompiles ...    # "+": also first compiles of each op

Each kind is an ordinary Python logger, so ``logging`` can turn it on too
(``logging.getLogger("torch_tpu.sync").setLevel(logging.INFO)`` plus a
handler); ``torch_tpu.logs.enable("sync")`` does both.

  torch_tpu.recompiles  fused-eager chains compiled (a cache miss), a
                        torch.compile graph compiled again for new shapes, an
                        op compiled for another signature (DEBUG: every op's
                        first compile too)
  torch_tpu.fallback    every call of an op that ran on the CPU, with shapes
  torch_tpu.sync        reads of device values by the host (.item(), .cpu(),
                        printing) and fused-chain flushes, with the user line

Hooks call these functions only after a cheap ``isEnabledFor`` check (or on
paths that are already slow), so nothing changes when the logs are off.
Dynamo's own guard failures are PyTorch's: ``TORCH_LOGS=recompiles``.
"""
import collections
import logging
import os
import sys

INFO, DEBUG = logging.INFO, logging.DEBUG

recompiles_log = logging.getLogger("torch_tpu.recompiles")
fallback_log = logging.getLogger("torch_tpu.fallback")
sync_log = logging.getLogger("torch_tpu.sync")
KINDS = {"recompiles": recompiles_log, "fallback": fallback_log, "sync": sync_log}

_handler = None
_PKG_DIR = os.path.dirname(os.path.abspath(__file__))
_TORCH_DIR = None


def enable(*names, stream=None) -> None:
    """Turn on the named kinds ("recompiles", "fallback", "sync", "all"; a "+"
    prefix means DEBUG) with one stderr handler."""
    global _handler
    if _handler is None:
        _handler = logging.StreamHandler(stream or sys.stderr)
        _handler.setFormatter(logging.Formatter("[%(name)s] %(message)s"))
    for raw in names:
        raw = raw.strip()
        if not raw:
            continue
        level = DEBUG if raw.startswith("+") else INFO
        name = raw.lstrip("+").lower()
        targets = list(KINDS.values()) if name == "all" else [KINDS.get(name)]
        if targets == [None]:
            raise ValueError(f"TORCH_TPU_LOGS: unknown log {name!r}; expected "
                             f"{', '.join(KINDS)} or all (a '+' prefix adds DEBUG lines)")
        for log in targets:
            log.setLevel(level)
            if _handler not in log.handlers:
                log.addHandler(_handler)
            log.propagate = False  # one line each, not again through the root logger


def disable() -> None:
    for log in KINDS.values():
        log.setLevel(logging.NOTSET)
        if _handler in log.handlers:
            log.removeHandler(_handler)
        log.propagate = True


def install() -> None:
    setting = os.environ.get("TORCH_TPU_LOGS", "")
    if setting.strip():
        enable(*setting.split(","))


# ---- describing what happened ------------------------------------------------

def _user_site() -> str:
    """file:line of the first frame outside torch and torch_tpu (the user's code)."""
    global _TORCH_DIR
    if _TORCH_DIR is None:
        import torch
        _TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__))
    frame = sys._getframe(1)
    while frame is not None:
        path = frame.f_code.co_filename
        if not (path.startswith((_PKG_DIR, _TORCH_DIR, "<frozen"))
                or os.sep + "jax" in path or "contextlib" in path):
            return f"{os.path.basename(path)}:{frame.f_lineno} in {frame.f_code.co_name}"
        frame = frame.f_back
    return "?"


def _describe(x) -> str:
    shape = getattr(x, "shape", None)
    if shape is None:
        return repr(x) if isinstance(x, (int, float, bool)) else type(x).__name__
    dtype = str(getattr(x, "dtype", "")).replace("torch.", "")
    device = getattr(getattr(x, "device", None), "type", None)
    where = f" {device}" if device and device != "tpu" else ""
    return f"{tuple(shape)} {dtype}{where}"


def _describe_args(args, kwargs=None, limit=6) -> str:
    import torch
    flat = []
    for a in list(args) + list((kwargs or {}).values()):
        if isinstance(a, (list, tuple)) and a and isinstance(a[0], torch.Tensor):
            flat.extend(a)
        elif isinstance(a, torch.Tensor):
            flat.append(a)
    parts = [_describe(t) for t in flat[:limit]]
    if len(flat) > limit:
        parts.append(f"... ({len(flat)} tensors)")
    return ", ".join(parts) or "no tensors"


def kernel_compile(kernel, args, kwargs) -> None:
    """An op's kernel is being compiled for a new signature (registry miss path)."""
    n = len(kernel.cache)
    if n == 0:
        if recompiles_log.isEnabledFor(DEBUG):
            recompiles_log.debug("%s: first compile for %s", kernel.name, _describe_args(args, kwargs))
    elif recompiles_log.isEnabledFor(INFO):
        recompiles_log.info("%s: recompiling for a new signature %s (%d compiled before) at %s",
                            kernel.name, _describe_args(args, kwargs), n, _user_site())


def fused_compile(nodes, external, seconds, reason, cached) -> None:
    """A fused-eager chain missed the cache and was compiled."""
    if not recompiles_log.isEnabledFor(INFO):
        return
    counts = collections.Counter(getattr(n.fn, "__name__", "?") for n in nodes)
    ops = ", ".join(f"{name} x{c}" if c > 1 else name for name, c in counts.most_common(6))
    if len(counts) > 6:
        ops += f", ... ({len(counts)} kinds)"
    shapes = collections.Counter(_describe(x) for x in external if hasattr(x, "shape"))
    inputs = ", ".join(f"{s} x{c}" if c > 1 else s for s, c in shapes.most_common(4))
    recompiles_log.info("fused chain of %d ops compiled in %.2fs (cache miss #%d, flushed by %s) "
                        "ops: %s; inputs: %s", len(nodes), seconds, cached, reason, ops, inputs or "none")


def graph_compile(name, shapes, seconds, first) -> None:
    """A torch.compile graph was compiled for inputs of these shapes."""
    level = DEBUG if first else INFO
    if recompiles_log.isEnabledFor(level):
        shapes = [tuple(s) for s in shapes]
        recompiles_log.log(level, "torch.compile %s graph %s for input shapes %s (%.2fs)", name,
                           "compiled" if first else "recompiled", shapes, seconds)


def fallback(name, args, kwargs) -> None:
    if fallback_log.isEnabledFor(INFO):
        fallback_log.info("%s ran on the CPU (no tpu kernel; copies in and out) for %s at %s",
                          name, _describe_args(args, kwargs), _user_site())


def host_read(t, what) -> None:
    """A device-to-host copy (``what``: .item() or .cpu()): the host waits."""
    if sync_log.isEnabledFor(INFO):
        sync_log.info("host read of %s tensor via %s at %s (waits for the device)",
                      _describe(t), what, _user_site())


def fused_flush(n_ops, reason) -> None:
    if sync_log.isEnabledFor(INFO):
        sync_log.info("fused chain of %d ops runs now (%s) at %s", n_ops, reason, _user_site())
