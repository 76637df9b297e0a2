"""The random bits of eager random kernels, drawn without compiling JAX's
threefry for every new shape.

A random kernel takes its bits as uint32 words (``take``) while it is traced.
The registry counts the words a kernel entry needs by tracing it once
(``counting``), then draws them per call with one executable per power-of-two
bucket of words (``words_program``: threefry compiles once per bucket, and the
persistent cache keeps it), and passes them to the kernel, whose own compile
then only slices and transforms them: as cheap as any elementwise op's.

A kernel whose draws are all of one common distribution (standard normal (its erfinv),
or uniform in [0, 1), per dtype: ``DISTRIBUTIONS``) gets its values
already transformed: the bucket's program applies the transform (erf_inv,
whose compile is the dearest part of a new shape) to all its words once per
(bucket, distribution, dtype), and the kernel only slices them.  The values
are the same: each is the same elementwise function of the same words
(normal's last multiply stays in the kernel: see ``normal``).

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

from .. import runtime

MIN_WORDS = 1 << 10
INLINE_WORDS = 1 << 20  # above: the kernel draws in its own launch (one compile per shape)

_programs: dict = {}
TRANSFORMED = True  # False: kernels transform their words themselves (tests compare the two)
builds = 0  # word programs built in this process (tests count them: one per bucket, never per shape)


def key(material):
    """The JAX key of one random op from its (seed, seed, counter) material."""
    k = jax.random.fold_in(jax.random.key(material[0]), material[1])
    return jax.random.fold_in(k, material[2])


def bucket(n_words: int) -> int:
    return max(MIN_WORDS, 1 << (n_words - 1).bit_length())


def _values(n_words: int, kind):
    """(length, dtype) of a bucket's program result: ``n_words`` words, or
    the values of distribution ``kind`` ((name, dtype name)) made of them."""
    if kind is None:
        return n_words, np.dtype(np.uint32)
    dtype = jnp.dtype(kind[1])
    return n_words // _words_per_value(dtype), dtype


def _words_per_value(dtype) -> int:
    return 2 if jnp.dtype(dtype).itemsize == 8 else 1


def words_program(n_words: int, kind=None):
    """The executable drawing ``n_words`` words from an op's material (and,
    with a ``kind``, transforming them into that distribution's values)."""
    fn = _programs.get((n_words, kind))
    if fn is None:
        global builds
        builds += 1
        length, dtype = _values(n_words, kind)

        def draw(material):
            words = jax.random.bits(key(material), (n_words,), jnp.uint32)
            if kind is None:
                return (words,)  # results as launch gives them
            with _state(words=words, kind=None, counting=False, used=0, draws=None):
                return (DISTRIBUTIONS[kind[0]]((length,), dtype, None),)
        draw.__name__ = f"random_words_{n_words}" + ("" if kind is None else f"_{kind[0]}_{kind[1]}")
        fn = _programs[n_words, kind] = runtime.device_jit(draw)
    return fn


class Plan(tuple):
    """(words the kernel takes, whether it draws them itself, the distribution
    (name, dtype name) its input holds already transformed, or None: words)."""
    __slots__ = ()

    @property
    def n_words(self):
        return self[0]

    @property
    def inline(self):
        return self[1]

    @property
    def kind(self):
        return self[2]

    def dummy(self):
        """A stand-in of the kernel's words input (shape and dtype) for traces."""
        if self.inline:
            return np.zeros(3, np.uint32)
        if not self.n_words:
            return np.zeros(0, np.uint32)
        length, dtype = _values(bucket(self.n_words), self.kind)
        return np.zeros(length, dtype)

    def words(self, material, launch):
        """The kernel's words input for one call: drawn by the bucket's
        program through ``launch`` (name, fn, inputs, out_buffers), or the
        material itself when the kernel draws."""
        if self.inline:
            return material
        if not self.n_words:
            return np.zeros(0, np.uint32)
        n = bucket(self.n_words)
        # Launched with no result shapes, so it runs even in fused mode: its
        # executable (one per bucket) is compiled once, whereas inside a
        # chain threefry (and erfinv) would be compiled again for every chain.
        return launch("random_words", words_program(n, self.kind), [material], None)[0]


def plan(n_words: int, kind=None) -> Plan:
    inline = n_words > INLINE_WORDS
    return Plan((n_words, inline, None if inline or not n_words else kind))


# ---- while a kernel is traced --------------------------------------------------

class _Stream(threading.local):
    words = None     # the traced words or values (or None: counting, or a graph's key)
    kind = None      # the distribution ``words`` holds as values, or None: words
    counting = False
    used = 0         # words (or values) taken so far in this trace
    draws = None     # counting: the kind of each take (None: raw words)
    drawing_kind = None  # the distribution being computed from words, if any
    graph_key = None
    graph_draws = 0


_stream = _Stream()


@contextmanager
def _state(**values):
    s = _stream
    saved = {k: getattr(s, k) for k in values}
    for k, v in values.items():
        setattr(s, k, v)
    try:
        yield
    finally:
        for k, v in saved.items():
            setattr(s, k, v)


@contextmanager
def drawing(words, kernel_plan):
    """Kernels traced inside take from ``words`` (the entry's words input,
    or the material when ``kernel_plan.inline``); with no plan they count."""
    if kernel_plan is None:  # counting (``planned``)
        yield
        return
    if kernel_plan.inline:
        words = jax.random.bits(key(words), (kernel_plan.n_words,), jnp.uint32)
    with _state(words=words, kind=kernel_plan.kind, counting=False, used=0, draws=None):
        yield


def planned(trace) -> Plan:
    """The plan of a kernel: its words counted while ``trace()`` traces it,
    and the distribution all its draws are of, if one of ``DISTRIBUTIONS``."""
    s = _stream
    with _state(words=None, kind=None, counting=True, used=0, draws=[], drawing_kind=None):
        trace()
        kinds = set(s.draws)
        return plan(s.used, kinds.pop() if len(kinds) == 1 and TRANSFORMED else None)


def take(n: int, graph_key=None):
    """The next ``n`` uint32 words of the op being traced.  ``graph_key``: the
    JAX key a torch.compile graph passes (no words input there)."""
    s = _stream
    if s.counting:
        s.used += n
        s.draws.append(s.drawing_kind)
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


def _drawn(name, shape, dtype, graph_key, from_words):
    """Distribution ``name``'s values of ``shape``: sliced from the kernel's
    input when it holds them transformed, else ``from_words``."""
    s = _stream
    kind = (name, jnp.dtype(dtype).name)
    if s.kind == kind and s.words is not None:
        n = _size(shape)
        start = s.used
        s.used += n
        return jax.lax.slice(s.words, (start,), (start + n,)).reshape(shape)
    if s.drawing_kind is not None or not s.counting:  # (inside another distribution: its words)
        return from_words(shape, dtype, graph_key)
    with _state(drawing_kind=kind):
        return from_words(shape, dtype, graph_key)


def uniform(shape, dtype, graph_key=None):
    """Uniform in [0, 1) on ``dtype``'s grid: the top mantissa bits of a draw
    under the exponent of 1.0, minus 1 (as jax.random.uniform)."""
    return _drawn("uniform", shape, dtype, graph_key, _uniform)


def _uniform(shape, dtype, graph_key):
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
    # The bucket's program holds erfinv's values: the multiply by sqrt(2)
    # stays here, where XLA may fold it with a caller's std (as it did when
    # the whole transform was in the kernel: the same values to the bit).
    dtype = np.dtype(dtype)
    return np.array(np.sqrt(2), dtype) * _drawn("erfinv", shape, dtype, graph_key, _erfinv)


def _erfinv(shape, dtype, graph_key):
    """erfinv of a uniform in (-1, 1)."""
    dtype = np.dtype(dtype)
    lo = np.nextafter(np.array(-1.0, dtype), np.array(0.0, dtype))
    u = jnp.maximum(lo, uniform(shape, dtype, graph_key) * np.array(2.0, dtype) - np.array(1.0, dtype))
    return jax.scipy.special.erfinv(u)


# The distributions whose values the bucket's program makes (from words)
DISTRIBUTIONS = {"uniform": _uniform, "erfinv": _erfinv}


def gumbel(shape, dtype, graph_key=None):
    dtype = np.dtype(dtype)
    u = jnp.maximum(uniform(shape, dtype, graph_key), jnp.finfo(dtype).tiny)
    return -jnp.log(-jnp.log(u))


def permutation(n: int, graph_key=None):
    """A uniformly random permutation of range(n): the order of n 64-bit draws
    (ties, about n**2 / 2**65 likely, keep the index order)."""
    return jnp.argsort(bits64((n,), graph_key), stable=True)
