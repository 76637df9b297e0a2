// The native helper's parts (module.cpp exposes them to torch_tpu/native/__init__.py).
#pragma once

#include <Python.h>

namespace torch_tpu_native {

// PyTorch's view kernels for the tpu key (views.cpp).
PyObject* register_views(PyObject*, PyObject*);

// A device guard for the tpu key written in C++ (device_guard.cpp).
PyObject* register_device_guard(PyObject*, PyObject*);

// A cached signature's per-leaf check (leaves.cpp).
PyObject* match_leaves(PyObject*, PyObject* const* args, Py_ssize_t nargs);

// A tpu tensor over a new storage at a given address (tensors.cpp).
PyObject* new_tensor(PyObject*, PyObject* const* args, Py_ssize_t nargs);

// fusion.record, a predicted op recorded in C++ (recorder.cpp).
PyObject* fused_recorder(PyObject*, PyObject* const* args, Py_ssize_t nargs);

}  // namespace torch_tpu_native
