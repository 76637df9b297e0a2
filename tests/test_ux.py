"""First-user experience: ``python -m torch_tpu``, profiling, and the
TORCH_TPU_LOGS lines (recompiles, fallback, sync)."""
import logging
import os
import subprocess
import sys
import warnings

import pytest
import torch

from torch_tpu import logs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(args, **env):
    full = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), **env)
    return subprocess.run([sys.executable, "-m", "torch_tpu", *args], cwd=ROOT, env=full,
                          capture_output=True, text=True, timeout=240)


# ---- python -m torch_tpu -----------------------------------------------------

def test_env_report_lists_versions_device_cache_and_fallbacks_with_sync_logs():
    proc = _run([], TORCH_TPU_LOGS="sync,fallback")
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    for needle in ("torch_tpu", "torch ", "jax ", "jaxlib", "PJRT platform", "tpu:0",
                   "device memory", "eager mode", "compilation cache", "CPU fallbacks",
                   "ops and a training step : ok"):
        assert needle in out, (needle, out)
    assert torch.__version__ in out
    # The self-test's loss.item() calls are host reads: TORCH_TPU_LOGS=sync names them.
    assert "[torch_tpu.sync] host read of" in proc.stderr


def test_env_report_fails_clearly_when_the_device_cannot_start():
    import jax
    try:
        has_gpu = bool(jax.devices("gpu"))
    except RuntimeError:
        has_gpu = False
    if has_gpu:
        pytest.skip("this machine has a GPU")
    proc = _run(["--no-self-test"], TORCH_TPU_PLATFORM="gpu")
    assert proc.returncode == 1
    assert "the tpu device cannot start" in proc.stderr and "'gpu'" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_env_report_in_process_sections():
    from torch_tpu import env_report
    sections = env_report.report(run_self_test=False)
    assert set(sections) == {"Versions", "Device", "Settings"}
    assert sections["Settings"]["eager mode"] == torch.tpu.eager_mode.value
    text = env_report.format_report(sections)
    assert "torch_tpu environment report" in text and "PJRT platform" in text


# ---- profiling -----------------------------------------------------------------

def test_torch_profiler_table_names_tpu_ops():
    from torch.profiler import ProfilerActivity, profile
    x = torch.randn(16, 16, device="tpu")
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        y = (x @ x).relu().sum()
        y.item()
    names = {e.key for e in prof.key_averages()}
    assert {"aten::mm", "aten::relu", "aten::sum"} <= names
    assert "tpu::aten.mm.default" in names or "tpu::compile+run aten.mm.default" in names
    assert "tpu::" in prof.key_averages().table(row_limit=50)


def test_torch_profiler_sees_fused_chains_and_costs_nothing_when_off(tmp_path):
    from torch.profiler import profile
    from torch_tpu.eager import ranges as record
    assert record.torch_profiler._is_profiler_enabled is False
    x = torch.randn(8, 8, device="tpu")
    with torch.tpu.set_eager_mode("fused"):
        with profile() as prof:
            (x * 2 + 1).sum().item()
    assert any(e.key.startswith("tpu::fused chain") for e in prof.key_averages())
    trace = tmp_path / "trace.json"
    prof.export_chrome_trace(str(trace))
    assert "tpu::fused chain" in trace.read_text()


def test_raw_kernels_launch_inside_profiler_ranges():
    # hand-written kernels (data-dependent sizes) launch through the same
    # eager.launch as registered ones: their work shows as tpu:: ranges too
    from torch.profiler import profile
    x = torch.randn(16, device="tpu")
    with profile() as prof:
        torch.nonzero(x > 0)
        torch.unique(x)
        torch.bincount((x.abs() * 3).long())
    names = {e.key for e in prof.key_averages()}
    for op in ("aten::nonzero", "aten::_unique2", "aten::bincount"):
        assert f"tpu::{op}" in names, (op, sorted(n for n in names if n.startswith("tpu::")))


def test_tpu_profiler_trace_writes_files(tmp_path):
    x = torch.randn(32, 32, device="tpu")
    with torch.tpu.profiler.trace(str(tmp_path / "run")) as p:
        (x @ x).sum().item()
    assert p.files and all(str(f).startswith(str(tmp_path / "run")) for f in p.files)
    assert any(f.endswith(".xplane.pb") for f in p.files)
    assert not torch.tpu.profiler.is_tracing()


def test_tpu_profiler_config_keys_and_rank_folder(tmp_path):
    cfg = torch.tpu.profiler.TpuProfilerConfig(run_dir=str(tmp_path), worker_rank=3,
                                               host_tracer_level=1, python_tracer_level=0,
                                               device_tracer_level=1, check_experimental_options=True)
    assert cfg.output_dir() == os.path.join(str(tmp_path), "rank3")
    assert cfg.jax_options().host_tracer_level == 1
    with pytest.raises(ValueError):
        torch.tpu.profiler.TpuProfilerConfig.from_dict({"run_dir": "x", "bogus_key": 1})
    relaxed = torch.tpu.profiler.TpuProfilerConfig.from_dict(
        {"run_dir": "x", "bogus_key": 1, "check_experimental_options": False})
    assert relaxed.experimental == {"bogus_key": 1}
    with pytest.raises(ValueError):
        torch.tpu.profiler.TpuProfilerConfig(host_tracer_level=7)
    assert sys.modules["torch.tpu.profiler"] is torch.tpu.profiler


# ---- logs ----------------------------------------------------------------------

@pytest.fixture
def caplog_tpu(caplog):
    for log in logs.KINDS.values():
        log.propagate = True
    caplog.set_level(logging.DEBUG, logger="torch_tpu")
    return caplog


def _lines(caplog, name):
    return [r.getMessage() for r in caplog.records if r.name == name]


def test_sync_log_names_item_and_cpu_reads_with_the_user_line(caplog_tpu):
    x = torch.randn(5, 3, device="tpu")
    x.sum().item()
    x.cpu()
    lines = _lines(caplog_tpu, "torch_tpu.sync")
    assert any("via .item()" in s and "test_ux.py" in s for s in lines), lines
    assert any("(5, 3) float32" in s and ".cpu()" in s for s in lines), lines


def test_sync_and_recompile_logs_for_fused_chains(caplog_tpu):
    x = torch.randn(6, 7, device="tpu")
    with torch.tpu.set_eager_mode("fused"):
        (x.exp() * 3).sum().item()
    sync = _lines(caplog_tpu, "torch_tpu.sync")
    assert any("fused chain of" in s and "host read" in s for s in sync), sync
    rec = _lines(caplog_tpu, "torch_tpu.recompiles")
    assert any("fused chain of" in s and "aten.exp.default" in s and "(6, 7) float32" in s for s in rec), rec


def test_recompile_log_names_op_and_new_shapes(caplog_tpu):
    torch.randn(3, 11, device="tpu").tanh()
    torch.randn(4, 11, device="tpu").tanh()
    rec = _lines(caplog_tpu, "torch_tpu.recompiles")
    assert any("aten.tanh.default" in s and "(4, 11) float32" in s and "recompiling" in s for s in rec), rec


def test_fallback_log_names_op_and_shapes(caplog_tpu, monkeypatch):
    from torch_tpu.ops import fallback
    x = torch.randn(4, 2, device="tpu")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # Call the fallback directly: which ops lack kernels changes as kernels are added.
        out = fallback.cpu_fallback(torch.ops.aten.neg.default, x)
    assert out.device.type == "tpu"
    lines = _lines(caplog_tpu, "torch_tpu.fallback")
    assert any("aten::neg" in s and "(4, 2) float32" in s and "CPU" in s for s in lines), lines


def test_logs_are_silent_by_default_and_enable_disable(capsys):
    assert not logs.sync_log.isEnabledFor(logging.INFO) or os.environ.get("TORCH_TPU_LOGS")
    import io
    stream = io.StringIO()
    logs._handler = None
    logs.enable("+all", stream=stream)
    try:
        torch.randn(2, device="tpu").sum().item()
    finally:
        logs.disable()
        logs._handler = None
    assert "[torch_tpu.sync] host read" in stream.getvalue()
    with pytest.raises(ValueError, match="unknown log"):
        logs.enable("nonsense")
