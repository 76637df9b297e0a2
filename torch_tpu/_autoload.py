"""PyTorch's device-backend autoload entry point (``import torch`` loads us).

It lives in its own module so that ``import torch_tpu`` before ``import torch``
works too: torch's autoload then finds this module, not a half-imported package.
"""


def load() -> None:
    import torch_tpu  # noqa: F401  (registering the device is a side effect of the import)
