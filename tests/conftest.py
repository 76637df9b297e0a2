import pytest

import torch_tpu

torch_tpu.loading.load()  # (the tests use torch_tpu's modules directly: all of it, as the first tpu op loads it)
from torch_tpu.eager import checks  # noqa: E402


def pytest_addoption(parser):
    parser.addoption("--runslow", action="store_true", default=False,
                     help="also run tests marked slow (full OpInfo sweep, multi-process, HF models)")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--runslow"):
        return
    skip = pytest.mark.skip(reason="slow: run with --runslow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def strict(monkeypatch):
    """Any CPU fallback is an error in the test (``from helpers import strict``
    applies it to every test of a module)."""
    monkeypatch.setenv("TORCH_TPU_STRICT", "1")


@pytest.fixture(autouse=True)
def _device_checks_belong_to_their_test():
    # An index check fails at the next wait for the device (as CUDA's
    # device-side asserts do): wait at the end of each test, so a failure
    # left pending is reported by the test that caused it, not the next one.
    yield
    checks.raise_failed()
