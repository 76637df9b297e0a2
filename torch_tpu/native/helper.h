// The native helper's parts, each registering one thing with PyTorch (see
// module.cpp, which exposes them to torch_tpu/native/__init__.py).
#pragma once

#include <Python.h>

namespace torch_tpu_native {

// PyTorch's view kernels for the tpu key (views.cpp).
PyObject* register_views(PyObject*, PyObject*);

// A device guard for the tpu key written in C++ (device_guard.cpp).
PyObject* register_device_guard(PyObject*, PyObject*);

}  // namespace torch_tpu_native
