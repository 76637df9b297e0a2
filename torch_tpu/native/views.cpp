// PyTorch's own view kernels registered for the tpu
// (PrivateUse1) key, so a view, t(), transpose or reshape of a tpu tensor
// never leaves C++.  Views only edit metadata (sizes, strides, offset) over the
// same storage; these are the very kernels the CPU uses, and the pure-Python
// fallback (torch_tpu/ops/core.py) reaches them too, through a boxed
// redispatch that crosses into Python and back (~5 us a view).
#include "helper.h"

#include <memory>

#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/_unsafe_view_native.h>
#include <ATen/ops/alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <ATen/ops/view_native.h>
#include <torch/library.h>

namespace torch_tpu_native {
namespace {

std::unique_ptr<torch::Library> views_library;  // alive as long as the process: the registrations

}  // namespace

PyObject* register_views(PyObject*, PyObject*) {
  if (views_library) {
    Py_RETURN_NONE;
  }
  try {
    auto lib = std::make_unique<torch::Library>(
        torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
    lib->impl("view", TORCH_FN(at::native::view));
    lib->impl("as_strided", TORCH_FN(at::native::as_strided_tensorimpl));
    lib->impl("_reshape_alias", TORCH_FN(at::native::_reshape_alias));
    lib->impl("_unsafe_view", TORCH_FN(at::native::_unsafe_view));
    lib->impl("alias", TORCH_FN(at::native::alias));
    lib->impl("unfold", TORCH_FN(at::native::unfold));
    lib->impl("view_as_real", TORCH_FN(at::native::view_as_real));
    views_library = std::move(lib);
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return nullptr;
  }
  Py_RETURN_NONE;
}

}  // namespace torch_tpu_native
