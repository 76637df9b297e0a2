from .buffers import (  # noqa: F401
    DEVICE, allocate_like, empty_storage, get_buffer, new_tensor, new_storage,
    set_buffer, storage_of, wrap,
)
