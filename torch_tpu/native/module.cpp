// The native helper, torch_tpu.native._native: what torch_tpu registers with
// PyTorch from C++ instead of Python, and hot spots of the op path (helper.h
// lists the parts).  Built by setup.py when torch is importable at build time
// (see README, "Install"); torch_tpu/native/__init__.py loads it only for the
// torch it was built against, and each part registers once.
#include "helper.h"

#ifndef TORCH_TPU_BUILT_FOR
#define TORCH_TPU_BUILT_FOR "unknown"
#endif

namespace {

// a METH_FASTCALL function as PyMethodDef holds it
#define FASTCALL(f) reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(torch_tpu_native::f))

PyMethodDef methods[] = {
    {"register_views", torch_tpu_native::register_views, METH_NOARGS,
     "Register PyTorch's view kernels for the tpu key (once)."},
    {"register_device_guard", torch_tpu_native::register_device_guard, METH_NOARGS,
     "Register the tpu device's guard, written in C++, in place of the Python-backed one."},
    {"match_leaves", FASTCALL(match_leaves),
     METH_FASTCALL, "A cached signature's per-leaf check (ops/signature_match.py, Matcher.match)."},
    {"geometry_guard", FASTCALL(geometry_guard), METH_FASTCALL,
     "A signature's tensor check: geometry_guard(*tensors).check(*others) (ops/signature_match.py)."},
    {"match_call", FASTCALL(match_call), METH_FASTCALL,
     "A call checked whole against a Matcher's checks, as kernel entries check it (ops/signature_match.py)."},
    {"fused_recorder", FASTCALL(fused_recorder),
     METH_FASTCALL, "fusion.record with a predicted op recorded in C++ (eager/fusion.py)."},
    {"ledger_start", FASTCALL(ledger_start), METH_FASTCALL,
     "The ledger's first address and alignment (storage/memory.py)."},
    {"allocate", torch_tpu_native::ledger_allocate, METH_O, "memory.allocate: the address of a new range, counted."},
    {"allocate_range", FASTCALL(ledger_allocate_range), METH_FASTCALL,
     "memory.allocate_range: one range for several storages, counted."},
    {"freed", torch_tpu_native::ledger_freed, METH_O, "memory.freed_bytes: a storage of nbytes died."},
    {"ledger_counts", torch_tpu_native::ledger_counts, METH_NOARGS,
     "(allocated, peak, count, num_alloc, num_free) of the ledger."},
    {"reset_peak", torch_tpu_native::ledger_reset_peak, METH_NOARGS, "The peak is what is allocated now."},
    {"storage_owner", FASTCALL(storage_owner), METH_FASTCALL,
     "Set up own_new with buffers.py's registry; the weakref callback of a storage's death."},
    {"own_new", FASTCALL(own_new), METH_FASTCALL,
     "buffers.wrap_as: a tpu tensor over a new storage of ours holding an array."},
    {"own_many", FASTCALL(own_many), METH_FASTCALL,
     "buffers.OutputTensors: tensors over new storages of ours, one address range for all."},
    {"entry_context", FASTCALL(entry_context), METH_FASTCALL,
     "What every kernel entry reads (modes, fusion, precision, profiler, pending, own_new): once."},
    {"kernel_entry", FASTCALL(kernel_entry), METH_FASTCALL,
     "A registered kernel's cached path in C++, the Kernel for everything else (ops/registry.py)."},
    {"register_python_kernel", FASTCALL(register_python_kernel), METH_FASTCALL,
     "A Python kernel for the tpu key, called from a C++ boxed kernel instead of torch.library's holder."},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "_native", "torch_tpu's native helper", -1, methods};

}  // namespace

PyMODINIT_FUNC PyInit__native(void) {
  PyObject* m = PyModule_Create(&module);
  if (m != nullptr && PyModule_AddStringConstant(m, "torch_version", TORCH_TPU_BUILT_FOR) < 0) {
    Py_DECREF(m);
    return nullptr;
  }
  // the fields of a Matcher's checks the entry reads (leaves.cpp): a build that
  // reads another layout is not used (torch_tpu/native/__init__.py)
  if (m != nullptr && PyModule_AddIntConstant(m, "matcher_checks", 6) < 0) {
    Py_DECREF(m);
    return nullptr;
  }
  // the arguments entry_context and kernel_entry take (entry.cpp): a build
  // that takes others is not used
  if (m != nullptr && PyModule_AddIntConstant(m, "entry_interface", 6) < 0) {
    Py_DECREF(m);
    return nullptr;
  }
  return m;
}
