"""Which JAX platform backs the tpu device, read without importing JAX (the
device's hooks answer ``torch.accelerator.is_available()`` from it at every
optimizer step, loaded or not: see loading.py)."""
import os

from .install_hints import installed


def platform_name() -> str:
    """The JAX platform we will use (without starting it)."""
    requested = os.environ.get("TORCH_TPU_PLATFORM", "").strip().lower()
    if requested in ("cuda", "rocm"):
        requested = "gpu"
    if requested:
        if requested not in ("tpu", "gpu", "cpu"):
            raise RuntimeError(
                f"TORCH_TPU_PLATFORM={requested!r} is not one of 'tpu', 'gpu', 'cpu'")
        return requested
    if installed("libtpu"):
        return "tpu"
    return "cpu"


def platform_installed() -> bool:
    """Whether the chosen platform's PJRT plugin is installed (nothing is started)."""
    name = platform_name()
    if name == "cpu":
        return True
    if name == "tpu":
        return installed("libtpu")
    return any(map(installed, ("jax_cuda13_plugin", "jax_cuda12_plugin", "jax_rocm60_plugin", "jax_rocm7_plugin")))
