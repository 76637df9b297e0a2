"""The device random stream: (seed, counter) -> a fresh JAX key per random op.

``torch.manual_seed(s)`` calls ``torch.tpu.manual_seed_all(s)``, which resets
it, so device random numbers are reproducible run to run.  A ``torch.Generator``
passed to a random op (a CPU one, or a tpu one) seeds that op from its own stream.
"""
import os
import threading

import numpy as np
import torch

# the seed of torch.tpu.default_generators[0]'s own CPU generator, which marks
# it as the default stream (device/generator.py)
DEFAULT_GENERATOR_MARK = 0x5EED_7D0_DEFA_17

_lock = threading.Lock()
_state = {"seed": 0, "offset": 0}


def manual_seed(seed: int) -> None:
    with _lock:
        _state["seed"] = int(seed) & 0xFFFFFFFFFFFFFFFF
        _state["offset"] = 0


def seed() -> int:
    """Seed the device stream from OS entropy (like torch.cuda.seed)."""
    s = int.from_bytes(os.urandom(8), "little") >> 1
    manual_seed(s)
    return s


def initial_seed() -> int:
    return _state["seed"]


def get_state() -> torch.Tensor:
    with _lock:
        return torch.tensor([_state["seed"] & (2**63 - 1), _state["offset"]], dtype=torch.int64).view(torch.uint8)


def set_state(state: torch.Tensor) -> None:
    values = state.detach().cpu().contiguous().view(torch.int64).tolist()
    with _lock:
        _state["seed"], _state["offset"] = int(values[0]), int(values[1])


def next_key_material(generator=None) -> np.ndarray:
    """(seed, counter) for one random op, as a uint32 pair for jax.random."""
    if generator is not None and generator.initial_seed() != DEFAULT_GENERATOR_MARK:  # a CPU generator, or a tpu one (CPU-backed: device/generator.py)
        s = int(torch.randint(0, 2**62, (1,), generator=generator).item())
        return np.array([s % 2**32, s >> 32, 0], dtype=np.uint32)
    with _lock:
        s, o = _state["seed"], _state["offset"]
        _state["offset"] = o + 1
    return np.array([s % 2**32, (s >> 32) % 2**32, o % 2**32], dtype=np.uint32)
