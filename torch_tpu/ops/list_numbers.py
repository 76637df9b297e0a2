"""A strict launch whose list of Python numbers travels as one array.

A ``_foreach_*`` op given a list of numbers (AdamW's per-parameter step
sizes and bias corrections, new every step) would pass each number to the
executable as its own argument: one host-to-device transfer per number on
every call, 56 per AdamW step on a 28-tensor model, and several hundred on a
real one.  ``launcher`` gives such a kernel's executable a stand-in that
packs the numbers into one float64 and one int64 array, as fused mode packs
a chain's numbers: each is read back inside the program as the weakly typed
scalar JAX makes of a Python number, so the program computes exactly what
the unpacked one does.  A fused chain nests the unpacked function
(``runtime.nestable``), and records the numbers itself.
"""
import operator

import numpy as np
from jax._src.lax.lax import _convert_element_type

from .. import runtime

# Fewer numbers than this in a call are not worth the stand-in's own Python
# work (~2 us a call, against ~1.5-2 us of transfer per number).
MIN_NUMBERS = 4
_PACKED = ((float, np.float64), (int, np.int64))  # (Python type, its pack's dtype): as fusion's packs


def launcher(fn, traced, numbers, n_inputs, sample, donate=()):
    """``fn`` (``device_jit(traced, donate_argnums=donate)``, maybe with compile
    options), or a stand-in that passes its list numbers packed.
    ``numbers``: (position in the flat inputs, Python type) of each number
    inside a list argument; ``n_inputs``: how many inputs every call passes;
    ``sample``: inputs of the first call (arrays or shape stand-ins, numbers as
    they are); ``donate``: flat positions of donated buffers."""
    packs = [[i for i, t in numbers if t is kind] for kind, _ in _PACKED]
    if sum(map(len, packs)) < MIN_NUMBERS:
        return fn
    return _Packed(fn, traced, packs, n_inputs, sample, donate)


def _getter(positions):
    """A callable giving the items at ``positions`` of a sequence, always as a tuple."""
    if len(positions) > 1:
        return operator.itemgetter(*positions)
    if positions:
        only = positions[0]
        return lambda xs: (xs[only],)
    return lambda xs: ()


class _Packed:
    """``fn(*inputs)`` with the list numbers packed (see the module)."""

    __slots__ = ("fn", "run", "rest", "packs", "__name__")

    def __init__(self, fn, traced, packs, n_inputs, sample, donate=()):
        numbered = {i for positions in packs for i in positions}
        rest = [i for i in range(n_inputs) if i not in numbered]
        donate = tuple(rest.index(i) for i in donate)  # (buffers: never numbers)
        used = [(positions, dtype) for positions, (_, dtype) in zip(packs, _PACKED) if positions]

        def unpacked(*xs):
            flat = [None] * n_inputs
            for i, x in zip(rest, xs):
                flat[i] = x
            for k, (positions, _) in enumerate(used):
                pack = xs[len(rest) + k]
                for j, i in enumerate(positions):  # the weakly typed scalar a Python number makes
                    flat[i] = _convert_element_type(pack[j], pack.dtype, weak_type=True)
            return traced(*flat)

        unpacked.__name__ = getattr(traced, "__name__", "op")
        self.__name__ = unpacked.__name__  # (names the op in logs)
        self.fn = fn
        self.rest = _getter(rest)
        self.packs = [(_getter(positions), dtype) for positions, dtype in used]
        packed_sample = [*self.rest(sample), *(np.zeros(len(p), d) for p, d in used)]
        self.run = runtime.small_program_jit(runtime.device_jit(unpacked, donate_argnums=donate), unpacked, packed_sample, donate)
        runtime.nests_as(self, fn)

    def __call__(self, *inputs):
        try:
            packs = [np.array(get(inputs), dtype) for get, dtype in self.packs]
        except (OverflowError, TypeError):  # an int past int64: JAX's own error, from the unpacked call
            return self.fn(*inputs)
        return self.run(*self.rest(inputs), *packs)
