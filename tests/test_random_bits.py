"""Random kernels take pre-drawn words (ops/random_bits.py): a new shape
compiles no threefry, the stream is the same whichever way the words are
drawn, and every eager mode gives the same values."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import torch_tpu  # noqa: F401
from torch_tpu.ops import random_bits


def _four_draws(n):
    torch.rand(n, device="tpu").cpu()
    torch.randn(n, device="tpu").cpu()
    torch.empty(n, device="tpu").bernoulli_(0.5).cpu()
    torch.nn.functional.dropout(torch.ones(n, device="tpu"), 0.5).cpu()


def test_new_shapes_build_no_new_word_program():
    _four_draws(2100)  # the bucket of 4096 words
    built = random_bits.builds
    for n in range(2101, 2113):  # twelve new shapes in that bucket, in four random ops
        _four_draws(n)
    assert random_bits.builds == built
    # the words transformed once per bucket: uniform (rand, bernoulli, dropout) and normal's erfinv
    assert {(4096, ("uniform", "float32")), (4096, ("erfinv", "float32"))} <= set(random_bits._programs)


def _draws(n, dtype, generator=None):
    """Values of the common distributions, an op each, from seed n."""
    torch.manual_seed(n)
    x = torch.empty(n, dtype=dtype, device="tpu")
    out = [torch.randn(n, dtype=dtype, device="tpu"), torch.rand(n, dtype=dtype, device="tpu", generator=generator),
           x.uniform_(-1, 1).clone(), x.normal_(2, 3).clone(), x.log_normal_().clone(), x.exponential_().clone(),
           torch.nn.functional.dropout(torch.ones(n, dtype=dtype, device="tpu"), 0.3),
           torch.empty(n, device="tpu").bernoulli_(0.4)]
    return [t.cpu().reshape(-1) for t in out]


def _bits(t):
    return t.view({2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()]) if t.is_floating_point() else t


def _assert_transformed_draws_are_the_kernels(monkeypatch, sizes, dtype, mode):
    """The values a kernel gets already transformed are those it computed from
    its words (a (1, n) shape: new kernel entries, with TRANSFORMED off)."""
    with torch.tpu.set_eager_mode(mode):
        got = [_draws(n, dtype, torch.Generator().manual_seed(n)) for n in sizes]
        monkeypatch.setattr(random_bits, "TRANSFORMED", False)
        want = []
        for n in sizes:
            torch.manual_seed(n)
            x = torch.empty(1, n, dtype=dtype, device="tpu")
            g = torch.Generator().manual_seed(n)
            draws = [torch.randn(1, n, dtype=dtype, device="tpu"),
                     torch.rand(1, n, dtype=dtype, device="tpu", generator=g),
                     x.uniform_(-1, 1).clone(), x.normal_(2, 3).clone(), x.log_normal_().clone(),
                     x.exponential_().clone(),
                     torch.nn.functional.dropout(torch.ones(1, n, dtype=dtype, device="tpu"), 0.3),
                     torch.empty(1, n, device="tpu").bernoulli_(0.4)]
            want.append([t.cpu().reshape(-1) for t in draws])
    for n, a, b in zip(sizes, got, want):
        for i, (u, v) in enumerate(zip(a, b)):
            assert torch.equal(_bits(u), _bits(v)), (n, dtype, i)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_transformed_draws_are_bit_identical(monkeypatch, dtype):
    _assert_transformed_draws_are_the_kernels(monkeypatch, [3, 512, 513, 1024, 1025], dtype, "strict")


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["strict", "fused"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_transformed_draws_are_bit_identical_many_sizes(monkeypatch, dtype, mode):
    sizes = [1, 2, 7, 100, 511, 512, 513, 1000, 1023, 1024, 1025, 2047, 2048, 2049, 4097, 5000]
    _assert_transformed_draws_are_the_kernels(monkeypatch, sizes, dtype, mode)


@pytest.mark.parametrize("n_words,bucket", [(0, 1024), (1, 1024), (1024, 1024), (1025, 2048), (5000, 8192)])
def test_bucket_sizes(n_words, bucket):
    assert random_bits.bucket(n_words) == bucket


@pytest.mark.parametrize("n", [0, 1, 1024, 1025])
def test_bucket_boundaries_draw_one_stream(n):
    """Drawn through any bucket, the first words of an op's draw are the same:
    rand(n) is a prefix of rand(n + 1) (its next bucket when n is 1024)."""
    torch.manual_seed(7)
    small = torch.rand(n, device="tpu").cpu()
    torch.manual_seed(7)
    large = torch.rand(n + 1, device="tpu").cpu()
    assert small.shape == (n,)
    torch.testing.assert_close(small, large[:n], rtol=0, atol=0)


def test_words_drawn_inside_the_kernel_are_the_same(monkeypatch):
    torch.manual_seed(3)
    bucketed = torch.empty(37, 3, device="tpu").normal_().cpu()
    monkeypatch.setattr(random_bits, "INLINE_WORDS", 16)  # the kernel (a new entry: a transposed view) draws its own
    torch.manual_seed(3)
    inline = torch.empty(3, 37, device="tpu").t().normal_().cpu()
    torch.testing.assert_close(bucketed, inline, rtol=0, atol=0)


def test_draws_in_one_op_take_distinct_words():
    words = jnp.arange(8, dtype=jnp.uint32)
    with random_bits.drawing(words, random_bits.plan(5)):
        first, second = random_bits.take(3), random_bits.take(2)
    assert first.tolist() == [0, 1, 2] and second.tolist() == [3, 4]
    assert random_bits.planned(lambda: (random_bits.take(3), random_bits.bits64((2, 2)))).n_words == 11


def test_uniform_grids():
    words = jnp.array([0, 0xFFFFFFFF, 0x80000000], jnp.uint32)
    for dtype in (np.float16, jnp.bfloat16, np.float32):
        with random_bits.drawing(words, random_bits.plan(3)):
            u = np.asarray(random_bits.uniform((3,), dtype).astype(np.float64))
        assert u[0] == 0 and u[1] < 1 and u[2] == 0.5, dtype


@pytest.mark.parametrize("mode", ["debug", "fused"])
def test_modes_give_the_strict_values(mode):
    def draws():
        torch.manual_seed(11)
        out = [torch.rand(5, 3, device="tpu"), torch.randint(0, 9, (4,), device="tpu"),
               torch.randperm(6, device="tpu"), torch.randn(2, device="tpu"),
               torch.nn.functional.dropout(torch.ones(8, device="tpu"), 0.5)]
        return [t.cpu() for t in out]
    strict = draws()
    with torch.tpu.set_eager_mode(mode):
        other = draws()
    for a, b in zip(strict, other):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_fused_chains_take_their_words_from_the_bucket_program(monkeypatch):
    """In fused mode the words program runs on its own (compiled once per
    bucket): recorded into each chain, threefry and erfinv were compiled again
    for every new chain, several times a plain op's compile."""
    from torch_tpu.eager import fusion
    recorded, record = [], fusion.record
    monkeypatch.setattr(fusion, "record", lambda fn, inputs, outs: recorded.append(fn.__name__) or record(fn, inputs, outs))
    torch.manual_seed(5)
    strict = [(torch.randn(n, device="tpu") * 2).cpu() for n in (5, 6)]
    with torch.tpu.set_eager_mode("fused"):
        torch.manual_seed(5)
        fused = [(torch.randn(n, device="tpu") * 2).cpu() for n in (5, 6)]
    assert recorded and not [name for name in recorded if name.startswith("random_words")], recorded
    for a, b in zip(strict, fused):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_a_cpu_generator_seeds_the_op():
    a = torch.rand(9, device="tpu", generator=torch.Generator().manual_seed(5)).cpu()
    b = torch.rand(9, device="tpu", generator=torch.Generator().manual_seed(5)).cpu()
    c = torch.rand(9, device="tpu", generator=torch.Generator().manual_seed(6)).cpu()
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_graph_keys_give_distinct_draws():
    """Without words (a torch.compile graph passes a key) each take folds the key anew."""
    key = jax.random.key(0)
    a, b = random_bits.take(4, key), random_bits.take(4, key)
    assert not np.array_equal(np.asarray(a), np.asarray(b))
