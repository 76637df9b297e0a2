"""Device copies of the Python numbers ops pass as traced scalars (the
``1.0001`` of ``x * 1.0001``).  jax.jit copies a Python number to the device
on every call; handed an array it already holds, it skips that transfer.  The
array is what jit would make of the number (same dtype, weakly typed), so the
executable and its results are the same.  A number gets its copy the second
time it is seen: a value that changes every step (an optimizer's bias
correction) stays a Python number and costs what it did."""
import jax.numpy as jnp

_LIMIT = 1024  # copies kept per type; past it, new values stay Python numbers
_floats: dict = {}  # one dict per type: 1 == 1.0 must not share an entry
_ints: dict = {}
_other: dict = {}  # never filled: bools and complex numbers stay as they are
_seen: set = set()


def on_device(x):
    """The number ``x`` (a Python float, int, bool or complex) as a device
    array once the float or int has been seen before, else ``x`` itself."""
    t = type(x)
    by_type = _floats if t is float else _ints if t is int else _other
    arr = by_type.get(x)
    if arr is not None:
        return arr
    if by_type is _other:
        return x
    # 0.0 == -0.0 (one key, two values) and nan != nan: never kept
    if t is float and (x == 0.0 or x != x):
        return x
    key = (t, x)
    if key not in _seen:
        if len(_seen) >= 4 * _LIMIT:
            _seen.clear()
        _seen.add(key)
        return x
    if len(by_type) >= _LIMIT:
        return x
    try:
        arr = jnp.asarray(x)  # weakly typed, as jit reads a Python number
    except OverflowError:  # an int past int64: jit raises it for the op
        return x
    by_type[x] = arr
    return arr
