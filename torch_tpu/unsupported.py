"""The exception for a PyTorch feature tpu does not support at all.

Quantized tensors, sparse COO tensors and the complex32 dtype have no tpu
kernels by decision (docs/guide.md).  Their refusals raise ``UnsupportedOnTpu``:
a NotImplementedError, the type PyTorch itself raises for a backend without a
kernel, but one of its own, so that a caller (and torch_tpu.testing's test
base, which turns it into a skipped test) can tell a decided refusal from a
bug without catching every NotImplementedError.
"""


class UnsupportedOnTpu(NotImplementedError):
    """A feature tpu does not support: quantized, sparse COO, complex32."""

    # the latest refusal made, caught or not: torch_tpu.testing's test base reads it to tell a
    # test that failed after catching a refusal (PyTorch's tests catch RuntimeError) from a bug
    latest = None

    def __init__(self, *args):
        super().__init__(*args)
        UnsupportedOnTpu.latest = self
