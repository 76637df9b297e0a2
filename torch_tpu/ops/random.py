"""Random ops.  Each call draws fresh random words from the device stream
(device/rng.py: ``torch.manual_seed`` resets it) or from a CPU
``torch.Generator`` passed as ``generator=``; the registry (``rng=True``) draws
them (random_bits.py: no threefry compile per shape) and the kernels here turn
them into their distribution.  rand/randn/randint arrive as empty + uniform_/
normal_/random_.

The streams are JAX's threefry, so values differ from PyTorch's CPU
generator; the distributions are the same.
"""
import jax
import jax.numpy as jnp
import numpy as np
import torch

from .. import dtypes
from . import elementwise, indexing, random_bits
from .registry import guard, out_dtype, register, register_raw, rng_key, wrap_entry

aten = torch.ops.aten


def _float_dtype():
    # Draw in at least float32 (half-precision draws are coarse), then cast.
    d = out_dtype()
    if not jnp.issubdtype(d, jnp.floating) or d.itemsize < 4:
        return np.dtype(np.float32)
    return d


def _uniform01(shape, fine=False):
    """Uniform in [0, 1) in the drawing dtype.  Unless ``fine``, a half-precision
    result is drawn on its own grid, so rounding can never produce 1.0."""
    d = out_dtype()
    grid = d if (not fine and jnp.issubdtype(d, jnp.floating) and d.itemsize < 4) else _float_dtype()
    return random_bits.uniform(shape, grid, rng_key()).astype(_float_dtype())


def _normal01(shape):
    return random_bits.normal(shape, _float_dtype(), rng_key())


@register("uniform.default", rng=True)
def uniform(self, from_=0.0, to=1.0, *, generator=None, **kw):
    lo, hi = kw.get("from", from_), to
    return lo + (hi - lo) * _uniform01(self.shape)


def _normal_like(self, mean=0.0, std=1.0, generator=None):
    return mean + std * _normal01(self.shape)


register("normal_.default", mode="inplace", rng=True)(_normal_like)  # its functional twin has another name
register("normal_functional.default", rng=True)(_normal_like)


def _normal_of_nothing(kernel, self, *args, **kwargs):
    """An empty tensor: the CPU checks std, then draws nothing, whatever the
    dtype (``torch.randn(0, dtype=torch.int16)`` is empty; the meta kernel
    refuses the dtype)."""
    if self.numel() == 0:
        torch.empty(0).normal_(*args, **{k: v for k, v in kwargs.items() if k != "generator"})
        return self
    return kernel(self, *args, **kwargs)


wrap_entry("normal_.default", around=_normal_of_nothing)


@register("normal.Tensor_float", "normal.float_Tensor", "normal.Tensor_Tensor", rng=True)
def normal(mean=0.0, std=1.0, *, generator=None):
    shape = jnp.broadcast_shapes(jnp.shape(mean), jnp.shape(std))
    return mean + std * _normal01(shape)


@register("bernoulli.default", "bernoulli.Tensor", rng=True)
def bernoulli(self, p=None, *, generator=None):
    prob = self if p is None else p
    prob = jnp.broadcast_to(jnp.asarray(prob), self.shape)
    return _uniform01(self.shape, fine=True) < prob.astype(_float_dtype())


@register("bernoulli.p", rng=True)
def bernoulli_p(self, p=0.5, *, generator=None):
    return _uniform01(self.shape, fine=True) < p


def _int_bounds(dtype):
    """[low, high] inclusive of random_() with no bounds, per dtype (as PyTorch)."""
    if dtype == np.bool_:
        return 0, 1
    if jnp.issubdtype(dtype, jnp.integer):
        return 0, int(jnp.iinfo(dtype).max)
    # floats: integers that the mantissa holds exactly
    return 0, 2 ** int(jnp.finfo(dtype).nmant + 1)


def _randint(shape, low, high_exclusive):
    """Integers in [low, high): int64 draws, so any 64-bit range fits."""
    span = np.uint64(high_exclusive - low) if high_exclusive - low < 2 ** 64 else None
    bits = random_bits.bits64(shape, rng_key())
    offset = bits if span is None else bits % span
    return np.int64(low) + offset.astype(np.int64)


def _held(dtype, ends):
    """``ends`` (low, high exclusive) moved inward as the CPU's random_ does for a
    float dtype (ATen's update_from/update_to): a draw rounded to the dtype
    then never reaches ``high`` (float16 random_(32752) stays below 32752)."""
    low, high = ends
    if not jnp.issubdtype(dtype, jnp.floating):
        return low, high
    digits = int(jnp.finfo(dtype).nmant) + 1

    def rounded(v):  # int64 -> the dtype, back to int64
        return int(np.float64(v).astype(dtype).astype(np.float64))
    if rounded(low + 1) < low:
        low = rounded(low + 1) + (1 << (abs(low + 1).bit_length() - 1 - digits + 1))
    if high is not None and rounded(high - 1) >= high:
        high = rounded(high - 1) - (1 << (abs(high - 1).bit_length() - 1 - digits + 1))
    return low, high


@register("random.from", static_scalars=True, rng=True)
def random_from(self, from_=0, to=None, *, generator=None, **kw):
    low, high = _held(out_dtype(), (int(kw.get("from", from_)), None if to is None else int(to)))
    high = (_int_bounds(out_dtype())[1] + 1) if high is None else high
    return _randint(self.shape, low, high)


@register("random.to", static_scalars=True, rng=True)
def random_to(self, to, *, generator=None):
    return _randint(self.shape, *_held(out_dtype(), (0, int(to))))


@register("random.default", rng=True)
def random_default(self, *, generator=None):
    low, high = _int_bounds(out_dtype())
    return _randint(self.shape, low, high + 1)


@register("exponential.default", rng=True)
def exponential(self, lambd=1.0, *, generator=None):
    # -log(1 - u) never hits log(0) since u < 1.
    return -jnp.log1p(-_uniform01(self.shape)) / lambd


@register("geometric.default", rng=True)
def geometric(self, p, *, generator=None):
    u = _uniform01(self.shape)
    return jnp.maximum(jnp.ceil(jnp.log1p(-u) / jnp.log1p(-p)), 1.0)


@register("log_normal.default", rng=True)
def log_normal(self, mean=1.0, std=2.0, *, generator=None):
    return jnp.exp(mean + std * _normal01(self.shape))


@register("cauchy.default", rng=True)
def cauchy(self, median=0.0, sigma=1.0, *, generator=None):
    return median + sigma * jnp.tan(jnp.pi * (_uniform01(self.shape) - 0.5))


def _randperm(n, *, generator=None, **_):
    return random_bits.permutation(n, rng_key())


register("randperm.generator_out", "randperm.out", mode="out", rng=True)(_randperm)


@register("multinomial.default", rng=True)
def multinomial(self, num_samples, replacement=False, *, generator=None):
    probs = self.astype(_float_dtype())
    logits = jnp.where(probs > 0, jnp.log(probs), -jnp.inf)
    if replacement:
        # the Gumbel-max trick, one draw per sample (as jax.random.categorical)
        noise = random_bits.gumbel((num_samples,) + logits.shape, logits.dtype, rng_key())
        return jnp.moveaxis(jnp.argmax(logits + noise, axis=-1), 0, -1)
    # Without replacement: the top-k of Gumbel-perturbed logits is a draw
    # of k distinct categories with PyTorch's sequential probabilities.
    gumbel = random_bits.gumbel(logits.shape, logits.dtype, rng_key())
    return jax.lax.top_k(logits + gumbel, num_samples)[1]


# ---- samplers of torch.distributions: Gamma (and Beta, Dirichlet, StudentT
# through it), Poisson, Binomial.  Half types draw in float32, as CUDA does
# (PyTorch's CPU kernels take only float and double).

def _draw_dtype(dtype):
    return np.dtype(np.float32) if np.dtype(dtype).itemsize < 4 else np.dtype(dtype)


@register("_standard_gamma.default", rng=True)
def _standard_gamma(self, generator=None):
    alpha = self.astype(_draw_dtype(self.dtype))
    sample = jax.random.gamma(random_bits.jax_key(rng_key()), alpha, dtype=alpha.dtype)
    # the CPU never returns 0: a sample is at least the smallest normal number
    return jnp.maximum(sample, jnp.finfo(self.dtype).tiny).astype(self.dtype)


@register("_sample_dirichlet.default", rng=True)
def _sample_dirichlet(self, generator=None):
    gammas = _standard_gamma(self).astype(_draw_dtype(self.dtype))
    return (gammas / jnp.sum(gammas, axis=-1, keepdims=True)).astype(self.dtype)


@register("poisson.default", rng=True)
def poisson(self, generator=None):
    rate = self.astype(_draw_dtype(self.dtype))
    return jax.random.poisson(random_bits.jax_key(rng_key()), rate, dtype=np.int64).astype(self.dtype)


@jax.jit
def _any_invalid_rate(rate):
    return jnp.any(~(rate >= 0))  # NaN is invalid too


def _check_rate(bound):
    # the CPU checks every rate; here that is one reduction read on the host
    rate = bound["self"]
    if rate.numel() and bool(_any_invalid_rate(indexing._value(rate))):
        raise RuntimeError("invalid Poisson rate, expected rate to be non-negative")


guard("poisson.default", prepare=_check_rate)


@register("binomial.default", rng=True)
def binomial(count, prob, generator=None):
    dtype = _draw_dtype(count.dtype)
    n, p = count.astype(dtype), prob.astype(dtype)
    draws = jax.random.binomial(random_bits.jax_key(rng_key()), jnp.maximum(n, 0), jnp.clip(p, 0, 1), dtype=dtype)
    # the CPU's edge cases: no trials or p <= 0 give 0, p >= 1 gives every trial
    return jnp.where((n <= 0) | (p <= 0), 0, jnp.where(p >= 1, n, draws)).astype(count.dtype)


# ---- rrelu ----------------------------------------------------------------------
# In training each element <= 0 gets its own slope drawn from U(lower, upper),
# kept in ``noise`` (1 elsewhere) for the backward; in eval the slope is the
# mean (lower + upper) / 2 and noise is left alone, as on the CPU.

@register("rrelu_with_noise_functional.default", rng=True)
def rrelu_with_noise_functional(self, noise, lower=0.125, upper=1.0 / 3.0, training=False, generator=None):
    if not training:  # leaky_relu by the mean slope, as its kernel computes it (a half tensor in float32)
        x = self.astype(dtypes.opmath(self.dtype))
        return elementwise.leaky_relu(x, (lower + upper) / 2).astype(self.dtype), noise
    slope = lower + (upper - lower) * _uniform01(self.shape, fine=True)
    negative = self <= 0
    out = jnp.where(negative, self.astype(slope.dtype) * slope, self)
    return out.astype(self.dtype), jnp.where(negative, slope, 1).astype(noise.dtype)


def _rrelu(self, noise, lower, upper, training, generator):
    out, drawn = aten.rrelu_with_noise_functional(self, noise, lower, upper, training, generator=generator)
    if training:  # the slopes go into noise in place, where the backward reads them
        noise.copy_(drawn)
    return out


@register_raw("rrelu_with_noise.default")
def rrelu_with_noise(self, noise, lower=0.125, upper=1.0 / 3.0, training=False, generator=None):
    return _rrelu(self, noise, lower, upper, training, generator)


@register_raw("rrelu_with_noise.out")
def rrelu_with_noise_out(self, noise, lower=0.125, upper=1.0 / 3.0, training=False, generator=None, *, out):
    return out.copy_(_rrelu(self, noise, lower, upper, training, generator))


@register_raw("rrelu_with_noise_.default")
def rrelu_with_noise_(self, noise, lower=0.125, upper=1.0 / 3.0, training=False, generator=None):
    return self.copy_(_rrelu(self, noise, lower, upper, training, generator))


# The CPU kernels check their parameters (bounds that fit the dtype, from < to,
# a dtype the distribution has) and warn before drawing anything: running one
# on an empty CPU tensor of the same dtype raises (and warns) exactly as the CPU.
def _checked_on_cpu(draw):
    def prepare(bound):
        draw(torch.empty(0, dtype=bound["self"].dtype), bound)
    return prepare


guard("random.from", prepare=_checked_on_cpu(lambda t, b: t.random_(b.get("from", 0), b.get("to"))))
guard("random.to", prepare=_checked_on_cpu(lambda t, b: t.random_(b["to"])))
guard("uniform.default", prepare=_checked_on_cpu(lambda t, b: t.uniform_(b.get("from", 0.0), b.get("to", 1.0))))
guard("exponential.default", prepare=_checked_on_cpu(lambda t, b: t.exponential_(b.get("lambd", 1.0))))
guard("geometric.default", prepare=_checked_on_cpu(lambda t, b: t.geometric_(b["p"])))
guard("log_normal.default", prepare=_checked_on_cpu(lambda t, b: t.log_normal_(b.get("mean", 1.0), b.get("std", 2.0))))
guard("cauchy.default", prepare=_checked_on_cpu(lambda t, b: t.cauchy_(b.get("median", 0.0), b.get("sigma", 1.0))))

# randperm's largest n per result dtype (every value exact); past it the CPU raises
_RANDPERM_MAX = {torch.float16: 2**11 + 1, torch.float32: 2**24 + 1, torch.float64: 2**53 + 1}


def _check_randperm(bound):
    n, dtype = bound["n"], bound["out"].dtype
    limit = _RANDPERM_MAX.get(dtype)
    if limit is None and not dtype.is_floating_point and dtype != torch.bool:
        limit = torch.iinfo(dtype).max + 1
    if dtype == torch.bool or (limit is not None and n > limit):
        torch.randperm(n, out=torch.empty(0, dtype=dtype))  # raises the CPU's error


guard("randperm.generator_out", "randperm.out", prepare=_check_randperm)
