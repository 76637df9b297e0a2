"""``TpuProfilerConfig``: the stable keys of Google torch_tpu's profiler
config, mapped onto ``jax.profiler.ProfileOptions``."""
import dataclasses
import os
import warnings

_DEFAULT_DIR = "tpu_profile"


@dataclasses.dataclass
class TpuProfilerConfig:
    """What to trace and where.

    device_tracer_level: 0 off, 1 on (JAX always records device activity;
        0 is accepted and noted in a warning).
    host_tracer_level: 0 off, 1 user annotations, 2 (default) + high-level
        runtime activity, 3 verbose.
    python_tracer_level: 0 (default) off, 1 traces Python calls (slow).
    run_dir: the folder for the trace; default ``TORCH_TPU_PROFILER_OUTPUT_DIR``
        or ``./tpu_profile``.
    worker_rank: under torchrun, each rank writes to ``run_dir/rank<k>``
        (default: the ``RANK`` variable when it is set).
    check_experimental_options: reject unknown keys passed through
        ``experimental`` (False: pass them to JAX's advanced configuration).
    """
    device_tracer_level: int = 1
    host_tracer_level: int = 2
    python_tracer_level: int = 0
    run_dir: str | None = None
    worker_rank: int | None = None
    check_experimental_options: bool = True
    experimental: dict = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        for key in ("device_tracer_level", "host_tracer_level", "python_tracer_level"):
            value = getattr(self, key)
            if not isinstance(value, int) or not 0 <= value <= 3:
                raise ValueError(f"TpuProfilerConfig.{key} must be an int in 0..3, got {value!r}")
        if self.experimental and self.check_experimental_options:
            raise ValueError(f"TpuProfilerConfig: unknown experimental options {sorted(self.experimental)}; "
                             "pass check_experimental_options=False to forward them to JAX")

    @classmethod
    def from_dict(cls, options: dict) -> "TpuProfilerConfig":
        known = {f.name for f in dataclasses.fields(cls)}
        extra = {k: v for k, v in options.items() if k not in known}
        return cls(**{k: v for k, v in options.items() if k in known},
                   experimental={**options.get("experimental", {}), **extra})

    def output_dir(self) -> str:
        base = self.run_dir or os.environ.get("TORCH_TPU_PROFILER_OUTPUT_DIR") or _DEFAULT_DIR
        rank = self.worker_rank
        if rank is None and "RANK" in os.environ and int(os.environ.get("WORLD_SIZE", "1")) > 1:
            rank = int(os.environ["RANK"])
        return os.path.join(base, f"rank{rank}") if rank is not None else base

    def jax_options(self):
        import jax
        options = jax.profiler.ProfileOptions()
        options.host_tracer_level = self.host_tracer_level
        options.python_tracer_level = self.python_tracer_level
        if self.device_tracer_level == 0:
            warnings.warn("TpuProfilerConfig(device_tracer_level=0): JAX's profiler always "
                          "records device activity", stacklevel=3)
        if self.experimental:
            options.advanced_configuration = {k: v for k, v in self.experimental.items()}
        return options
