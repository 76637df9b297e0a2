"""tpu's device-type test base, for PyTorch's ``TORCH_TEST_DEVICES``.

PyTorch's ``common_device_type`` runs each file named in ``TORCH_TEST_DEVICES``
while it is imported (``runpy``, with its own globals) and adds the file's
``TEST_CLASS`` to the device types every device-generic test class is
instantiated for.  ``TEST_CLASS`` here is PyTorch's PrivateUse1 base with two
additions:

- a test whose dtype (or one of its dtypes) is complex32 or a quantized dtype
  is skipped before it runs: tpu has no such dtype;
- a test that reaches a feature tpu does not support (quantized or sparse COO
  tensors, complex32: torch_tpu raises ``UnsupportedOnTpu`` for exactly these)
  ends as skipped, with the refusal as its reason.  Only that exception type
  is turned into a skip, and so is a failure that follows such a refusal
  caught inside the test (PyTorch's tests catch it as a RuntimeError, then
  assert what a device with the feature would do); every other error fails
  the test as before;
- ``assertEqual`` compares the values of tpu tensors on the CPU, as PyTorch
  itself does for MPS tensors: shape, dtype, device, layout and strides are
  checked on the tensors as they are, then both are copied to the CPU and
  compared there by PyTorch's CPU kernels.  The comparison's own ops (isnan,
  abs, sub, le... on each new shape and dtype) were most of the XLA compiles
  of a suite test, and a tpu bug in one of them could hide a wrong result.

The autoloaded backend already made PyTorch add its generic PrivateUse1 base;
this one replaces it, so each test class has one tpu twin, always named
``...TPU`` (the generic base is named ``...PRIVATEUSE1`` until the first
instantiated class renames it).
"""
import functools
import inspect
import unittest

import torch
from torch.testing._comparison import TensorLikePair

from torch_tpu.unsupported import UnsupportedOnTpu

# a skip's reason starts with this (tests/tools/pytorch_suites.py counts these skips apart)
SKIP_REASON_PREFIX = "not supported on tpu: "
UNSUPPORTED_DTYPES = frozenset({torch.complex32, torch.quint8, torch.qint8, torch.qint32, torch.quint4x2,
                                torch.quint2x4})

if "PrivateUse1TestBase" in globals():  # run by common_device_type, as TORCH_TEST_DEVICES asks
    _RUN_BY_PYTORCH = True
    _GenericBase = globals()["PrivateUse1TestBase"]
else:  # imported as a module
    from torch.testing._internal.common_device_type import PrivateUse1TestBase as _GenericBase
    _RUN_BY_PYTORCH = False


def _test_dtypes(instantiated):
    """The dtype(s) PyTorch bound to an instantiated test (its ``param_kwargs``)."""
    param = inspect.signature(instantiated, follow_wrapped=False).parameters.get("param_kwargs")
    kwargs = param.default if param is not None and isinstance(param.default, dict) else {}
    found = kwargs.get("dtypes", kwargs.get("dtype"))
    return list(found) if isinstance(found, (list, tuple)) else [found]


def _skipping_unsupported(instantiated):
    unsupported = [d for d in _test_dtypes(instantiated) if d in UNSUPPORTED_DTYPES]
    if unsupported:
        return unittest.skip(f"{SKIP_REASON_PREFIX}the tpu device has no dtype {unsupported[0]}")(instantiated)

    @functools.wraps(instantiated)
    def run(self, *args, **kwargs):
        UnsupportedOnTpu.latest = None
        try:
            return instantiated(self, *args, **kwargs)
        except UnsupportedOnTpu as refusal:
            raise unittest.SkipTest(f"{SKIP_REASON_PREFIX}{refusal}") from refusal
        except unittest.SkipTest:
            raise
        except Exception as failure:
            # a refusal the test caught (as a RuntimeError) and then failed on: the test needed the feature
            refusal = UnsupportedOnTpu.latest
            if refusal is None:
                raise
            raise unittest.SkipTest(f"{SKIP_REASON_PREFIX}{refusal} (caught inside the test, which then failed: "
                                    f"{type(failure).__name__})") from failure
    return run


_equalize_attributes = TensorLikePair._equalize_attributes


def _equalize_on_the_cpu(pair, actual, expected):
    # called after the attributes were compared (TensorLikePair.compare)
    if actual.device.type == TPUTestBase.device_type or expected.device.type == TPUTestBase.device_type:
        actual, expected = actual.cpu(), expected.cpu()
    return _equalize_attributes(pair, actual, expected)


class TPUTestBase(_GenericBase):
    """PyTorch's PrivateUse1 test base, skipping what tpu does not support."""
    device_type = torch._C._get_privateuse1_backend_name()

    @classmethod
    def instantiate_test(cls, name, test, *, generic_cls=None):
        before = set(cls.__dict__)
        super().instantiate_test(name, test, generic_cls=generic_cls)
        for added in set(cls.__dict__) - before:
            setattr(cls, added, _skipping_unsupported(cls.__dict__[added]))


TEST_CLASS = TPUTestBase
TensorLikePair._equalize_attributes = _equalize_on_the_cpu

if _RUN_BY_PYTORCH:
    _bases = globals()["device_type_test_bases"]  # the list TEST_CLASS is appended to next
    if _GenericBase in _bases:
        _bases.remove(_GenericBase)
