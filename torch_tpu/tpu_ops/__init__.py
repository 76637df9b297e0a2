"""``torch.tpu.ops``, Google torch_tpu's TPU ops: the built-in Pallas
kernels (flash attention, RMS norm), grouped matmuls, optimization barriers,
splash attention, jagged padding and the collectives by dimension.

Imported when ``torch.tpu.ops`` is first used (torch_tpu/__init__.py): its
wrappers are marked for Dynamo, which that imports (see compile/__init__.py).
"""
from ..pallas.ops import flash_attention, rms_norm  # noqa: F401
from .grouped import (align_jagged_to_multiple, optimization_barrier, ragged_dot,  # noqa: F401
                      ragged_dot_weight_grad, strip_jagged_padding)
from .splash import splash_sdpa  # noqa: F401
from .collectives import (all_gather_dim, ragged_all_to_all, recv, reduce_scatter_dim,  # noqa: F401
                          send)
