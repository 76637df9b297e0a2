"""Running PyTorch's own device-generic test suites against tpu.

PyTorch instantiates each device-generic test class once per device type
(``instantiate_device_type_tests``).  Point PyTorch's ``TORCH_TEST_DEVICES``
variable at ``DEVICE_TYPE_FILE`` and the tpu classes come from tpu's own test
base (``device_type.py``), which skips the tests of features tpu does not
support (quantized, sparse COO, complex32) as PyTorch's skip decorators do::

    TORCH_TEST_DEVICES=$(python -m torch_tpu.testing) pytest test/test_view_ops.py
"""
import os

DEVICE_TYPE_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "device_type.py")
