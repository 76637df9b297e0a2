"""tests/tools/pytorch_suites.py's driver: a test process that dies midway is
reported (and fails --check), never shown as a shorter table."""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "tools"))
import pytorch_suites  # noqa: E402

# a device-generic file in miniature: a CPU class and a tpu class; the tpu
# process dies in its second test (as one that reaches vm.max_map_count does)
SUITE = '''
import os
import signal
import unittest


class TestThingCPU(unittest.TestCase):
    def test_one_cpu(self):
        pass

    def test_two_cpu(self):
        pass


class TestThingTPU(unittest.TestCase):
    def test_one_tpu(self):
        pass

    def test_two_tpu(self):
        os.kill(os.getpid(), signal.SIGSEGV)
'''


def test_a_test_process_killed_by_a_signal_is_reported_and_fails_check(tmp_path, capsys):
    tests = tmp_path / "suites"
    tests.mkdir()
    (tests / "test_thing.py").write_text(SUITE)
    xml = tmp_path / "xml"
    status = pytorch_suites.main(["--tests-dir", str(tests), "--xml-dir", str(xml), "--check", "test_thing.py"])
    out = capsys.readouterr().out
    assert status == 1
    assert "CRASHED test_thing.py: the tpu pytest process died of SIGSEGV after 1 tests" in out
    assert "Segmentation fault" in (xml / "test_thing.tpu.xml.out").read_text()  # faulthandler's traceback kept


@pytest.mark.slow  # (three more pytest processes)
def test_a_complete_run_reports_no_crash(tmp_path, capsys):
    tests = tmp_path / "suites"
    tests.mkdir()
    (tests / "test_thing.py").write_text(SUITE.replace("os.kill(os.getpid(), signal.SIGSEGV)", "pass"))
    status = pytorch_suites.main(["--tests-dir", str(tests), "--xml-dir", str(tmp_path / "xml"), "--check",
                                  "test_thing.py"])
    out = capsys.readouterr().out
    assert status == 0
    assert "CRASHED" not in out
    assert "| test_thing.py | 2 | 2 | 0 | 2 |" in out
