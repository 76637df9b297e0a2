"""The optional native helper (torch_tpu/native/*.cpp), built when torch
is importable in the build environment: ``pip install --no-build-isolation``
after torch is installed, as the README's install does.  In an isolated build
(pip's default) or without a C++ compiler the package is pure Python and works
the same, ~5 us slower per view op and ~1 us per device-guard call."""
from setuptools import setup

ext_modules, cmdclass = [], {}
try:
    import torch
    from torch.utils.cpp_extension import BuildExtension, CppExtension
except ImportError:
    pass
else:
    built_for = torch.__version__  # checked at import: the ABI is this build of torch's
    ext_modules.append(CppExtension(
        "torch_tpu.native._native",
        ["torch_tpu/native/module.cpp", "torch_tpu/native/views.cpp", "torch_tpu/native/device_guard.cpp",
         "torch_tpu/native/leaves.cpp", "torch_tpu/native/geometry.cpp", "torch_tpu/native/tensors.cpp",
         "torch_tpu/native/recorder.cpp", "torch_tpu/native/storages.cpp",
         "torch_tpu/native/entry.cpp", "torch_tpu/native/boxed.cpp"],
        define_macros=[("TORCH_TPU_BUILT_FOR", f'"{built_for}"')],
        extra_compile_args=["-O2"],
        optional=True))  # a failed compile leaves the pure-Python package
    cmdclass["build_ext"] = BuildExtension

setup(ext_modules=ext_modules, cmdclass=cmdclass)
