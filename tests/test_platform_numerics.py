"""Numerics XLA decides, not torch_tpu (docs/guide.md, "Dtypes on a TPU"):
what they are, pinned so the guide's description fails loudly if XLA changes."""
import torch

import torch_tpu  # noqa: F401


def test_subnormals_are_flushed_in_arithmetic_and_kept_by_copies():
    x = torch.tensor([1e-40, -3e-39, 1.0])
    t = x.to("tpu")
    assert t.cpu().tolist() == x.tolist()  # a copy moves bits
    assert (-t).cpu().tolist() == (-x).tolist()  # a sign flip too
    assert (t * 1.5).cpu().tolist() == [0.0, 0.0, 1.5]  # XLA:CPU's flush-to-zero (PyTorch's CPU keeps 1.5e-40)
    assert torch.tensor([1e-310], dtype=torch.float64, device="tpu").mul(1.5).item() == 0.0


def test_fused_multiply_add_is_one_rounding_where_strict_is_cpu_exact():
    torch.manual_seed(0)
    x, y = torch.randn(64, 64), torch.randn(64, 64)
    expected = x * 1.0001 + y
    c = torch.tensor(1.0001).double()  # the number as float32, as both devices use it
    fma = (x.double() * c + y.double()).float()  # the exact x * c, then one rounding of the sum
    strict = (x.to("tpu") * 1.0001 + y.to("tpu")).cpu()
    with torch.tpu.set_eager_mode("fused"):
        fused = (x.to("tpu") * 1.0001 + y.to("tpu")).cpu()
    assert torch.equal(strict, expected)
    assert (fused != expected).any()  # XLA contracted (the guide says so)
    assert torch.equal(fused[fused != expected], fma[fused != expected])  # each difference is the FMA's rounding
