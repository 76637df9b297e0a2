"""The JAX releases torch_tpu supports, checked at import.

torch_tpu uses JAX APIs of recent releases (jax.shard_map, jax.export,
Pallas TPU's interpret and abstract-device machinery); it is tested on
jax 0.10.2 (CPU) and on the 0.11 releases accelerator images carry.  Keep
this range and pyproject.toml's in step.
"""
import re

SUPPORTED_JAX = ((0, 10), (0, 12))  # [lowest, first unsupported)
SUPPORTED_TEXT = "jax>=0.10,<0.12"


def _release(version: str) -> tuple:
    m = re.match(r"(\d+)\.(\d+)", version)
    if m is None:
        raise ImportError(f"torch_tpu: cannot read the JAX version {version!r}")
    return int(m.group(1)), int(m.group(2))


def check(version: str = None) -> None:
    """ImportError naming the supported range when JAX is older than it
    supports; a newer JAX only warns (it may work, it is untested)."""
    if version is None:
        import jax
        version = jax.__version__
    release = _release(version)
    if release < SUPPORTED_JAX[0]:
        raise ImportError(
            f"torch_tpu needs {SUPPORTED_TEXT}, but jax {version} is installed. "
            f'Upgrade it: pip install "{SUPPORTED_TEXT}" (with libtpu or the CUDA plugin: '
            'pip install "torch_tpu[tpu]" / "torch_tpu[cuda12]" / "torch_tpu[cuda13]")')
    if release >= SUPPORTED_JAX[1]:
        import warnings
        warnings.warn(f"torch_tpu is tested with {SUPPORTED_TEXT}; jax {version} is newer and untested",
                      stacklevel=3)
