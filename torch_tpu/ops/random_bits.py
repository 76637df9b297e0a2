"""The random bits of eager random kernels, drawn without compiling JAX's
threefry for every new shape.

A random kernel takes its bits as uint32 words (``take``) while it is traced.
The registry counts the words a kernel entry needs by tracing it once
(``counting``), then draws them per call with one executable per power-of-two
bucket of words (``words_program``: threefry compiles once per bucket, and the
persistent cache keeps it), and passes them to the kernel, whose own compile
then only slices and transforms them: as cheap as any elementwise op's.

Above ``INLINE_WORDS`` words the kernel draws its words itself, in its one
launch (threefry compiles for that shape, which a large shape amortises; it
saves a launch and a buffer as large as the result).  The words are the same
either way: with JAX's partitionable threefry, the first n words of a larger
draw are the draw of n words.

Graphs of ``torch.compile`` pass a JAX key instead (``rng_key()``); ``take``
then derives its words from that key.
"""
import threading
from contextlib import contextmanager

import jax
import jax.numpy as jnp
import numpy as np

MIN_WORDS = 1 << 10
INLINE_WORDS = 1 << 20  # above: the kernel draws in its own launch (one compile per shape)

_programs: dict = {}
builds = 0  # word programs built in this process (tests count them: one per bucket, never per shape)


def key(material):
    """The JAX key of one random op from its (seed, seed, counter) material."""
    k = jax.random.fold_in(jax.random.key(material[0]), material[1])
    return jax.random.fold_in(k, material[2])


def bucket(n_words: int) -> int:
    return max(MIN_WORDS, 1 << (n_words - 1).bit_length())


def words_program(n_words: int):
    """The executable drawing ``n_words`` words from an op's material."""
    fn = _programs.get(n_words)
    if fn is None:
        global builds
        builds += 1

        def draw(material):
            return (jax.random.bits(key(material), (n_words,), jnp.uint32),)  # results as launch gives them
        draw.__name__ = f"random_words_{n_words}"
        fn = _programs[n_words] = jax.jit(draw)
    return fn


class Plan(tuple):
    """(words the kernel takes, whether it draws them itself)."""
    __slots__ = ()

    @property
    def n_words(self):
        return self[0]

    @property
    def inline(self):
        return self[1]

    def dummy(self):
        """A stand-in of the kernel's words input (shape and dtype) for traces."""
        if self.inline:
            return np.zeros(3, np.uint32)
        return np.zeros(bucket(self.n_words) if self.n_words else 0, np.uint32)

    def words(self, material, launch):
        """The kernel's words input for one call: drawn by the bucket's
        program through ``launch`` (name, fn, inputs, out_buffers), or the
        material itself when the kernel draws."""
        if self.inline:
            return material
        if not self.n_words:
            return np.zeros(0, np.uint32)
        n = bucket(self.n_words)
        return launch("random_words", words_program(n), [material], [((n,), np.dtype(np.uint32))])[0]


def plan(n_words: int) -> Plan:
    return Plan((n_words, n_words > INLINE_WORDS))


# ---- while a kernel is traced --------------------------------------------------

class _Stream(threading.local):
    words = None     # the traced words (or None: counting, or a graph's key)
    counting = False
    used = 0         # words taken so far in this trace
    graph_key = None
    graph_draws = 0


_stream = _Stream()


@contextmanager
def drawing(words, kernel_plan):
    """Kernels traced inside take from ``words`` (the entry's words input,
    or the material when ``kernel_plan.inline``); with no plan they count."""
    if kernel_plan is None:  # counting (``counted``)
        yield
        return
    s = _stream
    saved = (s.words, s.counting, s.used)
    if kernel_plan.inline:
        s.words, s.counting = jax.random.bits(key(words), (kernel_plan.n_words,), jnp.uint32), False
    else:
        s.words, s.counting = words, False
    s.used = 0
    try:
        yield
    finally:
        s.words, s.counting, s.used = saved


def counted(trace) -> int:
    """Words taken while ``trace()`` runs (a kernel traced in counting mode)."""
    s = _stream
    saved = (s.words, s.counting, s.used)
    s.words, s.counting, s.used = None, True, 0
    try:
        trace()
        return s.used
    finally:
        s.words, s.counting, s.used = saved


def take(n: int, graph_key=None):
    """The next ``n`` uint32 words of the op being traced.  ``graph_key``: the
    JAX key a torch.compile graph passes (no words input there)."""
    s = _stream
    if s.counting:
        s.used += n
        return jnp.zeros((n,), jnp.uint32)
    if s.words is None:  # a graph: each draw from the key folded with its index
        if graph_key is None:
            raise RuntimeError("tpu: a random kernel was traced without its random words")
        if s.graph_key is not graph_key:
            s.graph_key, s.graph_draws = graph_key, 0
        s.graph_draws += 1
        return jax.random.bits(jax.random.fold_in(graph_key, s.graph_draws), (n,), jnp.uint32)
    start = s.used
    s.used += n
    return jax.lax.slice(s.words, (start,), (start + n,))


def jax_key(graph_key=None):
    """A JAX key for samplers that need one (gamma, Poisson, binomial: their
    rejection loops draw an unbounded number of words)."""
    return jax.random.wrap_key_data(take(2, graph_key))


# ---- distributions from words ----------------------------------------------------

def _size(shape) -> int:
    return int(np.prod(shape, dtype=np.int64))


def bits64(shape, graph_key=None):
    """uint64 draws (two words each)."""
    n = _size(shape)
    w = take(2 * n, graph_key).reshape(n, 2).astype(jnp.uint64)
    return ((w[:, 0] << 32) | w[:, 1]).reshape(shape)


_ONE_BITS = {2: np.uint16, 4: np.uint32, 8: np.uint64}


def uniform(shape, dtype, graph_key=None):
    """Uniform in [0, 1) on ``dtype``'s grid: the top mantissa bits of a draw
    under the exponent of 1.0, minus 1 (as jax.random.uniform)."""
    dtype = np.dtype(dtype)
    size = dtype.itemsize
    if size == 8:
        raw = bits64(shape, graph_key)
    else:
        raw = take(_size(shape), graph_key).reshape(shape)
        if size == 2:
            raw = (raw >> 16).astype(jnp.uint16)
    uint = _ONE_BITS[size]
    nmant = int(jnp.finfo(dtype).nmant)
    one = np.array(1.0, dtype).view(uint)
    mantissa = raw >> uint(8 * size - nmant)
    return jax.lax.bitcast_convert_type(mantissa | one, dtype) - np.array(1.0, dtype)


def normal(shape, dtype, graph_key=None):
    """Standard normal: the inverse error function of a uniform in (-1, 1)
    (as jax.random.normal)."""
    dtype = np.dtype(dtype)
    lo = np.nextafter(np.array(-1.0, dtype), np.array(0.0, dtype))
    u = jnp.maximum(lo, uniform(shape, dtype, graph_key) * np.array(2.0, dtype) - np.array(1.0, dtype))
    return np.array(np.sqrt(2), dtype) * jax.scipy.special.erfinv(u)


def gumbel(shape, dtype, graph_key=None):
    dtype = np.dtype(dtype)
    u = jnp.maximum(uniform(shape, dtype, graph_key), jnp.finfo(dtype).tiny)
    return -jnp.log(-jnp.log(u))


def permutation(n: int, graph_key=None):
    """A uniformly random permutation of range(n): the order of n 64-bit draws
    (ties, about n**2 / 2**65 likely, keep the index order)."""
    return jnp.argsort(bits64((n,), graph_key), stable=True)
