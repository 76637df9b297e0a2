"""Random ops on tpu: distributions (statistics of 100k samples), reproducibility,
generators.  Values differ from PyTorch's CPU stream; distributions must not."""
import math
import pickle

import pytest
import torch

import torch_tpu
from helpers import strict  # noqa: F401  (no silent CPU fallback)

N = 100_000




def _stats(t):
    c = t.cpu().to(torch.float64)
    return c.mean().item(), c.std().item(), c.min().item(), c.max().item()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_rand(dtype):
    mean, std, lo, hi = _stats(torch.rand(N, device="tpu", dtype=dtype))
    assert abs(mean - 0.5) < 0.01 and abs(std - 1 / math.sqrt(12)) < 0.01
    assert lo >= 0.0 and hi < 1.0


def test_uniform_range_and_views():
    t = torch.empty(400, 250, device="tpu").uniform_(-3, 5)
    mean, std, lo, hi = _stats(t)
    assert abs(mean - 1.0) < 0.05 and abs(std - 8 / math.sqrt(12)) < 0.05 and lo >= -3 and hi < 5
    base = torch.zeros(6, 4, device="tpu")
    base.t()[1:3].uniform_(1, 2)  # writes through a strided view only
    host = base.cpu()
    assert (host[:, 1:3] >= 1).all() and (host[:, [0, 3]] == 0).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_randn_and_normal(dtype):
    mean, std, _, _ = _stats(torch.randn(N, device="tpu", dtype=dtype))
    assert abs(mean) < 0.02 and abs(std - 1) < 0.02
    mean, std, _, _ = _stats(torch.empty(N, device="tpu", dtype=dtype).normal_(3, 0.5))
    assert abs(mean - 3) < 0.02 and abs(std - 0.5) < 0.02


def test_normal_overloads():
    m = torch.full((N,), 2.0, device="tpu")
    s = torch.full((N,), 3.0, device="tpu")
    for t, em, es in ((torch.normal(m, s), 2, 3), (torch.normal(m, 0.5), 2, 0.5),
                      (torch.normal(-1.0, s), -1, 3), (torch.normal(1.0, 2.0, (N,), device="tpu"), 1, 2)):
        mean, std, _, _ = _stats(t)
        assert abs(mean - em) < 0.05 * es and abs(std - es) < 0.03 * es
        assert t.device.type == "tpu"
    out = torch.empty(0, device="tpu")
    torch.normal(m, s, out=out)
    assert out.shape == (N,)


def test_manual_seed_reproducible():
    def draw():
        torch.manual_seed(1234)
        return [torch.rand(5, device="tpu").cpu(), torch.randn(5, device="tpu").cpu(),
                torch.randint(0, 100, (5,), device="tpu").cpu(), torch.randperm(7, device="tpu").cpu()]
    a, b = draw(), draw()
    for x, y in zip(a, b):
        assert torch.equal(x, y)
    torch.manual_seed(1235)
    assert not torch.equal(torch.rand(5, device="tpu").cpu(), a[0])
    # successive draws differ
    assert not torch.equal(torch.rand(5, device="tpu").cpu(), torch.rand(5, device="tpu").cpu())


def test_cpu_generator():
    g = torch.Generator().manual_seed(7)
    a = torch.rand(5, device="tpu", generator=g).cpu()
    b = torch.rand(5, device="tpu", generator=g).cpu()
    g.manual_seed(7)
    assert torch.equal(torch.rand(5, device="tpu", generator=g).cpu(), a)
    assert not torch.equal(a, b)
    g.manual_seed(7)
    p1 = torch.randperm(10, device="tpu", generator=g).cpu()
    g.manual_seed(7)
    assert torch.equal(torch.randperm(10, device="tpu", generator=g).cpu(), p1)


def test_random_range_error_matches_cpu():
    with pytest.raises(RuntimeError) as cpu_error:
        torch.randint(5, 2, (3,))
    with pytest.raises(RuntimeError) as tpu_error:
        torch.randint(5, 2, (3,), device="tpu")
    assert str(tpu_error.value) == str(cpu_error.value)


def test_tpu_generator():
    g = torch.Generator(device="tpu").manual_seed(7)
    assert g.device == torch.device("tpu", 0)
    a = torch.randn(5, device="tpu", generator=g).cpu()
    state = g.get_state()
    b = torch.empty(5, device="tpu").normal_(generator=g).cpu()
    assert not torch.equal(a, b)
    # the same seed (given at construction or later) or a restored state repeats the draws
    assert torch.equal(torch.randn(5, device="tpu", generator=torch.Generator("tpu").manual_seed(7)).cpu(), a)
    g.set_state(state)
    assert torch.equal(torch.empty(5, device="tpu").normal_(generator=g).cpu(), b)
    restored = pickle.loads(pickle.dumps(g))
    assert restored.device.type == "tpu"
    assert torch.equal(torch.rand(3, device="tpu", generator=restored).cpu(),
                       torch.rand(3, device="tpu", generator=g).cpu())
    with pytest.raises(RuntimeError, match="Invalid device index 5 for tpu"):
        torch.Generator("tpu:5")


def test_generator_type_is_unchanged_for_other_devices():
    cpu = torch.Generator()
    assert type(cpu) is torch._C.Generator and cpu.device.type == "cpu"
    for g in (cpu, torch.default_generator, torch.Generator("tpu"), torch.Generator(device="cpu")):
        assert isinstance(g, torch.Generator)
    assert issubclass(torch._C.Generator, torch.Generator)
    # CPU draws are PyTorch's own
    assert torch.equal(torch.rand(4, generator=torch.Generator().manual_seed(3)),
                       torch.rand(4, generator=torch._C.Generator().manual_seed(3)))


def test_fork_rng_state():
    state = torch.tpu.get_rng_state()
    a = torch.rand(4, device="tpu").cpu()
    torch.tpu.set_rng_state(state)
    assert torch.equal(torch.rand(4, device="tpu").cpu(), a)


@pytest.mark.parametrize("reentrant", [False, True], ids=["non_reentrant", "reentrant"])
@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_activation_checkpointing_replays_dropout(reentrant, mode):
    # torch.utils.checkpoint recomputes the forward in backward with the
    # device RNG state it saved: the same dropout mask, the same gradients
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Dropout(0.5), torch.nn.GELU(),
                              torch.nn.Linear(16, 4)).to("tpu")
    x = torch.randn(4, 8, device="tpu")
    grads = []
    with torch.tpu.set_eager_mode(mode):
        for checkpointed in (True, False):
            torch.manual_seed(1)
            xi = x.clone().requires_grad_()
            y = torch.utils.checkpoint.checkpoint(net, xi, use_reentrant=reentrant) if checkpointed else net(xi)
            y.sum().backward()
            grads.append(xi.grad.cpu())
    torch.testing.assert_close(grads[0], grads[1], rtol=0, atol=0)


def test_bernoulli():
    p = torch.full((N,), 0.3, device="tpu")
    assert abs(torch.bernoulli(p).cpu().mean().item() - 0.3) < 0.01
    t = torch.empty(N, device="tpu").bernoulli_(0.8)
    assert abs(t.cpu().mean().item() - 0.8) < 0.01
    probs = torch.tensor([0.0, 1.0] * (N // 2), device="tpu")
    t = torch.empty(N, device="tpu").bernoulli_(probs)
    assert torch.equal(t.cpu(), probs.cpu())
    b = torch.bernoulli(torch.full((N,), 0.5, device="tpu", dtype=torch.float64))
    assert b.dtype == torch.float64 and set(b.cpu().unique().tolist()) == {0.0, 1.0}
    assert torch.empty(10, dtype=torch.bool, device="tpu").bernoulli_(0.5).dtype == torch.bool


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8, torch.float32])
def test_randint_and_random_(dtype):
    t = torch.randint(-5 if dtype != torch.uint8 else 0, 10, (N,), device="tpu", dtype=dtype).cpu()
    lo = -5 if dtype != torch.uint8 else 0
    assert t.dtype == dtype and t.min().item() == lo and t.max().item() == 9
    counts = torch.bincount(t.to(torch.int64) - lo)
    assert counts.min().item() > 0.8 * N / (10 - lo)
    r = torch.empty(N, device="tpu", dtype=dtype).random_(3).cpu()
    assert r.min().item() == 0 and r.max().item() == 2
    d = torch.empty(N, device="tpu", dtype=dtype).random_().cpu()
    assert d.min().item() >= 0


def test_random_default_ranges():
    b = torch.empty(1000, device="tpu", dtype=torch.bool).random_().cpu()
    assert b.any() and not b.all()
    f = torch.empty(N, device="tpu").random_().cpu()
    assert f.max().item() <= 2 ** 24 and f.max().item() > 2 ** 23 and torch.equal(f, f.round())


def test_randperm():
    for n in (0, 1, 10, 1000):
        p = torch.randperm(n, device="tpu").cpu()
        assert p.dtype == torch.int64 and torch.equal(p.sort().values, torch.arange(n))
    p = torch.randperm(50, device="tpu", dtype=torch.int32).cpu()
    assert p.dtype == torch.int32 and torch.equal(p.sort().values, torch.arange(50, dtype=torch.int32))
    out = torch.empty(0, dtype=torch.int64, device="tpu")
    torch.randperm(20, out=out)
    assert torch.equal(out.cpu().sort().values, torch.arange(20))


def test_multinomial():
    probs = torch.tensor([0.1, 0.0, 0.6, 0.3], device="tpu")
    draws = torch.multinomial(probs, N, replacement=True).cpu()
    freq = torch.bincount(draws, minlength=4).double() / N
    assert torch.allclose(freq, probs.cpu().double(), atol=0.01)
    rows = torch.tensor([[1.0, 1.0, 1.0, 0.0], [0.0, 5.0, 0.0, 5.0]], device="tpu")
    s = torch.multinomial(rows, 2).cpu()
    assert s.shape == (2, 2)
    for row, picked in zip(rows.cpu(), s):
        assert len(set(picked.tolist())) == 2 and all(row[i] > 0 for i in picked)
    # without replacement, first pick follows the probabilities
    first = torch.multinomial(probs.expand(20000, 4).contiguous(), 2).cpu()[:, 0]
    assert abs((first == 2).double().mean().item() - 0.6) < 0.02
    with pytest.raises(RuntimeError):
        torch.multinomial(probs, 5)


def test_exponential_geometric_lognormal_cauchy():
    mean, std, lo, _ = _stats(torch.empty(N, device="tpu").exponential_(2.0))
    assert abs(mean - 0.5) < 0.01 and abs(std - 0.5) < 0.02 and lo >= 0
    g = torch.empty(N, device="tpu").geometric_(0.25).cpu()
    assert g.min().item() >= 1 and torch.equal(g, g.round()) and abs(g.mean().item() - 4) < 0.1
    ln = torch.empty(N, device="tpu", dtype=torch.float64).log_normal_(0.5, 0.25).cpu()
    assert abs(ln.log().mean().item() - 0.5) < 0.01 and abs(ln.log().std().item() - 0.25) < 0.01
    c = torch.empty(N, device="tpu").cauchy_(1.0, 2.0).cpu()
    assert abs(c.median().item() - 1.0) < 0.1
    q = torch.quantile(c, torch.tensor([0.25, 0.75]))  # quartiles at median -/+ sigma
    assert abs(q[0].item() + 1.0) < 0.15 and abs(q[1].item() - 3.0) < 0.15


def test_gamma_dirichlet_poisson_binomial_samples():
    mean, std, lo, _ = _stats(torch._standard_gamma(torch.full((N,), 2.5, device="tpu")))
    assert abs(mean - 2.5) < 0.03 and abs(std - 2.5 ** 0.5) < 0.03 and lo > 0
    # the CPU never returns 0 from a gamma draw: alpha = 0 gives the smallest normal
    assert torch._standard_gamma(torch.zeros(3, device="tpu")).cpu().eq(torch.finfo(torch.float32).tiny).all()
    d = torch._sample_dirichlet(torch.tensor([1.0, 2.0, 3.0], device="tpu").expand(N, 3)).cpu()
    torch.testing.assert_close(d.sum(1), torch.ones(N))
    torch.testing.assert_close(d.mean(0), torch.tensor([1 / 6, 2 / 6, 3 / 6]), atol=0.005, rtol=0)
    p = torch.poisson(torch.full((N,), 7.0, device="tpu", dtype=torch.float64)).cpu()
    assert p.dtype == torch.float64 and torch.equal(p, p.round()) and abs(p.mean().item() - 7) < 0.05
    b = torch.binomial(torch.full((N,), 20.0, device="tpu"), torch.full((N,), 0.3, device="tpu")).cpu()
    assert abs(b.mean().item() - 6) < 0.05 and abs(b.var().item() - 4.2) < 0.1 and b.max().item() <= 20
    edges = torch.binomial(torch.tensor([3.0, -1.0, 5.0], device="tpu"), torch.tensor([1.5, 0.5, 0.0], device="tpu"))
    assert edges.cpu().tolist() == [3.0, 0.0, 0.0]  # the CPU's: p >= 1 gives n, n <= 0 or p <= 0 gives 0
    for rate in (-1.0, float("nan")):
        with pytest.raises(RuntimeError, match="invalid Poisson rate"):
            torch.poisson(torch.tensor([1.0, rate], device="tpu"))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_gamma_and_dirichlet_reparameterized_gradients(dtype):
    # _standard_gamma_grad / _dirichlet_grad are deterministic functions of a
    # sample; both are compared on the same samples with the CPU (float64 for
    # the Dirichlet's, whose float32 CPU series loses digits near x = 1)
    g = torch.Generator().manual_seed(0)
    alpha = torch.exp(torch.randn(2000, generator=g, dtype=torch.float64) * 2.5)
    x = torch._standard_gamma(alpha)
    expected = torch._standard_gamma_grad(alpha.to(dtype), x.to(dtype))
    got = torch._standard_gamma_grad(alpha.to(dtype).to("tpu"), x.to(dtype).to("tpu")).cpu()
    torch.testing.assert_close(got, expected)
    a, b = (torch.exp(torch.randn(2000, generator=g, dtype=torch.float64) * 2) for _ in range(2))
    xb = torch.distributions.Beta(a, b).sample().clamp(1e-6, 1 - 1e-6)
    expected = torch._dirichlet_grad(xb, a, a + b).to(dtype)
    got = torch._dirichlet_grad(*(t.to(dtype).to("tpu") for t in (xb, a, a + b))).cpu()
    torch.testing.assert_close(got, expected, rtol=1e-5 if dtype == torch.float32 else 1e-7, atol=1e-6)


def test_distribution_rsample_backpropagates():
    concentration = torch.tensor([0.5, 2.0, 9.0], device="tpu", requires_grad=True)
    torch.distributions.Gamma(concentration, 1.0).rsample((1000,)).mean(0).sum().backward()
    # d E[x] / d alpha = 1 for Gamma(alpha, 1): the sample mean's gradient is near 1
    assert ((concentration.grad.cpu() - 1).abs() < 0.15).all()
    conc = torch.tensor([1.0, 2.0, 3.0], device="tpu", requires_grad=True)
    torch.distributions.Dirichlet(conc).rsample((500,))[:, 0].mean().backward()
    assert conc.grad.shape == (3,) and torch.isfinite(conc.grad.cpu()).all()
    assert torch.distributions.StudentT(torch.tensor([3.0], device="tpu")).rsample((4,)).shape == (4, 1)


def test_rand_like_and_dropout_mask_shapes():
    x = torch.zeros(3, 4, device="tpu", dtype=torch.float64)
    r = torch.rand_like(x)
    assert r.dtype == torch.float64 and r.device.type == "tpu" and r.shape == (3, 4)
    n = torch.randn_like(x.t())
    assert n.shape == (4, 3)
    i = torch.randint_like(x, 5)
    assert i.cpu().max().item() < 5


def test_no_fallback():
    assert not any(k.startswith(("aten::uniform", "aten::normal", "aten::random", "aten::bernoulli",
                                 "aten::_standard_gamma", "aten::_sample_dirichlet", "aten::_dirichlet_grad",
                                 "aten::poisson", "aten::binomial"))
                   for k in torch_tpu.fallback_ops())


@pytest.mark.parametrize("dtype", [torch.int16, torch.int64, torch.bool, torch.float32])
def test_randn_of_nothing_any_dtype_as_cpu(dtype):
    """The CPU draws nothing for an empty tensor and checks no dtype there
    (std still: a negative one is refused)."""
    assert torch.randn(0, dtype=dtype, device="tpu").dtype == dtype
    assert torch.empty(0, 3, dtype=dtype, device="tpu").normal_().shape == (0, 3)
    with pytest.raises(RuntimeError, match="normal expects std >= 0.0"):
        torch.empty(0, dtype=dtype, device="tpu").normal_(0, -1)
