"""benchmarks/accelerator_check.py in its reduced form (--quick) on this CPU
platform: every section runs and the markdown report says what it found.
(The test-suite slice is skipped: pytest inside pytest.)"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
import accelerator_check  # noqa: E402


def test_quick_run_writes_the_report(tmp_path):
    out = tmp_path / "report.md"
    assert accelerator_check.main(["--quick", "--skip", "tests", "--out", str(out)]) == 0
    text = out.read_text()
    for heading in ("# Accelerator check: XLA CPU (cpu)", "## Environment and self-test",
                    "## Pallas kernels against the XLA composite", "## TPU lowering check",
                    "## Host overhead", "## Training steps"):
        assert heading in text, heading
    assert "## Test slice" not in text and "**failed**" not in text and "skipped" not in text
    assert "ops and a training step : ok" in text
    assert "Pallas kernels interpreted" in text  # no TPU here: said, not hidden
    assert "all lowered" in text
    assert "| micro | tpu-strict |" in text and "| micro | pytorch-cpu |" in text


def test_a_failing_section_is_reported_and_the_rest_go_on():
    report = accelerator_check.Report(budget=60)
    report.section("broken", lambda: 1 / 0)
    report.section("fine", lambda: "ok")
    text = report.markdown("# t")
    assert "**failed**: `ZeroDivisionError" in text and "## fine" in text
    report = accelerator_check.Report(budget=0)
    report.section("late", lambda: "never")
    assert "skipped: the time budget ran out" in report.markdown("# t")
