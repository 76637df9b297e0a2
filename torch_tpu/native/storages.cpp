// The device's address space and live bytes (storage/memory.py's ledger) and
// an op's output made a storage of ours (storage/buffers.py's ``wrap_as``
// and the death of its storage) in C++.  Every op's output takes an address
// range and counts its bytes, and every dropped storage gives them back: in
// Python that is a lock, a queue of deaths and ~4 frames an output.  Here
// each step runs whole under the GIL and calls no Python code, so it is
// atomic with respect to every other thread without a lock of its own (a
// storage's death, on whichever thread, runs its weakref callback with the
// GIL held).  Same addresses, same counts as the Python ledger
// (tests/test_native.py runs one script under both).
#include "helper.h"

namespace torch_tpu_native {
namespace {

struct Ledger {
  long long align = 64;
  long long next_address = 0;
  long long allocated = 0;
  long long peak = 0;
  long long count = 0;
  long long num_alloc = 0;
  long long num_free = 0;
};

Ledger ledger;

// The address of a new range of ``size`` bytes holding ``count`` storages of
// ``nbytes`` in all, counted as allocated.
long long take(long long size, long long nbytes, long long count) {
  const long long addr = ledger.next_address;
  ledger.next_address += size;
  ledger.allocated += nbytes;
  ledger.count += count;
  ledger.num_alloc += count;
  if (ledger.allocated > ledger.peak) {
    ledger.peak = ledger.allocated;
  }
  return addr;
}

long long span(long long nbytes) {  // rounded up; an empty storage still gets a range
  const long long size = (nbytes + ledger.align - 1) / ledger.align * ledger.align;
  return size > 0 ? size : ledger.align;
}

void give_back(long long nbytes) {
  ledger.allocated -= nbytes;
  ledger.count -= 1;
  ledger.num_free += 1;
}

// What a storage of ours is registered with (buffers.py): the address
// registry, the weakref type that registers a storage and releases it, and
// this file's ``release`` as that weakref's callback.
struct Owner {
  PyObject* by_address = nullptr;
  PyTypeObject* ref_type = nullptr;
  PyObject* release = nullptr;
  PyObject* buf_name = nullptr;
  Py_ssize_t addr_slot = 0;
  Py_ssize_t nbytes_slot = 0;
};

Owner* owner = nullptr;

// release(ref): a storage died (its weakref's callback): its address leaves
// the registry and its bytes the ledger.
PyObject* release(PyObject*, PyObject* ref) {
  if (Py_TYPE(ref) != owner->ref_type) {
    PyErr_SetString(PyExc_TypeError, "release(ref): a storage's _StorageRef");
    return nullptr;
  }
  PyObject* addr = slot_of(ref, owner->addr_slot);
  PyObject* nbytes = slot_of(ref, owner->nbytes_slot);
  if (addr == nullptr || nbytes == nullptr) {
    Py_RETURN_NONE;  // (never registered)
  }
  PyObject* registered = PyDict_GetItemWithError(owner->by_address, addr);  // borrowed
  if (registered != nullptr && PyDict_DelItem(owner->by_address, addr) < 0) {
    return nullptr;
  }
  if (PyErr_Occurred()) {
    return nullptr;
  }
  const long long n = PyLong_AsLongLong(nbytes);
  if (n == -1 && PyErr_Occurred()) {
    return nullptr;
  }
  give_back(n);
  Py_RETURN_NONE;
}

PyMethodDef release_def = {"release", release, METH_O,
                           "A storage died: its address and bytes are released (native/storages.cpp)."};

PyObject* pack(long long value) {
  return PyLong_FromLongLong(value);
}

}  // namespace

// ledger_start(base, align): the ledger's first address and its alignment (once, before any allocation).
PyObject* ledger_start(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 2) {
    PyErr_SetString(PyExc_TypeError, "ledger_start(base, align)");
    return nullptr;
  }
  const long long base = PyLong_AsLongLong(args[0]);
  const long long align = PyLong_AsLongLong(args[1]);
  if (PyErr_Occurred()) {
    return nullptr;
  }
  if (ledger.num_alloc == 0) {
    ledger.next_address = base;
    ledger.align = align;
  }
  Py_RETURN_NONE;
}

// allocate(nbytes) -> address (memory.allocate)
PyObject* ledger_allocate(PyObject*, PyObject* nbytes) {
  const long long n = PyLong_AsLongLong(nbytes);
  if (n == -1 && PyErr_Occurred()) {
    return nullptr;
  }
  return pack(take(span(n), n, 1));
}

// allocate_range(size, nbytes, count) -> address (memory.allocate_range)
PyObject* ledger_allocate_range(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 3) {
    PyErr_SetString(PyExc_TypeError, "allocate_range(size, nbytes, count)");
    return nullptr;
  }
  const long long size = PyLong_AsLongLong(args[0]);
  const long long nbytes = PyLong_AsLongLong(args[1]);
  const long long count = PyLong_AsLongLong(args[2]);
  if (PyErr_Occurred()) {
    return nullptr;
  }
  return pack(take(size, nbytes, count));
}

// freed(nbytes): a storage of nbytes died (memory.freed_bytes)
PyObject* ledger_freed(PyObject*, PyObject* nbytes) {
  const long long n = PyLong_AsLongLong(nbytes);
  if (n == -1 && PyErr_Occurred()) {
    return nullptr;
  }
  give_back(n);
  Py_RETURN_NONE;
}

// counts() -> (allocated, peak, count, num_alloc, num_free)
PyObject* ledger_counts(PyObject*, PyObject*) {
  return Py_BuildValue("(LLLLL)", ledger.allocated, ledger.peak, ledger.count, ledger.num_alloc, ledger.num_free);
}

// reset_peak(): the peak is what is allocated now
PyObject* ledger_reset_peak(PyObject*, PyObject*) {
  ledger.peak = ledger.allocated;
  Py_RETURN_NONE;
}

// storage_owner(by_address, ref_type) -> release: set up own_new and give the
// weakref callback a storage's death runs
PyObject* storage_owner(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 2 || !PyDict_CheckExact(args[0]) || !PyType_Check(args[1])) {
    PyErr_SetString(PyExc_TypeError, "storage_owner(by_address: dict, ref_type: type)");
    return nullptr;
  }
  if (owner == nullptr) {
    auto* o = new Owner();
    o->ref_type = reinterpret_cast<PyTypeObject*>(args[1]);
    o->addr_slot = member_offset(o->ref_type, "addr");
    o->nbytes_slot = o->addr_slot < 0 ? -1 : member_offset(o->ref_type, "nbytes");
    o->release = o->nbytes_slot < 0 ? nullptr : PyCFunction_New(&release_def, nullptr);
    o->buf_name = o->release == nullptr ? nullptr : PyUnicode_InternFromString("_tpu_buf");
    if (o->buf_name == nullptr) {
      Py_XDECREF(o->release);
      delete o;
      return nullptr;
    }
    Py_INCREF(args[0]);
    o->by_address = args[0];
    Py_INCREF(args[1]);
    owner = o;  // (once per process: buffers.py is imported once)
  } else if (owner->by_address != args[0] || reinterpret_cast<PyObject*>(owner->ref_type) != args[1]) {
    PyErr_SetString(PyExc_RuntimeError, "storage_owner: set up already with another registry");
    return nullptr;
  }
  Py_INCREF(owner->release);
  return owner->release;
}

namespace {

// A tensor over a new storage at ``addr`` holding ``arr`` (``nbytes``, a
// Python int), registered as buffers._own registers one: the bytes on the
// storage's object, and one weakref that registers the storage by address
// and releases it when it dies.  A new reference, or nullptr with an error
// (the bytes then given back).
PyObject* own_at(long long addr, PyObject* arr, PyObject* dtype, PyObject* nbytes_obj, PyObject* shape,
                 PyObject* strides) {
  const long long nbytes = PyLong_AsLongLong(nbytes_obj);
  PyObject* tensor = nullptr;
  PyObject* storage = nullptr;
  if ((nbytes == -1 && PyErr_Occurred()) ||
      !make_tensor(static_cast<unsigned long long>(addr), nbytes, dtype, shape, strides, &tensor, &storage)) {
    give_back(nbytes < 0 ? 0 : nbytes);
    return nullptr;
  }
  PyObject* addr_obj = pack(addr);
  PyObject* ref = nullptr;
  bool registered = false;
  bool ok = addr_obj != nullptr && PyObject_SetAttr(storage, owner->buf_name, arr) == 0;
  if (ok) {
    ref = PyObject_CallFunctionObjArgs(reinterpret_cast<PyObject*>(owner->ref_type), storage, owner->release,
                                       nullptr);
    ok = ref != nullptr;
  }
  if (ok) {
    Py_INCREF(addr_obj);
    Py_XSETREF(slot_of(ref, owner->addr_slot), addr_obj);
    Py_INCREF(nbytes_obj);
    Py_XSETREF(slot_of(ref, owner->nbytes_slot), nbytes_obj);
    ok = registered = PyDict_SetItem(owner->by_address, addr_obj, ref) == 0;
  }
  if (!registered) {
    give_back(nbytes);  // (no weakref will: its callback never runs)
  }
  Py_XDECREF(addr_obj);
  Py_XDECREF(ref);
  Py_DECREF(storage);
  if (!ok) {
    Py_DECREF(tensor);
    return nullptr;
  }
  return tensor;
}

}  // namespace

// own_new(arr, dtype, nbytes, shape, strides or None) -> a tpu tensor over a
// new storage whose bytes are ``arr`` (buffers.wrap_as)
PyObject* own_new(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 5 || owner == nullptr) {
    PyErr_SetString(PyExc_TypeError, "own_new(arr, dtype, nbytes, shape, strides or None), after storage_owner");
    return nullptr;
  }
  const long long nbytes = PyLong_AsLongLong(args[2]);
  if (nbytes == -1 && PyErr_Occurred()) {
    return nullptr;
  }
  return own_at(take(span(nbytes), nbytes, 1), args[0], args[1], args[2], args[3], args[4]);
}

// own_many(arrays, metas, offsets, size, nbytes) -> [tensor]: buffers.OutputTensors,
// each array at its offset of one new range of ``size`` (``nbytes`` in all),
// per meta (dtype, nbytes, shape, strides or None)
PyObject* own_many(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 5 || owner == nullptr || !PyList_CheckExact(args[1]) || !PyList_CheckExact(args[2])) {
    PyErr_SetString(PyExc_TypeError, "own_many(arrays, metas: list, offsets: list, size, nbytes), after storage_owner");
    return nullptr;
  }
  PyObject* arrays = PySequence_Fast(args[0], "own_many: arrays");
  if (arrays == nullptr) {
    return nullptr;
  }
  const Py_ssize_t n = PyList_GET_SIZE(args[1]);
  const long long size = PyLong_AsLongLong(args[3]);
  const long long nbytes = PyLong_AsLongLong(args[4]);
  if (PyErr_Occurred() || PySequence_Fast_GET_SIZE(arrays) != n || PyList_GET_SIZE(args[2]) != n) {
    if (!PyErr_Occurred()) {
      PyErr_SetString(PyExc_ValueError, "own_many: as many arrays, metas and offsets");
    }
    Py_DECREF(arrays);
    return nullptr;
  }
  const long long base = take(size, nbytes, n);
  PyObject* tensors = PyList_New(n);
  for (Py_ssize_t k = 0; tensors != nullptr && k < n; ++k) {
    PyObject* meta = PyList_GET_ITEM(args[1], k);
    const long long offset = PyLong_AsLongLong(PyList_GET_ITEM(args[2], k));
    PyObject* t = nullptr;
    if (PyTuple_CheckExact(meta) && PyTuple_GET_SIZE(meta) == 4 && !(offset == -1 && PyErr_Occurred())) {
      t = own_at(base + offset, PySequence_Fast_GET_ITEM(arrays, k), PyTuple_GET_ITEM(meta, 0),
                 PyTuple_GET_ITEM(meta, 1), PyTuple_GET_ITEM(meta, 2), PyTuple_GET_ITEM(meta, 3));
    } else if (!PyErr_Occurred()) {
      PyErr_SetString(PyExc_TypeError, "own_many: a meta is (dtype, nbytes, shape, strides or None)");
    }
    if (t == nullptr) {  // the outputs not made yet give their bytes back
      for (Py_ssize_t rest = k + 1; rest < n; ++rest) {
        PyObject* m = PyList_GET_ITEM(args[1], rest);
        if (PyTuple_CheckExact(m) && PyTuple_GET_SIZE(m) == 4) {
          const long long b = PyLong_AsLongLong(PyTuple_GET_ITEM(m, 1));
          give_back(b < 0 ? 0 : b);
        }
      }
      Py_CLEAR(tensors);
      break;
    }
    PyList_SET_ITEM(tensors, k, t);
  }
  Py_DECREF(arrays);
  return tensors;
}

}  // namespace torch_tpu_native
