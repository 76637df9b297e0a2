"""Capturing an XLA device trace with ``jax.profiler`` around tpu code."""
import contextlib
import os

from .config import TpuProfilerConfig

_active = None  # the TpuProfilerConfig being traced


def is_tracing() -> bool:
    return _active is not None


def _config(config=None, **overrides) -> TpuProfilerConfig:
    if config is None:
        return TpuProfilerConfig.from_dict(overrides)
    if isinstance(config, dict):
        return TpuProfilerConfig.from_dict({**config, **overrides})
    if isinstance(config, TpuProfilerConfig):
        return TpuProfilerConfig.from_dict({**config.__dict__, **overrides}) if overrides else config
    raise TypeError(f"expected a TpuProfilerConfig or a dict, got {type(config).__name__}")


def start(config=None, **overrides) -> str:
    """Start a device trace; returns the folder it will be written to."""
    global _active
    import jax
    if _active is not None:
        raise RuntimeError("torch.tpu.profiler: a trace is already running; stop() it first")
    cfg = _config(config, **overrides)
    folder = cfg.output_dir()
    os.makedirs(folder, exist_ok=True)
    _flush_device()  # earlier work must not land in this trace
    jax.profiler.start_trace(folder, profiler_options=cfg.jax_options())
    _active = cfg
    return folder


def stop() -> list:
    """Wait for queued tpu work, stop the trace; returns the files written."""
    global _active
    import jax
    if _active is None:
        raise RuntimeError("torch.tpu.profiler: no trace is running")
    folder = _active.output_dir()
    try:
        _flush_device()
    finally:
        _active = None
        before = set(_files(folder))
        jax.profiler.stop_trace()
    return sorted(set(_files(folder)) - before) or sorted(_files(folder))


def _flush_device() -> None:
    from ..eager import sync
    sync.wait_all()


def _files(folder):
    for root, _, names in os.walk(folder):
        for name in names:
            yield os.path.join(root, name)


class profile(contextlib.ContextDecorator):
    """``with torch.tpu.profiler.profile(TpuProfilerConfig(run_dir=...)) as p:``;
    afterwards ``p.files`` lists the trace files (``*.xplane.pb``,
    ``*.trace.json.gz``) and ``p.run_dir`` their folder."""

    def __init__(self, config=None, **overrides):
        self.config = _config(config, **overrides)
        self.run_dir = self.config.output_dir()
        self.files = []

    def __enter__(self):
        self.run_dir = start(self.config)
        return self

    def __exit__(self, *exc):
        self.files = stop()
        return False


def trace(run_dir=None, **config) -> profile:
    """``with torch.tpu.profiler.trace("./trace"):`` -- a device trace into ``run_dir``."""
    return profile(None, run_dir=run_dir, **config)
