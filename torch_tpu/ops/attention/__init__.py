"""Attention on tpu: ``F.scaled_dot_product_attention`` as one fused op each
way (``sdpa.py``), ``nn.MultiheadAttention``'s and ``TransformerEncoderLayer``'s
inference fast paths (``transformer.py``), and FlexAttention (``flex.py``)."""
from . import sdpa, transformer  # noqa: F401  (before flex: the order ops were registered in)
from . import flex  # noqa: F401
