// The native helper's parts (module.cpp exposes them to torch_tpu/native/__init__.py).
#pragma once

#include <Python.h>

namespace torch_tpu_native {

// A Python object's __slots__ member, at the byte offset member_offset gives
// (recorder.cpp and storages.cpp write and read their objects' slots so).
inline PyObject*& slot_of(PyObject* obj, Py_ssize_t offset) {
  return *reinterpret_cast<PyObject**>(reinterpret_cast<char*>(obj) + offset);
}

// ``obj.name`` as a new reference, or nullptr with no error set when it has
// none (as getattr with a default: no AttributeError made and dropped);
// nullptr with an error on an error (leaves.cpp and entry.cpp).
inline PyObject* optional_attr(PyObject* obj, PyObject* name) {
  PyObject* value = nullptr;
#if PY_VERSION_HEX >= 0x030D0000
  PyObject_GetOptionalAttr(obj, name, &value);
#else
  _PyObject_LookupAttr(obj, name, &value);
#endif
  return value;
}

// The byte offset of ``type``'s __slots__ member ``name``, or -1 with an error (recorder.cpp).
Py_ssize_t member_offset(PyTypeObject* type, const char* name);

// PyTorch's view kernels for the tpu key (views.cpp).
PyObject* register_views(PyObject*, PyObject*);

// A device guard for the tpu key written in C++ (device_guard.cpp).
PyObject* register_device_guard(PyObject*, PyObject*);

// A cached signature's check (leaves.cpp).  What its leaves' checks read
// (borrowed): fusion's LazyBuffer type and resolve, numbers.on_device, and
// numbers' dicts of kept device copies (nullptr: on_device looks them up).
struct LeafRefs {
  PyObject* lazy_type = nullptr;
  PyObject* resolve = nullptr;
  PyObject* on_device = nullptr;
  PyObject* floats = nullptr;
  PyObject* ints = nullptr;
};
// The inputs for leaves ``items`` checked against ``specs`` (a list), None if
// one does not pass, nullptr with an error on an error.
PyObject* leaves_of(PyObject* const* items, Py_ssize_t n, PyObject* specs, bool fused, const LeafRefs& refs);
// The same for a call, checked whole against a Matcher's ``checks``
// (guard_check, tensor_at, repeats, leaves, list_lens, moving): what its check returns.
PyObject* matcher_inputs(PyObject* checks, PyObject* const* args, Py_ssize_t nargs, bool fused,
                         const LeafRefs& refs);
PyObject* match_leaves(PyObject*, PyObject* const* args, Py_ssize_t nargs);
PyObject* match_call(PyObject*, PyObject* const* args, Py_ssize_t nargs);

// A signature's tensor check, made from its tensors (geometry.cpp):
// geometry_guard(*tensors) -> an object whose check(*tensors) says whether a
// call's have the same geometry; geometry_passes(check, tensors, n): that
// check's answer without the call (1 or 0), -1 when ``check`` is not one.
PyObject* geometry_guard(PyObject*, PyObject* const* args, Py_ssize_t nargs);
int geometry_passes(PyObject* check, PyObject* const* tensors, Py_ssize_t n);

// A tpu tensor over a new storage at an address, and that storage (tensors.cpp; storages.cpp's makers).
bool make_tensor(unsigned long long addr, long long nbytes, PyObject* dtype, PyObject* shape, PyObject* strides,
                 PyObject** tensor, PyObject** storage);

// The device's address space and live bytes, and an output made a storage of ours (storages.cpp).
PyObject* ledger_start(PyObject*, PyObject* const* args, Py_ssize_t nargs);
PyObject* ledger_allocate(PyObject*, PyObject* nbytes);
PyObject* ledger_allocate_range(PyObject*, PyObject* const* args, Py_ssize_t nargs);
PyObject* ledger_freed(PyObject*, PyObject* nbytes);
PyObject* ledger_counts(PyObject*, PyObject*);
PyObject* ledger_reset_peak(PyObject*, PyObject*);
PyObject* storage_owner(PyObject*, PyObject* const* args, Py_ssize_t nargs);
PyObject* own_new(PyObject*, PyObject* const* args, Py_ssize_t nargs);
PyObject* own_many(PyObject*, PyObject* const* args, Py_ssize_t nargs);

// A registered kernel's cached path (entry.cpp).
PyObject* entry_context(PyObject*, PyObject* const* args, Py_ssize_t nargs);
PyObject* kernel_entry(PyObject*, PyObject* const* args, Py_ssize_t nargs);

// A Python kernel registered for the tpu key, called without torch.library's holder (boxed.cpp).
PyObject* register_python_kernel(PyObject*, PyObject* const* args, Py_ssize_t nargs);

// fusion.record, a predicted op recorded in C++ (recorder.cpp).
PyObject* fused_recorder(PyObject*, PyObject* const* args, Py_ssize_t nargs);

}  // namespace torch_tpu_native
