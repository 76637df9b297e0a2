"""Built-in Pallas TPU kernels (pure JAX; wrapped as torch ops in ``pallas/ops.py``)."""
