"""torch_tpu.testing's device-type test base, through PyTorch's own
TORCH_TEST_DEVICES hook: one tpu class per device-generic test class, tests of
a feature tpu does not support skipped with a reason, every other test run
(and a NotImplementedError of another origin still a failure)."""
import os
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET

import torch_tpu.testing

GENERIC_TESTS = textwrap.dedent('''
    import torch
    from torch.testing._internal.common_device_type import dtypes, instantiate_device_type_tests
    from torch.testing._internal.common_utils import TestCase


    class TestBase(TestCase):
        @dtypes(torch.float32, torch.complex32)
        def test_zeros(self, device, dtype):
            self.assertEqual(torch.zeros(3, device=device, dtype=dtype).shape, (3,))

        def test_sparse(self, device):
            self.assertEqual(torch.eye(2, device=device).to_sparse().to_dense().sum().item(), 2)

        def test_half_plus_complex(self, device):
            self.assertEqual((torch.ones(2, device=device, dtype=torch.half) + 1j).dtype, torch.complex32)

        def test_refusal_caught_then_failing(self, device):
            try:
                torch.ones(2, device=device, dtype=torch.half) + 1j
            except RuntimeError:
                self.fail("the sum was refused")

        def test_refusal_caught_then_passing(self, device):
            try:
                torch.ones(2, device=device, dtype=torch.half) + 1j
            except RuntimeError:
                pass
            self.assertEqual(torch.ones(2, device=device).sum().item(), 2)

        def test_comparison_compiles_nothing(self, device):
            import torch_tpu.profiler
            a = torch.arange(21, device=device, dtype=torch.float64).reshape(7, 3).t()
            b, c = a.clone(), a.to(torch.int16)
            before = torch_tpu.profiler.xla_compiles()
            self.assertEqual(a, b)
            self.assertEqual(a, b, atol=0, rtol=0)
            self.assertEqual(a, c, exact_dtype=False)
            self.assertEqual(a, a.tolist())
            self.assertEqual(torch_tpu.profiler.xla_compiles() - before, 0)

        def test_comparison_still_fails(self, device):
            a = torch.tensor([1.0, float("nan")], device=device)
            self.assertEqual(a, a.clone())  # NaNs equal, as assertEqual's default
            for other, kwargs in ((torch.tensor([1.5, float("nan")], device=device), {}),
                                  (torch.tensor([1.0, 2.0], device=device), {}),
                                  (a.double(), {}), (a.to("meta" if device == "cpu" else "cpu"), {"exact_device": True}),
                                  (a.reshape(2, 1), {}),
                                  (torch.tensor([1.0 + 1e-6, float("nan")], device=device), {"atol": 0, "rtol": 0})):
                with self.assertRaises(AssertionError):
                    self.assertEqual(a, other, **kwargs)

        def test_other_not_implemented(self, device):
            raise NotImplementedError("not a tpu refusal")


    instantiate_device_type_tests(TestBase, globals())
''')


def test_tpu_classes_skip_unsupported_features_only(tmp_path):
    (tmp_path / "test_generic.py").write_text(GENERIC_TESTS)
    xml = tmp_path / "out.xml"
    env = dict(os.environ, TORCH_TEST_DEVICES=torch_tpu.testing.DEVICE_TYPE_FILE,
               PYTHONPATH=os.pathsep.join(sys.path))
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={xml}",
                    "test_generic.py"], cwd=tmp_path, env=env, capture_output=True, timeout=600, check=False)
    outcomes = {}
    for case in ET.parse(xml).getroot().iter("testcase"):
        kinds = [child.tag for child in case if child.tag in ("failure", "error", "skipped")]
        reason = next((child.get("message", "") for child in case if child.tag == "skipped"), "")
        outcomes[(case.get("classname").rsplit(".", 1)[-1], case.get("name"))] = (kinds[0] if kinds else "pass", reason)
    classes = {cls for cls, _ in outcomes}
    assert classes == {"TestBaseCPU", "TestBaseTPU"}  # the generic PRIVATEUSE1 twin is replaced, not added to
    tpu = {name: outcome for (cls, name), outcome in outcomes.items() if cls == "TestBaseTPU"}
    assert tpu["test_zeros_tpu_float32"] == ("pass", "")
    assert tpu["test_zeros_tpu_complex32"][0] == "skipped"
    assert "has no dtype torch.complex32" in tpu["test_zeros_tpu_complex32"][1]
    assert tpu["test_sparse_tpu"][0] == "skipped"
    assert "sparse COO tensors are not supported on tpu" in tpu["test_sparse_tpu"][1]
    assert tpu["test_half_plus_complex_tpu"][0] == "skipped"
    assert tpu["test_refusal_caught_then_failing_tpu"][0] == "skipped"
    assert "complex32" in tpu["test_refusal_caught_then_failing_tpu"][1]
    assert "then failed: AssertionError" in tpu["test_refusal_caught_then_failing_tpu"][1]
    assert tpu["test_refusal_caught_then_passing_tpu"] == ("pass", "")
    assert tpu["test_other_not_implemented_tpu"][0] == "failure"
    assert tpu["test_comparison_compiles_nothing_tpu"] == ("pass", "")  # values compared on the CPU
    assert tpu["test_comparison_still_fails_tpu"] == ("pass", "")
    cpu = {name: kind for (cls, name), (kind, _) in outcomes.items() if cls == "TestBaseCPU"}
    assert cpu == {"test_zeros_cpu_float32": "pass", "test_zeros_cpu_complex32": "pass", "test_sparse_cpu": "pass",
                   "test_half_plus_complex_cpu": "pass", "test_refusal_caught_then_failing_cpu": "pass",
                   "test_refusal_caught_then_passing_cpu": "pass", "test_other_not_implemented_cpu": "failure",
                   "test_comparison_compiles_nothing_cpu": "pass", "test_comparison_still_fails_cpu": "pass"}
