"""All aten kernels for the tpu device; importing this package installs them.

One module per op family; each registers its kernels with ``registry.register``.
"""
from . import fallback, registry  # noqa: F401
from . import core, host_mirror, indexing  # noqa: F401  (indexing's kernels first: elementwise overrides some)
from . import elementwise, reduction, linalg, nn, upsample, factory, random, shape  # noqa: F401
from . import foreach  # noqa: F401,E402
from . import optim  # noqa: F401,E402
from . import attention, fft  # noqa: F401,E402
from . import factorizations  # noqa: F401,E402
from . import special, distance  # noqa: F401,E402
from . import embedding_bag, unpool, margin, grid_sample, antialias, ctc  # noqa: F401,E402
from . import rnn, sync_batch_norm, reparam, grouped_mm  # noqa: F401,E402
from . import histogram  # noqa: F401,E402
from . import composite  # noqa: F401,E402  (runs the registered kernels above as one program)
from . import domain_checks  # noqa: F401,E402  (guards the kernels above)
from . import buckets  # noqa: E402
# exact elementwise ops: a new small shape runs on its bucket's program (buckets.py)
buckets.mark(
    "abs.default", "neg.default", "bitwise_not.default", "logical_not.default", "isnan.default", "sign.default",
    "eq.Tensor", "ne.Tensor", "lt.Tensor", "le.Tensor", "gt.Tensor", "ge.Tensor",
    "eq.Scalar", "ne.Scalar", "lt.Scalar", "le.Scalar", "gt.Scalar", "ge.Scalar",
    "bitwise_and.Tensor", "bitwise_or.Tensor", "bitwise_xor.Tensor", "logical_and.default", "logical_or.default",
    "logical_xor.default", "mul.Tensor", "maximum.default", "minimum.default", "where.self")
# a running sum of a 1-d tensor: XLA sums each prefix in order (a reduce_window
# over the leading elements), so the padding after it changes nothing
buckets.mark("cumsum.default", kind="flat")
buckets.mark("max.default", kind="max")
buckets.mark("min.default", kind="min")
buckets.mark("uniform_.default", "normal_.default", kind="fill")
buckets.mark("index_put.default", "index_put_.default", kind="put")
buckets.mark(core.same_device_cast)  # t.long(), t.float(): a cast
host_mirror.follow_fills()  # fill_ is registered by shape above
