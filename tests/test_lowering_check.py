"""The TPU lowering check (torch.tpu.lowering_check, python -m torch_tpu.lower):
programs lowered for TPU generations on a machine without a TPU.  Lowering
only: nothing here compiles for or runs on a TPU."""
import os
import sys

import jax
import jax.numpy as jnp
import pytest
import torch
from jax.experimental import pallas as pl

import torch_tpu  # noqa: F401
from torch_tpu import runtime, target
from torch_tpu.lowering_check import chips, kernels, lower_jax
from torch_tpu.pallas import interpret, sdpa

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
import models  # noqa: E402

S = jax.ShapeDtypeStruct


# ---- the chip hook (chips.py): fails loudly when JAX moves what it relies on --------

def test_jax_still_reads_the_chip_from_the_abstract_mesh():
    from jax._src.pallas.mosaic import tpu_info  # where Mosaic reads the chip (private)
    expected = {"v4": "v4", "v5e": "v5e", "v5p": "v5p", "v6e": "v6e", "v7x": "7x"}
    for name, chip in chips.CHIPS.items():
        version = tpu_info.chip_version_from_device_kind(chip.device_kind)
        assert version is not None and version.value == expected[name], (
            f"JAX no longer maps device kind {chip.device_kind!r} to TPU {expected[name]}: "
            "update torch_tpu/lowering_check/chips.py")
        with chips.lowering_for(chip):
            assert tpu_info.get_device_kind() == chip.device_kind, (
                "the Pallas TPU lowering no longer reads the device kind from "
                "jax.sharding.use_abstract_mesh: update torch_tpu/lowering_check/chips.py")
            assert tpu_info.get_tpu_info().chip_version.value == expected[name]


def _tiny_kernel(block):
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2
    return lambda x: pl.pallas_call(kernel, grid=(1,), in_specs=[pl.BlockSpec(block, lambda i: (0, 0))],
                                    out_specs=pl.BlockSpec(block, lambda i: (0, 0)),
                                    out_shape=S(x.shape, x.dtype))(x)


def test_without_a_chip_the_pallas_lowering_refuses():
    # what chips.lowering_for exists for: JAX alone asks the CPU device for its TPU kind
    case = kernels.attention(True, None, False, 128, 256, jnp.float32, False)
    with target.lowering_for_tpu(), pytest.raises(Exception, match="Unsupported TPU device kind"):
        jax.export.export(jax.jit(case.fn), platforms=["tpu"])(*case.specs)
    assert lower_jax(case.fn, *case.specs, chips=("v5e",)).ok


def test_mosaic_block_rules_are_enforced():
    ok = lower_jax(_tiny_kernel((8, 128)), S((16, 256), jnp.float32), chips=("v5e",))
    assert ok.ok and len(ok.kernels()) == 1
    bad = lower_jax(_tiny_kernel((3, 5)), S((16, 256), jnp.float32), chips=("v5e", "v6e"))
    assert not bad.ok
    assert all("divisible by 8 and 128" in e for e in bad.graphs[0].errors.values())
    assert "FAILED" in str(bad) and "FAILED" in bad.markdown()


def test_unknown_chip_is_named():
    with pytest.raises(ValueError, match="unknown TPU generation 'v9'"):
        lower_jax(lambda x: x, S((2,), jnp.float32), chips=("v9",))
    assert chips.chip("TPU v5e").name == "v5e" and chips.chip("v5litepod").name == "v5e"


# ---- the built-in Pallas kernels -----------------------------------------------------

def _assert_lowers(case, chip_names):
    report = lower_jax(case.fn, *case.specs, chips=chip_names, name=case.name)
    assert report.ok, str(report)
    names = report.kernels()
    assert names and all(k.startswith(("flash_attention", "rms_norm")) for k in names), names
    if "bwd" in case.name and case.name.startswith("flash"):
        assert {"flash_attention_dkdv", "flash_attention_dq"} <= set(names)


@pytest.mark.parametrize("case", kernels.representative_cases(), ids=lambda c: c.name)
def test_builtin_kernels_lower_for_every_chip(case):
    _assert_lowers(case, chips.DEFAULT_CHIPS)


@pytest.mark.slow
@pytest.mark.parametrize("case", list(kernels.all_cases()), ids=lambda c: c.name)
def test_builtin_kernels_lower_full_cross_product(case):
    _assert_lowers(case, chips.DEFAULT_CHIPS + ("v7x",))


# ---- torch programs through the compile path -----------------------------------------

def test_torch_ops_kernels_lower_with_their_backward():
    q = torch.randn(1, 2, 128, 64, device="tpu", requires_grad=True)
    x = torch.randn(16, 128, device="tpu", requires_grad=True)
    w = torch.ones(128, device="tpu", requires_grad=True)

    def step(q, x, w):
        out = torch.tpu.ops.flash_attention(q, q, q, is_causal=True).sum()
        out = out + torch.tpu.ops.rms_norm(x, (128,), w).sum()
        out.backward()
        return out
    report = torch.tpu.lowering_check(step, q, x, w, chips=("v5e",), execute=False)
    assert report.ok, str(report)
    fwd, bwd = report.graphs  # one graph each way: the ops stay in the graph
    assert sorted(fwd.kernels) == ["flash_attention_fwd", "rms_norm_fwd"]
    assert {"flash_attention_dkdv", "flash_attention_dq", "rms_norm_bwd"} <= set(bwd.kernels)


def _gpt_training_step(cfg, make_optimizer):
    """(model, step(x, y), x, y): one training step of the benchmark GPT on tpu."""
    torch.manual_seed(0)
    model = models.GPT(cfg).to("tpu")
    opt = make_optimizer(model.parameters())
    x, y = (t.to("tpu") for t in models.gpt_batch(cfg, torch.Generator().manual_seed(0)))

    def step(x, y):
        loss = model(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss
    return model, step, x, y


def test_gpt_training_step_lowers_with_the_pallas_flash_kernel():
    cfg = models.GPTConfig(layers=1, d_model=128, heads=2, seq=128, vocab=256, batch=2)
    _, step, x, y = _gpt_training_step(cfg, lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9))
    report = torch.tpu.lowering_check(step, x, y, chips=("v5e",), execute=False)
    assert report.ok, str(report)
    kinds = [g.graph.split()[0] for g in report.graphs]
    assert kinds == ["forward", "backward", "inference"], kinds  # model, its gradients, SGD
    forward, backward, optimizer = report.graphs
    # SDPA picked the Pallas flash kernel (Mosaic custom calls), as on a TPU
    assert forward.kernels == ["flash_attention_fwd"]
    assert {"flash_attention_dkdv", "flash_attention_dq"} <= set(backward.kernels)
    assert optimizer.kernels == []
    assert any("int64" in line for line in forward.poor_dtypes())  # token ids, positions
    # the choice was the check's: outside it the platform decides again (the CPU: the fused op)
    on_tpu = runtime.jax_device().platform == "tpu"
    assert sdpa.on_tpu() == on_tpu and interpret.enabled() == (not on_tpu)


@pytest.mark.slow
def test_gpt_adamw_step_runs_and_lowers_for_every_chip():
    cfg = models.GPTConfig(layers=2, d_model=128, heads=2, seq=128, vocab=256, batch=2)
    model, step, x, y = _gpt_training_step(cfg, lambda p: torch.optim.AdamW(p, lr=1e-3))
    before = model.tok.weight.detach().cpu().clone()
    report = torch.tpu.lowering_check(step, x, y)  # runs the step here, interpreted kernels included
    assert report.ok, str(report)
    assert report.kernels().count("flash_attention_fwd") >= 2 * cfg.layers  # forward, and again in backward
    assert not torch.equal(model.tok.weight.detach().cpu(), before)


def test_execute_runs_the_step_and_flags_poor_dtypes():
    lin = torch.nn.Linear(4, 2).to("tpu")
    opt = torch.optim.SGD(lin.parameters(), lr=0.5)
    before = lin.weight.detach().cpu().clone()
    x = torch.randn(3, 4, device="tpu", dtype=torch.float64)
    idx = torch.tensor([0, 2], device="tpu")

    def step(x, idx):
        loss = lin(x.float()).sum() + (idx * 3).sum() + x.sum() + torch.view_as_complex(
            torch.stack([x, x], -1)).abs().sum()
        loss.backward()
        opt.step()
        return loss
    report = torch.tpu.lowering_check(step, x, idx, chips=("v6e",))
    assert report.ok, str(report)
    assert not torch.equal(lin.weight.detach().cpu(), before)  # the step ran here
    flags = " ".join(report.graphs[0].poor_dtypes())
    assert "complex128" in flags and "float64" in flags and "int64 arithmetic" in flags


def test_command_line(capsys, tmp_path):
    from torch_tpu import lower
    script = tmp_path / "prog.py"
    script.write_text("import torch\n"
                      "def make():\n"
                      "    x = torch.randn(8, 128, device='tpu')\n"
                      "    return (lambda x: (x * 2).relu().sum()), (x,)\n")
    assert lower.main([f"{script}:make", "--chips", "v5e,v6e", "--no-run",
                       "--stablehlo", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "v5e ok, v6e ok" in out
    assert sorted(os.listdir(tmp_path / "out")) == ["inference_1.v5e.mlir", "inference_1.v6e.mlir"]
    with pytest.raises(SystemExit):
        lower.main([])  # neither a target nor --kernels


def test_repeated_checks_compile_afresh_and_name_graph_breaks():
    lin = torch.nn.Linear(8, 8).to("tpu")
    x = torch.randn(4, 8, device="tpu")

    def f(x):
        y = lin(x)
        print(end="")  # Dynamo cannot trace print: a graph break
        return y.relu().sum()
    for _ in range(10):  # more than Dynamo's recompile limit (8)
        report = torch.tpu.lowering_check(f, x, chips=("v5e",), execute=False)
        assert report.ok and len(report.graphs) == 2, str(report)
    assert sum(report.graph_breaks.values()) == 1 and "graph breaks" in str(report)
    assert torch.compile(f, backend="tpu")(x).item() == pytest.approx(f(x).item())
