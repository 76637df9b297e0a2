"""One round trip for a large collective that repeats: the signature rides
in lanes of the collective itself, shaped by a guess every rank makes alike.

The transport cannot take mismatched buffers, so a large call used to start
with folded.py's fixed-size signature exchange and run the collective only
once the signatures agreed: two round trips.  Instead, each group keeps the
sequence of calls it has launched (``History``), identical on every rank as
long as the ranks agreed so far, and guesses the next call's signature as the
one that followed the previous call last time.  The first collective of a
program is then shaped by the guess, not by the rank's own call:

- a call equal to the guess puts its payload in it next to its signature
  bytes, and that one collective is the result;
- any other call sends zeros and its signature in the same shape, then runs
  its own collective only if every rank's signature agrees (``lax.cond``).

Every rank's first message therefore has the same shape whatever it was
called with, so a mismatch still ends in a clear error on every rank.  A
mismatch resets every rank's history (the error reaches each of them), so
the guesses agree again afterwards.
"""
import jax
import jax.numpy as jnp
import numpy as np

from . import folded

# dtypes whose values hold every byte 0..255 exactly, so a signature byte
# survives a sum with zeros and the trip back to uint8
LANE_DTYPES = frozenset({"float16", "bfloat16", "float32", "float64", "int32", "int64"})
HISTORY_LIMIT = 4096  # distinct calls remembered per group; then it starts over (on every rank alike)


def carries(key, world):
    """Whether call ``key`` (programs.submit's plan key) can be the guess:
    a large sum all_reduce or all_gather of a dtype the lanes can use."""
    kind, static, shape, dtype, block, _ = key
    if str(jnp.dtype(dtype)) not in LANE_DTYPES:
        return False
    if kind == "all_reduce":
        if static[0] not in ("sum", "avg"):
            return False
    elif kind != "all_gather":
        return False
    return folded.nbytes(shape if block is None else block, dtype) > folded.fold_bytes(world)


class History:
    """The calls one group has launched: the last, and what followed each."""

    def __init__(self):
        self.last = None
        self.after = {}

    def next(self, key, world):
        """The guess for call ``key`` (None: no usable guess); records it."""
        guess = self.after.get(self.last)
        if len(self.after) >= HISTORY_LIMIT:
            self.after.clear()
        self.after[self.last] = key
        self.last = key
        return guess if guess is not None and carries(guess, world) else None

    def forget(self):
        self.last = None
        self.after.clear()


def _elements(key):
    _, _, shape, _, block, _ = key
    return int(np.prod(shape if block is None else block, dtype=np.int64))


def first_collective(guess, payload, header, axis, world):
    """The collective shaped by ``guess`` carrying ``payload`` (the guess's
    elements, flat, of its dtype) and this rank's signature bytes ``header``:
    (the collective's share of the payload, every rank's header bytes)."""
    kind, _, _, dtype, _, _ = guess
    dtype = jnp.dtype(dtype)
    n, nbytes = payload.shape[0], header.shape[0]
    lanes = header.astype(dtype)
    if kind == "all_reduce":  # each rank's bytes in its own slot, zeros elsewhere
        me = jax.lax.axis_index(axis)
        slots = jax.lax.dynamic_update_slice(jnp.zeros((world, nbytes), dtype), lanes[None], (me, me * 0))
        total = jax.lax.psum(jnp.concatenate([payload, slots.reshape(-1)]), axis)
        return total[:n], total[n:].reshape(world, nbytes).astype(jnp.uint8), total
    rows = jax.lax.all_gather(jnp.concatenate([payload, lanes]), axis)  # (world, n + nbytes)
    return rows[:, :n], rows[:, n:].astype(jnp.uint8), rows


def payload_of(guess, x, hit):
    """What this rank puts in the guessed collective: its own (scaled) flat
    payload on a hit, zeros of the guess's size otherwise."""
    _, static, _, dtype, _, _ = guess
    if not hit:
        return jnp.zeros((_elements(guess),), jnp.dtype(dtype))
    scale = static[1] if guess[0] == "all_reduce" else None
    if scale is not None:  # PREMUL_SUM
        x = (x * scale).astype(x.dtype)
    return x.reshape(-1)


def hit_result(key, share, world):
    """A hit's local result from the guessed collective's share, shaped as
    programs._kernel's would be (before the program's out_shape)."""
    kind, static, shape, _, block, _ = key
    block = tuple(shape) if block is None else block
    if kind == "all_reduce":
        y = share.reshape(block)
        if static[0] == "avg":
            y = y // world if jnp.issubdtype(y.dtype, jnp.integer) else y / world
        return y.astype(share.dtype)
    return share.reshape((world * block[0],) + tuple(block[1:]))  # all_gather, tiled
