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
host_mirror.follow_fills()  # fill_ is registered by shape above

fallback.install()
