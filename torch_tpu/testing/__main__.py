"""``python -m torch_tpu.testing``: the path for PyTorch's TORCH_TEST_DEVICES."""
from . import DEVICE_TYPE_FILE

print(DEVICE_TYPE_FILE)
