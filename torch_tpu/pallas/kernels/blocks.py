"""Block-size choice shared by the built-in kernels."""


def block(n: int, preferred: int = 128) -> int:
    """The largest tile <= ``preferred`` that divides ``n`` (multiples of 8 first,
    as TPU sublanes want); the whole axis when none does."""
    for b in (preferred, 64, 32, 16, 8):
        if b <= n and n % b == 0:
            return b
    return n
