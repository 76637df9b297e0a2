"""Device copies of the Python numbers ops pass as traced scalars (the
``1.0001`` of ``x * 1.0001``).  jax.jit copies a Python number to the device
on every call; handed an array it already holds, it skips that transfer.  The
array is what jit would make of the number (same dtype, weakly typed), so the
executable and its results are the same.  A number gets its copy the second
time it is seen: a value that changes every step (an optimizer's bias
correction) stays a Python number and costs what it did."""
import math

import jax.numpy as jnp

_LIMIT = 1024  # copies kept per type; past it, new values stay Python numbers
_arrays = {float: {}, int: {}}  # by type: 1 == 1.0 must not share an entry
_seen: set = set()


def on_device(x):
    """The number ``x`` (a float or int; others are returned as they are) as a
    device array once it has been seen before, else ``x`` itself."""
    by_type = _arrays.get(type(x))
    if by_type is None:
        return x
    arr = by_type.get(x)
    if arr is not None:
        return arr
    # 0.0 == -0.0 (one key, two values) and nan != nan: never kept
    if type(x) is float and (x == 0.0 or math.isnan(x)):
        return x
    key = (type(x), x)
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
