// A tpu tensor over a new storage at a given address, in one call
// (storages.cpp's output makers).  In Python that is an empty tensor
// made at its shape, its storage object, a second storage at the address and
// a swap of the two (~1.1 us), or for other strides a boxed set_ (~3 us);
// here one C++ call makes the same storage (the address, the byte size, no
// allocator, not resizable: as torch._C._construct_storage_from_data_pointer)
// and the tensor over it.  The caller (storages.cpp) gives the storage its buffer.
#include "helper.h"

#include <vector>

#include <ATen/ATen.h>
#include <c10/core/Storage.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/Storage.h>
#include <torch/csrc/autograd/python_variable.h>

namespace torch_tpu_native {
namespace {

// The ints of sequence ``seq`` (false with a Python error set if it is not one of ints).
bool ints(PyObject* seq, std::vector<int64_t>& out) {
  PyObject* fast = PySequence_Fast(seq, "expected a sequence of ints");
  if (fast == nullptr) {
    return false;
  }
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
  PyObject** items = PySequence_Fast_ITEMS(fast);
  out.resize(n);
  bool ok = true;
  for (Py_ssize_t i = 0; ok && i < n; ++i) {
    out[i] = PyLong_AsLongLong(items[i]);
    ok = !(out[i] == -1 && PyErr_Occurred());
  }
  Py_DECREF(fast);
  return ok;
}

}  // namespace

bool make_tensor(unsigned long long addr, long long nbytes, PyObject* dtype_obj, PyObject* shape_obj,
                 PyObject* strides_obj, PyObject** tensor_out, PyObject** storage_out) {
  if (!THPDtype_Check(dtype_obj)) {
    PyErr_SetString(PyExc_TypeError, "expected a torch.dtype");
    return false;
  }
  std::vector<int64_t> shape, strides;
  if (!ints(shape_obj, shape) || (strides_obj != Py_None && !ints(strides_obj, strides))) {
    return false;
  }
  try {
    const c10::Device device(c10::DeviceType::PrivateUse1, 0);
    c10::Storage storage(c10::Storage::use_byte_size_t{}, static_cast<size_t>(nbytes),
                         c10::DataPtr(reinterpret_cast<void*>(addr), device), nullptr, false);
    const auto dtype = reinterpret_cast<THPDtype*>(dtype_obj)->scalar_type;
    at::Tensor t = at::detail::make_tensor<at::TensorImpl>(
        std::move(storage), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), c10::scalarTypeToTypeMeta(dtype));
    if (strides_obj == Py_None) {
      t.unsafeGetTensorImpl()->set_sizes_contiguous(shape);
    } else {
      t.unsafeGetTensorImpl()->set_sizes_and_strides(shape, strides);
    }
    PyObject* py_storage = THPStorage_Wrap(t.storage());
    if (py_storage == nullptr) {
      return false;
    }
    PyObject* py_tensor = THPVariable_Wrap(std::move(t));
    if (py_tensor == nullptr) {
      Py_DECREF(py_storage);
      return false;
    }
    *tensor_out = py_tensor;
    *storage_out = py_storage;
    return true;
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return false;
  }
}


}  // namespace torch_tpu_native
