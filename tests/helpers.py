"""Comparing tpu results with PyTorch's CPU results."""
import contextlib

import pytest
import torch


@pytest.fixture(autouse=True)
def strict(strict):
    """Import into a test module to make any CPU fallback an error in every
    test there (conftest's ``strict``, made autouse)."""


def sample(*shape, dtype=torch.float32):
    """A fixed-seed CPU tensor: normal floats, or integers in [-50, 50)."""
    g = torch.Generator().manual_seed(0)
    if dtype.is_floating_point:
        return torch.randn(*shape, generator=g, dtype=dtype)
    return torch.randint(-50, 50, shape, generator=g, dtype=dtype)


def to_cpu(x):
    if isinstance(x, torch.Tensor):
        return x.detach().cpu()
    if isinstance(x, (list, tuple)):
        return type(x)(to_cpu(e) for e in x)
    return x


def to_tpu(x):
    if isinstance(x, torch.Tensor):
        return x.detach().to("tpu").requires_grad_(x.requires_grad)
    if isinstance(x, (list, tuple)):
        return type(x)(to_tpu(e) for e in x)
    return x


def assert_same(tpu_result, cpu_result, exact=False, **tol):
    """tpu result equals the CPU one: bit for bit if ``exact``, else to PyTorch's tolerances."""
    got = to_cpu(tpu_result)
    if isinstance(cpu_result, torch.Tensor):
        assert isinstance(got, torch.Tensor), type(got)
        assert got.dtype == cpu_result.dtype, (got.dtype, cpu_result.dtype)
        assert got.shape == cpu_result.shape, (got.shape, cpu_result.shape)
        if exact:
            assert torch.equal(got, cpu_result) or (
                got.is_floating_point() and torch.equal(got.nan_to_num(), cpu_result.nan_to_num())), \
                (got, cpu_result)
        else:
            torch.testing.assert_close(got, cpu_result, equal_nan=True, **tol)
    elif isinstance(cpu_result, (list, tuple)):
        assert len(got) == len(cpu_result)
        for g, c in zip(got, cpu_result):
            assert_same(g, c, exact=exact, **tol)
    else:
        assert got == cpu_result, (got, cpu_result)


def run_both(fn, *args, exact=False, **kwargs):
    """fn on CPU inputs and on the same inputs moved to tpu; the results must match."""
    cpu = fn(*args, **kwargs)
    tpu = fn(*to_tpu(list(args)), **{k: to_tpu(v) for k, v in kwargs.items()})
    assert_same(tpu, cpu, exact=exact)
    return tpu, cpu


@contextlib.contextmanager
def raises_at_sync(exception, match=None):
    """Expect ``exception`` from the block or, for a check on device values
    (an index range), at the next wait for the device, as on CUDA."""
    with pytest.raises(exception, match=match) as info:
        yield info
        torch.tpu.synchronize()
