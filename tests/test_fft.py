"""torch.fft on tpu against PyTorch's CPU kernels: values and gradients."""
import pytest
import torch

import torch_tpu

NORMS = [None, "ortho", "forward"]


def _check(fn, x, atol=1e-5, rtol=1e-5, grad=True):
    cpu = x.clone().requires_grad_(grad)
    tpu = x.to("tpu").requires_grad_(grad)
    want, got = fn(cpu), fn(tpu)
    torch.testing.assert_close(got.cpu(), want.detach(), atol=atol, rtol=rtol)
    if grad:
        up = torch.randn(want.shape, dtype=want.dtype, generator=torch.Generator().manual_seed(1))
        want.backward(up)
        got.backward(up.to("tpu"))
        torch.testing.assert_close(tpu.grad.cpu(), cpu.grad, atol=atol, rtol=rtol)


def _real(*shape):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(0))


def _complex(*shape):
    return torch.randn(*shape, dtype=torch.complex64, generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("name, make, kwargs", [
    ("fft", _real, {}), ("ifft", _complex, {}), ("rfft", _real, {}), ("irfft", _complex, {"n": 9}),
    ("hfft", _complex, {}), ("ihfft", _real, {}), ("fftn", _complex, {"dim": (0, 2)}),
    ("rfft2", _real, {}), ("irfftn", _complex, {"s": (5, 7)}), ("ihfft2", _real, {}),
])
def test_fft_matches_cpu(name, make, kwargs, norm):
    fn = getattr(torch.fft, name)
    _check(lambda t: fn(t, norm=norm, **kwargs), make(4, 6, 8), atol=1e-4)
    assert torch_tpu.fallback_ops() == {} or not any("fft" in k for k in torch_tpu.fallback_ops())


def test_stft_matches_cpu():
    window = torch.hann_window(16)
    _check(lambda t: torch.stft(t, 16, hop_length=4, window=window.to(t.device), return_complex=True),
           _real(2, 128), atol=1e-4)


def test_lazy_conjugate_and_negative_views_read_and_write_through():
    x = torch.tensor([1 + 2j, 3 - 1j], dtype=torch.complex64)
    t = x.to("tpu")
    assert t.conj().is_conj()
    assert torch.equal(t.conj().cpu().resolve_conj(), x.conj().resolve_conj())
    assert torch.equal((t.conj() * 2).cpu(), x.conj() * 2)
    assert torch.equal(t.conj().imag.cpu(), x.conj().imag)
    assert torch.equal(torch._neg_view(t).cpu().resolve_neg(), -x)
    assert torch.equal(torch.conj_physical(t.conj()).cpu(), x)
    written, want = x.clone().to("tpu"), x.clone()
    written.conj().add_(1)
    want.conj().add_(1)
    assert torch.equal(written.cpu(), want)
    written.conj().copy_(torch.tensor([5 + 5j, 6 - 6j]))
    want.conj().copy_(torch.tensor([5 + 5j, 6 - 6j]))
    assert torch.equal(written.cpu(), want)


def _layout(t):
    """Strides of the dims that have more than one element (the rest address nothing)."""
    return tuple(st for st, n in zip(t.stride(), t.shape) if n > 1)


@pytest.mark.parametrize("shape,perm,dims", [((5, 6, 7), None, [0, 1, 2]), ((5, 6, 7), None, [0, 1]),
                                             ((5, 6, 7), (1, 0, 2), [0, 1, 2]), ((4, 5, 6, 7), None, [1, 3])])
def test_real_to_complex_result_is_laid_out_as_on_the_cpu(shape, perm, dims):
    """rfftn's result is row-major on the CPU where the meta kernel strides it
    otherwise: ``torch.fft.rfftn(x).view(-1)`` works there, and so here."""
    x = torch.randn(shape, generator=torch.Generator().manual_seed(0))
    x = x.permute(perm) if perm else x
    cpu = torch.ops.aten._fft_r2c(x, dims, 0, True)
    tpu = torch.ops.aten._fft_r2c(x.to("tpu"), dims, 0, True)
    assert _layout(tpu) == _layout(cpu)
    torch.testing.assert_close(tpu.cpu(), cpu, atol=1e-4, rtol=1e-5)
    if perm is None and len(dims) == len(shape):
        assert torch.fft.rfftn(x.to("tpu")).view(-1).shape == torch.fft.rfftn(x).view(-1).shape


def test_hermitian_transform_result_is_laid_out_as_on_the_cpu():
    """hfftn over (0, -1): c2c then c2r, each laid out as the CPU lays it out."""
    x = torch.randn(5, 6, 7, dtype=torch.complex64, generator=torch.Generator().manual_seed(0))
    cpu = torch.fft.hfftn(x, dim=(0, -1))
    tpu = torch.fft.hfftn(x.to("tpu"), dim=(0, -1))
    assert _layout(tpu) == _layout(cpu) == (12, 60, 1)
    torch.testing.assert_close(tpu.cpu(), cpu, atol=1e-4, rtol=1e-5)
