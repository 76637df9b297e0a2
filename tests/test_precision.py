"""torch.tpu.precision / torch.set_float32_matmul_precision: the setting reaches
the lowered programs (the dots' and convolutions' precision config) in every
execution path, and cached executables are keyed on it.  On the CPU the
numbers barely differ, so the tests read the programs."""
import os
import re

import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from torch_tpu.compile import backend
from torch_tpu.eager import fusion
from torch_tpu.ops import registry

P = torch.tpu.Precision
HLO_NAMES = {P.DEFAULT: None, P.HIGH: "high", P.HIGHEST: "highest"}


@pytest.fixture(autouse=True)
def _restore_precision():
    before = torch.get_float32_matmul_precision()
    yield
    torch.set_float32_matmul_precision(before)


def _operand_precisions(hlo: str, op: str):
    """The operand_precision of each ``op`` (dot, convolution) in an HLO text (None: DEFAULT)."""
    found = []
    for line in hlo.splitlines():
        if re.search(rf"= \S+ {op}\(", line):
            m = re.search(r"operand_precision=\{(\w+),(\w+)\}", line)
            found.append(m.group(1) if m else None)
    return found


def _fused_hlo(fn, fresh=True):
    """The HLO of the fused chains compiled while ``fn`` runs in fused mode."""
    if fresh:
        fusion.clear_cache()
    before = set(fusion._cache)
    with torch.tpu.set_eager_mode("fused"):
        fn().cpu()
    return "\n".join(exe.as_text() for key, exe in fusion._cache.items() if key not in before)


def test_names_and_mapping():
    assert torch.tpu.precision is P.HIGHEST  # PyTorch's default "highest"
    for name, member in (("medium", P.DEFAULT), ("high", P.HIGH), ("highest", P.HIGHEST)):
        torch.set_float32_matmul_precision(name)
        assert torch.tpu.precision is member
        assert torch.get_float32_matmul_precision() == name
    torch.tpu.precision = P.HIGH
    assert torch.get_float32_matmul_precision() == "high"
    with torch.tpu.set_precision(P.DEFAULT):
        assert torch.tpu.precision is P.DEFAULT
    assert torch.tpu.precision is P.HIGH
    with pytest.raises(ValueError, match="torch.tpu.Precision"):
        torch.tpu.precision = "fast"
    with pytest.warns(UserWarning, match="no effect"):  # PyTorch's own answer to a bad name
        torch.set_float32_matmul_precision("fast")
    assert torch.tpu.precision is P.HIGH


def test_strict_eager_matmul_keys_and_lowers_the_setting():
    a, b = torch.randn(8, 8, device="tpu"), torch.randn(8, 8, device="tpu")
    mm = registry.KERNELS[torch.ops.aten.mm.default]
    z = jnp.zeros((8, 8), np.float32)
    texts = {}
    for member in P:
        torch.tpu.precision = member
        out = a @ b
        torch.testing.assert_close(out.cpu(), a.cpu() @ b.cpu(), rtol=1e-2, atol=1e-2)
        entry = next(e for k, e in mm.cache.items() if k[0][0][1] == registry.views.spec_of(a, np.float32)[0]
                     and k[-1] is member)
        texts[member] = entry.fn.lower(z, z).as_text()
    assert "precision = [DEFAULT, DEFAULT]" in texts[P.DEFAULT]
    assert "precision = [HIGH, HIGH]" in texts[P.HIGH]
    assert "precision = [HIGHEST, HIGHEST]" in texts[P.HIGHEST]


def test_fused_chains_are_keyed_on_the_setting():
    a, b = torch.randn(8, 8, device="tpu"), torch.randn(8, 8, device="tpu")
    fusion.clear_cache()
    for member in (P.HIGH, P.HIGHEST, P.DEFAULT):  # each change compiles the chain afresh
        torch.tpu.precision = member
        hlo = _fused_hlo(lambda: torch.relu(a @ b) + 1, fresh=False)
        assert _operand_precisions(hlo, "dot") == [HLO_NAMES[member]]
    torch.tpu.precision = P.HIGH  # back: whatever is compiled or reused is HIGH's
    hlo = _fused_hlo(lambda: torch.relu(a @ b) + 1, fresh=False)
    assert set(_operand_precisions(hlo, "dot")) <= {"high"}


def test_convolution_and_attention_follow_the_setting():
    x, w = torch.randn(2, 3, 8, 8, device="tpu"), torch.randn(4, 3, 3, 3, device="tpu")
    q = torch.randn(1, 2, 8, 16, device="tpu")
    torch.set_float32_matmul_precision("high")
    assert _operand_precisions(_fused_hlo(lambda: F.conv2d(x, w)), "convolution") == ["high"]
    dots = _operand_precisions(_fused_hlo(lambda: F.scaled_dot_product_attention(q, q, q)), "dot")
    assert dots and set(dots) == {"high"}
    torch.set_float32_matmul_precision("highest")
    assert _operand_precisions(_fused_hlo(lambda: F.conv2d(x, w)), "convolution") == ["highest"]


def test_other_dtypes_keep_full_precision():
    torch.set_float32_matmul_precision("medium")
    a = torch.randn(8, 8, device="tpu", dtype=torch.float64)
    assert _operand_precisions(_fused_hlo(lambda: a @ a), "dot") == ["highest"]
    torch.testing.assert_close((a @ a).cpu(), a.cpu() @ a.cpu())


def test_compiled_graphs_are_keyed_on_the_setting(monkeypatch):
    built = []
    original = backend.CompiledGraph._compile

    def recording(self, key, arrays):
        exe = original(self, key, arrays)
        built.append((key[-1], exe.as_text()))
        return exe

    monkeypatch.setattr(backend.CompiledGraph, "_compile", recording)
    f = torch.compile(lambda x, y: torch.tanh(x @ y) * 2, backend="tpu")
    a, b = torch.randn(8, 8, device="tpu"), torch.randn(8, 8, device="tpu")
    for member in (P.HIGH, P.HIGHEST, P.DEFAULT, P.HIGH):
        torch.tpu.precision = member
        torch.testing.assert_close(f(a, b).cpu(), torch.tanh(a.cpu() @ b.cpu()) * 2, rtol=1e-2, atol=1e-2)
    assert [m for m, _ in built] == [P.HIGH, P.HIGHEST, P.DEFAULT]  # the last call reused HIGH's
    for member, hlo in built:
        assert _operand_precisions(hlo, "dot") == [HLO_NAMES[member]]


def test_allow_excess_precision(monkeypatch):
    monkeypatch.setenv("XLA_FLAGS", "--xla_dump_to=/tmp/x")
    assert torch.tpu.allow_excess_precision is False  # unset: False, as Google's torch_tpu reports
    with pytest.warns(UserWarning, match="new processes"):  # XLA read its flags at start
        torch.tpu.allow_excess_precision = True
    assert os.environ["XLA_FLAGS"] == "--xla_dump_to=/tmp/x --xla_allow_excess_precision=true"
    assert torch.tpu.allow_excess_precision is True
    with pytest.warns(UserWarning):
        torch.tpu.allow_excess_precision = False
    assert torch.tpu.allow_excess_precision is False
