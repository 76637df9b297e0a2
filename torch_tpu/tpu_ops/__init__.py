"""Google torch_tpu's ``torch.tpu.ops`` beyond the Pallas kernels: grouped
matmuls, optimization barriers, splash attention, jagged padding and the
collectives by dimension."""
from .grouped import (align_jagged_to_multiple, optimization_barrier, ragged_dot,  # noqa: F401
                      ragged_dot_weight_grad, strip_jagged_padding)
from .splash import splash_sdpa  # noqa: F401
from .collectives import (all_gather_dim, ragged_all_to_all, recv, reduce_scatter_dim,  # noqa: F401
                          send)
