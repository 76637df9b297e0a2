"""Which install extra brings the accelerator's JAX plugin, for the env
report and start-up errors: ``torch_tpu[tpu]`` (libtpu), ``torch_tpu[cuda12]``
or ``torch_tpu[cuda13]`` (JAX's CUDA plugin, chosen by the NVIDIA driver)."""
import functools
import glob
import importlib.util
import os
import re


def tpu_attached() -> bool:
    """A TPU VM: accelerator device files, or the TPU runtime's variables."""
    return bool(glob.glob("/dev/accel*") or glob.glob("/dev/vfio/[0-9]*")
                or os.environ.get("TPU_ACCELERATOR_TYPE") or os.environ.get("TPU_WORKER_HOSTNAMES"))


def nvidia_driver():
    """The NVIDIA kernel driver's version, e.g. (580, 65), or None."""
    try:
        with open("/proc/driver/nvidia/version") as f:
            text = f.read()
    except OSError:
        return None
    m = re.search(r"Kernel Module\s+(?:for \S+\s+)?(\d+)\.(\d+)", text) or re.search(r"\s(\d{3})\.(\d+)", text)
    return (int(m.group(1)), int(m.group(2))) if m else None


def cuda_extra(driver=None) -> str:
    # CUDA 13 needs driver 580 or newer; older drivers run the CUDA 12 plugin
    driver = driver if driver is not None else nvidia_driver()
    return "cuda13" if driver is not None and driver >= (580, 0) else "cuda12"


# Asked once per module: torch.accelerator.is_available() reaches
# runtime.platform_installed() (through device.module.is_available) until the
# device starts, and PyTorch's optimizers ask it every step, in every process
# that imports torch (the backend autoloads): a find_spec scans sys.path each
# time, ~30 us a step of a CPU training loop.
@functools.lru_cache(maxsize=None)
def installed(module: str) -> bool:
    """Whether ``module`` can be imported (looked up once per process)."""
    return importlib.util.find_spec(module) is not None


def hint(platform: str):
    """A sentence on what to install or set when ``platform`` (the one in
    use) is likely not the one this machine's hardware wants; None if fine."""
    gpu_plugin = any(installed(m) for m in ("jax_cuda13_plugin", "jax_cuda12_plugin"))
    if platform == "cpu":
        if tpu_attached():
            return ('a TPU seems attached but the CPU platform runs the tpu device: '
                    'pip install "torch_tpu[tpu]" (libtpu)')
        if nvidia_driver() is not None:
            if gpu_plugin:
                return "an NVIDIA GPU is here: set TORCH_TPU_PLATFORM=gpu to run on it"
            return (f'an NVIDIA GPU is here: pip install "torch_tpu[{cuda_extra()}]" '
                    "and set TORCH_TPU_PLATFORM=gpu to run on it")
        return None
    if platform == "gpu" and not gpu_plugin:
        return (f'no JAX CUDA plugin is installed: pip install "torch_tpu[{cuda_extra()}]" '
                "(cuda13 for NVIDIA driver 580 or newer, else cuda12)")
    if platform == "tpu" and not installed("libtpu"):
        return 'libtpu is not installed: pip install "torch_tpu[tpu]"'
    return None
