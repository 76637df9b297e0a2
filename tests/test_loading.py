"""``import torch`` registers the tpu device without importing JAX or the
kernels (torch_tpu/loading.py); the first use of the device loads them,
whichever way it comes.  Each case runs in a fresh process with the autoload on."""
import os
import subprocess
import sys

import pytest

_PRELUDE = (
    "import sys, torch\n"
    "def light():\n"
    "    return not any(m in sys.modules for m in ('jax', 'torch_tpu.runtime', 'torch_tpu.ops'))\n"
)


def _run(code):
    out = subprocess.run([sys.executable, "-c", _PRELUDE + code], capture_output=True, text=True, timeout=300,
                         env=dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="1"))
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout.split()


def test_cpu_work_leaves_the_device_unloaded():
    # what a CPU-only process does with torch: no JAX, no kernels, no patches of torch's entry points
    code = ("assert light()\n"
            "assert torch.device('tpu').type == 'tpu' and torch.tpu is not None\n"
            "torch.manual_seed(0); torch.seed()\n"  # (seeds every device module's stream: the stand-in's)
            "x = torch.randn(4, 4, requires_grad=True); (x @ x).sum().backward()\n"
            "g = torch.Generator().manual_seed(1); torch.rand(2, generator=g)\n"
            "torch.accelerator.is_available(); torch.accelerator.current_accelerator()\n"
            "m = torch.nn.Linear(4, 4); opt = torch.optim.AdamW(m.parameters())\n"
            "import torch.utils.checkpoint as cp\n"  # (asks the default device's module, with an autocast of it)
            "cp.checkpoint(m, x, use_reentrant=False).sum().backward(); opt.step()\n"
            "torch._C._accelerator_getDeviceIndex()\n"  # (PyTorch's lazy init of the device: Dynamo's tracing asks it)
            "loader = torch.utils.data.DataLoader(torch.randn(8, 2), batch_size=4, pin_memory=True)\n"
            "assert [b.is_pinned() or True for b in loader]\n"
            "import torch.distributed as dist\n"
            "print(light(), 'tpu_dist'.upper() in dist.Backend._plugins, torch.UntypedStorage(4).device)\n")
    assert _run(code) == ["True", "True", "cpu"]


@pytest.mark.parametrize("first_use", [
    "t = torch.ones(2, device='tpu')",                      # PyTorch's lazy init of the device
    "t = torch.ones(2).to('tpu')",                          # an op reaching tpu first (the fallback kernel)
    "n = torch.tpu.device_count(); t = torch.ones(2, device='tpu')",  # torch.tpu's stand-in
    pytest.param("s = torch.UntypedStorage(8, device='tpu'); t = torch.ones(2, device='tpu')",
                 marks=pytest.mark.slow),
    pytest.param("g = torch.Generator(device='tpu'); t = torch.ones(2, device='tpu')", marks=pytest.mark.slow),
    pytest.param("import torch.tpu.profiler; t = torch.ones(2, device='tpu')", marks=pytest.mark.slow),
    pytest.param("from torch.tpu.ops import ragged_dot; t = torch.ones(2, device='tpu')", marks=pytest.mark.slow),
])
def test_first_use_of_the_device_loads_it(first_use):
    code = ("before = light()\n"
            f"{first_use}\n"
            "import torch_tpu.device.module as real\n"
            "print(before, light(), torch.tpu is real, sys.modules['torch.tpu'] is real, (t + 1).sum().item())\n")
    assert _run(code) == ["True", "False", "True", "True", "4.0"]


def test_a_seed_set_before_the_load_holds_after_it():
    draw = "print(torch.randn(3, device='tpu').cpu().tolist())\n"
    seeded_first = _run("torch.manual_seed(7)\nassert light()\n" + draw)
    loaded_first = _run("torch.tpu.device_count()\ntorch.manual_seed(7)\n" + draw)
    assert seeded_first == loaded_first


@pytest.mark.slow
def test_a_precision_set_before_the_load_holds_after_it():
    code = ("torch.set_float32_matmul_precision('high')\n"
            "assert light()\n"
            "print(torch.tpu.precision.name, torch.get_float32_matmul_precision())\n")
    assert _run(code) == ["HIGH", "high"]
