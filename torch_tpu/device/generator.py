"""``torch.Generator(device="tpu")``.

PyTorch makes a device generator through the backend hook's
``getNewGenerator``, which the Python hooks of torch 2.13 cannot provide, so
the call raises NotImplementedError (diffusers' usual
``torch.Generator(device).manual_seed(0)`` among others).  A tpu generator
here is a CPU generator that reports ``device`` tpu: the tpu random kernels
take one 64-bit seed from whatever generator they are given, so the same
``manual_seed`` gives the same tpu numbers, and its state saves and restores
like any generator's.  (Ops on CPU tensors that are handed one draw from it
too, where PyTorch would refuse a CUDA generator.)

``torch.Generator`` becomes a thin subclass whose constructor sends tpu to
that generator and everything else to PyTorch's; ``isinstance`` keeps
accepting every generator, including those PyTorch makes in C++.
"""
import torch

from . import rng

_TorchGenerator = torch._C.Generator


class _AnyGenerator(type(_TorchGenerator)):
    def __instancecheck__(cls, obj):
        if cls is Generator:
            return isinstance(obj, _TorchGenerator)
        return super().__instancecheck__(obj)

    def __subclasscheck__(cls, sub):
        if cls is Generator:
            return issubclass(sub, _TorchGenerator)
        return super().__subclasscheck__(sub)


class TpuGenerator(_TorchGenerator):
    """A random generator for tpu ops (see the module docstring)."""

    def __new__(cls, index=0):
        self = super().__new__(cls)
        self._index = index
        return self

    @property
    def device(self):
        return torch.device("tpu", self._index)

    def __reduce__(self):
        return _rebuild, (self._index, self.get_state())

    def __repr__(self):
        return f"<torch.Generator device={self.device}>"


class DefaultGenerator(TpuGenerator):
    """``torch.tpu.default_generators[0]``: the device's default random stream
    (the one ``torch.tpu.manual_seed`` seeds), as a generator object."""

    def __new__(cls, index=0):
        self = super().__new__(cls, index)
        # Ops receive a generator back as a plain torch._C.Generator (the
        # subclass is lost), so the C++ side carries the mark: a seed no other
        # generator is given (this class's manual_seed never reseeds it).
        _TorchGenerator.manual_seed(self, rng.DEFAULT_GENERATOR_MARK)
        return self

    def manual_seed(self, seed):
        rng.manual_seed(seed)
        return self

    def seed(self):
        return rng.seed()

    def initial_seed(self):
        return rng.initial_seed()

    def get_state(self):
        return rng.get_state()

    def set_state(self, state):
        rng.set_state(state)
        return self

    def __reduce__(self):
        return _default, (self._index,)


def _default(index):
    return default_generators[index]


def _rebuild(index, state):
    generator = TpuGenerator(index)
    generator.set_state(state)
    return generator


class Generator(_TorchGenerator, metaclass=_AnyGenerator):
    __doc__ = _TorchGenerator.__doc__

    def __new__(cls, device=None):
        if cls is Generator and device is not None:
            device = torch.device(device)
            if device.type == "tpu":
                return TpuGenerator(_checked_index(device))
        if cls is Generator:  # PyTorch's own generator, of its own type
            return _TorchGenerator() if device is None else _TorchGenerator(device)
        return super().__new__(cls) if device is None else super().__new__(cls, device)


def _checked_index(device) -> int:
    index = 0 if device.index is None else device.index
    count = torch.tpu.device_count()
    if not 0 <= index < count:
        raise RuntimeError(f"Invalid device index {index} for tpu: {count} device(s) available")
    return index


def install() -> None:
    torch.Generator = Generator


default_generators = (DefaultGenerator(0),)  # one device per process
