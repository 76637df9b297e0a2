"""Readiness for real accelerators without one: the supported JAX range, the
install extras the env report names, and what a TPU does with 64-bit types
(simulated here: the checks a TPU platform turns on)."""
import os
import warnings

import jax
import pytest
import torch

import torch_tpu  # noqa: F401
from torch_tpu import env_report, install_hints, runtime, tpu_dtypes, versions


# ---- the JAX range ---------------------------------------------------------------------

def test_older_jax_fails_at_import_naming_the_range(monkeypatch):
    monkeypatch.setattr(jax, "__version__", "0.6.2")
    with pytest.raises(ImportError, match=r"needs jax>=0\.10,<0\.12, but jax 0\.6\.2 is installed"):
        versions.check()
    versions.check("0.10.2")
    versions.check("0.11.0")
    with pytest.warns(UserWarning, match="untested"):
        versions.check("0.12.1")


ROOT = os.path.join(os.path.dirname(__file__), "..")


def _project():
    """pyproject.toml's [project] table."""
    import tomllib
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)["project"]


def test_pyproject_declares_the_checked_range():
    project = _project()
    assert "jax>=0.10,<0.12" in project["dependencies"] and versions.SUPPORTED_TEXT == "jax>=0.10,<0.12"
    extras = project["optional-dependencies"]
    assert extras["tpu"] == ["jax[tpu]>=0.10,<0.12"]
    assert extras["cuda12"] == ["jax[cuda12]>=0.10,<0.12"] and extras["cuda13"] == ["jax[cuda13]>=0.10,<0.12"]
    assert any(r.startswith("torch>=2.11") for r in project["dependencies"])
    with open(os.path.join(ROOT, ".ci", "run")) as f:
        assert "[tpu]" not in f.read()  # CI installs no accelerator plugin


def test_pyproject_skips_the_slow_importing_ml_dtypes():
    # ml_dtypes 0.7.0 spends ~0.6 s of every `import torch` (the autoload
    # imports jax, which imports it) registering NumPy loops; 0.6.0 ~4 ms
    import importlib.metadata
    assert "ml_dtypes>=0.5,!=0.7.0" in _project()["dependencies"]
    assert importlib.metadata.version("ml_dtypes") != "0.7.0"  # what the install resolved


def test_env_report_flags_the_slow_importing_ml_dtypes(monkeypatch):
    real = env_report._version
    monkeypatch.setattr(env_report, "_version", lambda d: "0.7.0" if d == "ml_dtypes" else real(d))
    assert "pip install 'ml_dtypes!=0.7.0'" in env_report.versions()["ml_dtypes"]
    monkeypatch.setattr(env_report, "_version", lambda d: "0.6.0" if d == "ml_dtypes" else real(d))
    assert env_report.versions()["ml_dtypes"] == "0.6.0"


# ---- install hints -------------------------------------------------------------------

def test_install_hints_name_the_extra(monkeypatch):
    monkeypatch.setattr(install_hints, "installed", lambda m: False)
    monkeypatch.setattr(install_hints, "tpu_attached", lambda: False)
    monkeypatch.setattr(install_hints, "nvidia_driver", lambda: (580, 65))
    assert "torch_tpu[cuda13]" in install_hints.hint("gpu")
    assert "torch_tpu[cuda13]" in install_hints.hint("cpu") and "TORCH_TPU_PLATFORM=gpu" in install_hints.hint("cpu")
    monkeypatch.setattr(install_hints, "nvidia_driver", lambda: (550, 54))
    assert "torch_tpu[cuda12]" in install_hints.hint("gpu")
    assert "torch_tpu[tpu]" in install_hints.hint("tpu")
    monkeypatch.setattr(install_hints, "nvidia_driver", lambda: None)
    assert install_hints.hint("cpu") is None  # a plain CPU machine: nothing to install
    monkeypatch.setattr(install_hints, "tpu_attached", lambda: True)
    assert "torch_tpu[tpu]" in install_hints.hint("cpu")


def test_env_report_names_the_extra_when_the_device_cannot_start(monkeypatch, capsys):
    def fail(run_self_test=True):
        raise RuntimeError("torch_tpu could not start the JAX platform 'gpu': no gpu")
    monkeypatch.setattr(env_report, "report", fail)
    monkeypatch.setenv("TORCH_TPU_PLATFORM", "gpu")
    monkeypatch.setattr(install_hints, "installed", lambda m: False)
    monkeypatch.setattr(install_hints, "nvidia_driver", lambda: (570, 1))
    assert env_report.main(["--no-self-test"]) == 1
    err = capsys.readouterr().err
    assert "cannot start" in err and 'pip install "torch_tpu[cuda12]"' in err


def test_env_report_device_section_carries_the_hint(monkeypatch):
    monkeypatch.setattr(install_hints, "hint", lambda platform: f"hint for {platform}")
    assert env_report.device_info()["install hint"] == "hint for cpu"


# ---- 64-bit types on a TPU ---------------------------------------------------------------

def test_int64_stays_exact_past_32_bits_on_a_tpu():
    big = torch.tensor([2**40 + 1, -(2**35) - 3, 7])
    with tpu_dtypes.simulate_tpu(), warnings.catch_warnings():
        warnings.simplefilter("error")  # int64 never warns: every PyTorch program has it
        t = big.to("tpu")
        out = (t * 3 + 1).cpu()
    assert out.dtype == torch.int64 and torch.equal(out, big * 3 + 1)


def test_float64_warns_once_and_stays_float64_on_a_tpu():
    x = torch.tensor([1.0 + 2**-40, 3.0], dtype=torch.float64)
    with tpu_dtypes.simulate_tpu():
        with pytest.warns(UserWarning, match="float64 on a TPU is emulated"):
            t = x.to("tpu")
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # once per process
            e = torch.empty(3, dtype=torch.float64, device="tpu")
            u = x.to("tpu")
    assert t.dtype == e.dtype == torch.float64 and torch.equal(u.cpu(), x)


def test_complex128_is_refused_on_a_tpu_with_pytorchs_error_type():
    z = torch.tensor([1 + 2j], dtype=torch.complex128)
    with tpu_dtypes.simulate_tpu():
        with pytest.raises(TypeError, match="complex128 is not supported on a TPU.*complex64"):
            z.to("tpu")
        with pytest.raises(TypeError, match="complex128"):
            torch.empty(2, dtype=torch.complex128, device="tpu")
        assert z.to(torch.complex64).to("tpu").dtype == torch.complex64
    if runtime.jax_device().platform != "tpu":
        assert z.to("tpu").dtype == torch.complex128  # CPU and GPU platforms keep it


def test_the_lowering_check_flags_what_a_tpu_emulates():
    from torch_tpu.lowering_check import analysis
    text = """
    %0 = stablehlo.add %a, %b : tensor<4xi64>
    %1 = stablehlo.convert %0 : (tensor<4xi64>) -> tensor<4xf64>
    %2 = "stablehlo.gather"(%x, %0) <{}> : (tensor<8xf32>, tensor<4xi64>) -> tensor<4xf32>
    %3 = stablehlo.multiply %c, %c : tensor<2xcomplex<f64>>
    %4 = stablehlo.reshape %0 : (tensor<4xi64>) -> tensor<2x2xi64>
    """
    found = analysis.contents(text)
    assert found.int64_arithmetic == {"add": 1} and found.int64_indexing == {"gather": 1}
    assert found.float64_ops == 1 and found.complex_types == {"complex128"}
    lines = found.poor_dtypes()
    assert lines[0].startswith("complex128") and any(line.startswith("float64") for line in lines)
