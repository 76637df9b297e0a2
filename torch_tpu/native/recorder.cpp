// Fused mode's recording of a predicted op (eager/fusion.py, ``record``) in
// C++.  When the pending program comes again (a loop's chain, a training
// step), the op recorded here last time is the op being recorded now; its
// inputs are checked against that op's wiring (the same pending results, the
// same arrays, numbers of the same kinds in the same places: fusion._replay)
// and its node and result placeholders appended, reusing the remembered refs
// and prefix hash.  ~2 us of Python an op.  Anything else -- no prediction, a
// different op or wiring, a predicted host read, a full program, ``urgent``
// -- is handed to the Python ``_record``, which does all of it.  Both paths
// leave the same state (tests/test_native.py compares them).
#include "helper.h"

#include <climits>

#include <structmember.h>  // PyMemberDef (a __slots__ member's offset)

namespace torch_tpu_native {
namespace {

// What fusion.py's module state this reads and writes; the lists, dicts and
// set are emptied in place there, never rebound, so holding them is safe.
// ``_guess`` and ``MAX_PENDING_OPS`` are read from the module each call.
struct Recorder {
  PyObject* globals = nullptr;  // fusion's module dict
  PyObject* fallback = nullptr;  // fusion._record
  PyObject* acquire = nullptr;  // fusion._lock's bound methods
  PyObject* release = nullptr;
  PyObject* nodes = nullptr;
  PyObject* external = nullptr;
  PyObject* external_index = nullptr;
  PyObject* packs[2] = {nullptr, nullptr};  // _numbers: FLOATS, INTS
  PyObject* next = nullptr;
  PyObject* read_points = nullptr;
  PyTypeObject* lazy_type = nullptr;
  PyTypeObject* node_type = nullptr;
  PyTypeObject* produced_type = nullptr;
  PyTypeObject* number_type = nullptr;
  PyTypeObject* array_impl = nullptr;
  PyObject* jax_array = nullptr;
  PyObject* guess_name = nullptr;
  PyObject* max_name = nullptr;
  // slot offsets: LazyBuffer's shape, dtype, value, node, slot, early; _Node's
  // fn, refs, outputs, prefix, urgent
  Py_ssize_t lazy_slots[6] = {};
  Py_ssize_t node_slots[5] = {};
};

constexpr const char* kCapsule = "torch_tpu.native.Recorder";

void drop(Recorder* r) {
  Py_XDECREF(r->globals);
  Py_XDECREF(r->fallback);
  Py_XDECREF(r->acquire);
  Py_XDECREF(r->release);
  Py_XDECREF(r->nodes);
  Py_XDECREF(r->external);
  Py_XDECREF(r->external_index);
  Py_XDECREF(r->packs[0]);
  Py_XDECREF(r->packs[1]);
  Py_XDECREF(r->next);
  Py_XDECREF(r->read_points);
  Py_XDECREF(reinterpret_cast<PyObject*>(r->lazy_type));
  Py_XDECREF(reinterpret_cast<PyObject*>(r->node_type));
  Py_XDECREF(reinterpret_cast<PyObject*>(r->produced_type));
  Py_XDECREF(reinterpret_cast<PyObject*>(r->number_type));
  Py_XDECREF(reinterpret_cast<PyObject*>(r->array_impl));
  Py_XDECREF(r->jax_array);
  Py_XDECREF(r->guess_name);
  Py_XDECREF(r->max_name);
  delete r;
}

void drop_capsule(PyObject* capsule) {
  drop(static_cast<Recorder*>(PyCapsule_GetPointer(capsule, kCapsule)));
}

enum LazySlot { kShape, kDtype, kValue, kNode, kSlot, kEarly };
enum NodeSlot { kFn, kRefs, kOutputs, kPrefix, kUrgent };

// Set a slot of an object fresh from tp_alloc (its slots are empty), taking a
// reference to ``value``.
void set_slot(PyObject* obj, Py_ssize_t offset, PyObject* value) {
  Py_INCREF(value);
  Py_XSETREF(slot_of(obj, offset), value);
}

PyObject* item(PyObject* dict, const char* name) {  // a new reference, or nullptr with an error
  PyObject* value = PyDict_GetItemString(dict, name);
  if (value == nullptr) {
    PyErr_Format(PyExc_KeyError, "fusion has no %s", name);
    return nullptr;
  }
  Py_INCREF(value);
  return value;
}

PyTypeObject* type_item(PyObject* dict, const char* name) {
  PyObject* value = item(dict, name);
  if (value != nullptr && !PyType_Check(value)) {
    Py_DECREF(value);
    PyErr_Format(PyExc_TypeError, "fusion.%s is not a type", name);
    return nullptr;
  }
  return reinterpret_cast<PyTypeObject*>(value);
}

// A small non-negative int's value, or -1 (not an int of that range).
Py_ssize_t index_of(PyObject* x) {
  if (!PyLong_CheckExact(x)) {
    return -1;
  }
  Py_ssize_t v = PyLong_AsSsize_t(x);
  if (v == -1 && PyErr_Occurred()) {
    PyErr_Clear();
  }
  return v;
}

// Whether ``x`` is a Python number fusion packs as kind ``kind`` (a float, or
// an int in int64's range: fusion._INT_RANGE).
bool packed_number(PyObject* x, Py_ssize_t kind) {
  if (kind == 0) {
    return PyFloat_CheckExact(x);
  }
  if (!PyLong_CheckExact(x)) {
    return false;
  }
  int overflow = 0;
  PyLong_AsLongLongAndOverflow(x, &overflow);
  return overflow == 0;
}

bool is_packed_number(PyObject* x) {
  return PyFloat_CheckExact(x) || packed_number(x, 1);
}

// fusion._replay: 1 if ``inputs`` are wired as ``refs`` say (their arrays and
// numbers interned as _refs would), 0 if not (nothing changed), -1 on an error.
int replay(const Recorder& r, PyObject* inputs, PyObject* refs) {
  Py_ssize_t count = PySequence_Fast_GET_SIZE(inputs);
  if (count != PyTuple_GET_SIZE(refs)) {
    return 0;
  }
  PyObject** xs = PySequence_Fast_ITEMS(inputs);
  const Py_ssize_t start = PyList_GET_SIZE(r.external);
  Py_ssize_t n = start, done = 0;
  bool matched = true;
  for (; done < count; ++done) {
    PyObject* x = xs[done];
    PyObject* ref = PyTuple_GET_ITEM(refs, done);
    PyTypeObject* kind = Py_TYPE(ref);
    if (kind == r.produced_type) {
      if (Py_TYPE(x) == r.lazy_type && slot_of(x, r.lazy_slots[kValue]) == Py_None) {
        Py_ssize_t node = index_of(PyTuple_GET_ITEM(ref, 0)), slot = index_of(PyTuple_GET_ITEM(ref, 1));
        if (node >= 0 && slot >= 0 && node == index_of(slot_of(x, r.lazy_slots[kNode])) &&
            slot == index_of(slot_of(x, r.lazy_slots[kSlot]))) {
          continue;
        }
      }
      matched = false;
      break;
    }
    if (kind == r.number_type) {
      Py_ssize_t pack_kind = index_of(PyTuple_GET_ITEM(ref, 0));
      if (pack_kind != 0 && pack_kind != 1) {
        matched = false;
        break;
      }
      PyObject* pack = r.packs[pack_kind];
      if (packed_number(x, pack_kind) && index_of(PyTuple_GET_ITEM(ref, 1)) == PyList_GET_SIZE(pack)) {
        if (PyList_Append(pack, x) < 0) {
          return -1;
        }
        continue;
      }
      matched = false;
      break;
    }
    // an External: an array, or a computed result
    if (Py_TYPE(x) == r.lazy_type) {
      x = slot_of(x, r.lazy_slots[kValue]);
      if (x == Py_None) {
        matched = false;
        break;
      }
    } else if (is_packed_number(x)) {
      matched = false;
      break;
    }
    Py_ssize_t i = index_of(PyTuple_GET_ITEM(ref, 0));
    if (i < 0) {
      matched = false;
      break;
    }
    if (i < n) {
      if (PyList_GET_ITEM(r.external, i) != x) {
        matched = false;
        break;
      }
      continue;
    }
    PyObject* key = PyLong_FromVoidPtr(x);
    if (key == nullptr) {
      return -1;
    }
    PyObject* j = PyDict_GetItemWithError(r.external_index, key);  // borrowed
    if (j == nullptr && PyErr_Occurred()) {
      Py_DECREF(key);
      return -1;
    }
    Py_ssize_t at = j == nullptr ? -1 : index_of(j);
    if (i > n || (at >= 0 && at < PyList_GET_SIZE(r.external) && PyList_GET_ITEM(r.external, at) == x)) {
      Py_DECREF(key);  // not where _refs would put it
      matched = false;
      break;
    }
    int array = Py_TYPE(x) == r.array_impl ? 1 : PyObject_IsInstance(x, r.jax_array);
    if (array < 0) {
      Py_DECREF(key);
      return -1;
    }
    if (array) {
      PyObject* position = PyLong_FromSsize_t(i);
      int failed = position == nullptr || PyDict_SetItem(r.external_index, key, position) < 0;
      Py_XDECREF(position);
      if (failed) {
        Py_DECREF(key);
        return -1;
      }
    }
    Py_DECREF(key);
    if (PyList_Append(r.external, x) < 0) {
      return -1;
    }
    ++n;
  }
  if (matched) {
    return 1;
  }
  // a mismatch: undo what this call interned
  for (Py_ssize_t k = start; k < n; ++k) {
    PyObject* key = PyLong_FromVoidPtr(PyList_GET_ITEM(r.external, k));
    if (key == nullptr) {
      return -1;
    }
    PyObject* j = PyDict_GetItemWithError(r.external_index, key);
    if (j != nullptr && index_of(j) == k && PyDict_DelItem(r.external_index, key) < 0) {
      Py_DECREF(key);
      return -1;
    }
    Py_DECREF(key);
    if (PyErr_Occurred()) {
      return -1;
    }
  }
  if (PyList_SetSlice(r.external, start, PY_SSIZE_T_MAX, nullptr) < 0) {
    return -1;
  }
  for (Py_ssize_t k = 0; k < done; ++k) {
    PyObject* ref = PyTuple_GET_ITEM(refs, k);
    if (Py_TYPE(ref) == r.number_type) {
      PyObject* pack = r.packs[index_of(PyTuple_GET_ITEM(ref, 0))];
      Py_ssize_t size = PyList_GET_SIZE(pack);
      if (PyList_SetSlice(pack, size - 1, size, nullptr) < 0) {
        return -1;
      }
    }
  }
  return 0;
}

// A new LazyBuffer of result ``slot`` of node ``index``, as LazyBuffer's
// __init__ would make it; nullptr with an error.
PyObject* placeholder(const Recorder& r, PyObject* shape_dtype, PyObject* index, Py_ssize_t slot) {
  PyObject* shape = PyTuple_GET_ITEM(shape_dtype, 0);
  shape = PyTuple_CheckExact(shape) ? (Py_INCREF(shape), shape) : PySequence_Tuple(shape);
  if (shape == nullptr) {
    return nullptr;
  }
  PyObject* slot_number = PyLong_FromSsize_t(slot);
  PyObject* out = slot_number == nullptr ? nullptr : r.lazy_type->tp_alloc(r.lazy_type, 0);
  if (out != nullptr) {
    const Py_ssize_t* s = r.lazy_slots;
    set_slot(out, s[kShape], shape);
    set_slot(out, s[kDtype], PyTuple_GET_ITEM(shape_dtype, 1));
    set_slot(out, s[kValue], Py_None);
    set_slot(out, s[kNode], index);
    set_slot(out, s[kSlot], slot_number);
    set_slot(out, s[kEarly], Py_False);
  }
  Py_DECREF(shape);
  Py_XDECREF(slot_number);
  return out;
}

// The node and placeholders of a replayed op; its results list, or nullptr
// with an error.
PyObject* append_node(const Recorder& r, PyObject* fn, PyObject* refs, PyObject* prefix, PyObject* out_buffers) {
  const Py_ssize_t count = PySequence_Fast_GET_SIZE(out_buffers);
  PyObject** shapes = PySequence_Fast_ITEMS(out_buffers);
  PyObject* index = PyLong_FromSsize_t(PyList_GET_SIZE(r.nodes));
  PyObject* outs = PyList_New(count);
  PyObject* out_refs = PyList_New(count);
  PyObject* node = nullptr;
  bool ok = index != nullptr && outs != nullptr && out_refs != nullptr;
  for (Py_ssize_t slot = 0; ok && slot < count; ++slot) {
    PyObject* out = placeholder(r, shapes[slot], index, slot);
    PyObject* ref = out == nullptr ? nullptr : PyWeakref_NewRef(out, nullptr);
    if (ref == nullptr) {
      Py_XDECREF(out);
      ok = false;
      break;
    }
    PyList_SET_ITEM(outs, slot, out);
    PyList_SET_ITEM(out_refs, slot, ref);
  }
  if (ok) {
    node = r.node_type->tp_alloc(r.node_type, 0);
    ok = node != nullptr;
  }
  if (ok) {
    const Py_ssize_t* s = r.node_slots;
    set_slot(node, s[kFn], fn);
    set_slot(node, s[kRefs], refs);
    set_slot(node, s[kOutputs], out_refs);
    set_slot(node, s[kPrefix], prefix);
    set_slot(node, s[kUrgent], Py_False);
    ok = PyList_Append(r.nodes, node) == 0;
  }
  if (ok) {  // what record expects next
    PyObject* guess = PyDict_GetItemWithError(r.next, prefix);
    ok = (guess != nullptr || !PyErr_Occurred()) &&
         PyDict_SetItem(r.globals, r.guess_name, guess == nullptr ? Py_None : guess) == 0;
  }
  Py_XDECREF(index);
  Py_XDECREF(out_refs);
  Py_XDECREF(node);
  if (!ok) {
    Py_XDECREF(outs);
    return nullptr;
  }
  return outs;
}

// Whether ``out_buffers`` is a list or tuple of (shape, dtype) tuples.
bool plain_out_buffers(PyObject* out_buffers) {
  if (!PyList_CheckExact(out_buffers) && !PyTuple_CheckExact(out_buffers)) {
    return false;
  }
  PyObject** items = PySequence_Fast_ITEMS(out_buffers);
  for (Py_ssize_t k = 0, n = PySequence_Fast_GET_SIZE(out_buffers); k < n; ++k) {
    if (!PyTuple_CheckExact(items[k]) || PyTuple_GET_SIZE(items[k]) != 2) {
      return false;
    }
  }
  return PySequence_Fast_GET_SIZE(out_buffers) > 0;
}

// Under fusion._lock: the results of the predicted op, or nullptr with no
// error (not the predicted case: the caller hands the call to _record), or
// nullptr with an error.
PyObject* record_predicted(const Recorder& r, PyObject* fn, PyObject* inputs, PyObject* out_buffers) {
  PyObject* guess = PyDict_GetItemWithError(r.globals, r.guess_name);  // borrowed
  if (guess == nullptr || !PyTuple_CheckExact(guess) || PyTuple_GET_SIZE(guess) != 3 ||
      PyTuple_GET_ITEM(guess, 0) != fn || !PyTuple_CheckExact(PyTuple_GET_ITEM(guess, 1))) {
    return nullptr;
  }
  PyObject* max_ops = PyDict_GetItemWithError(r.globals, r.max_name);
  Py_ssize_t limit = max_ops == nullptr ? -1 : index_of(max_ops);
  PyObject* prefix = PyTuple_GET_ITEM(guess, 2);
  if (limit < 0 || PyList_GET_SIZE(r.nodes) + 1 >= limit) {
    return nullptr;  // the size limit's flush: _record
  }
  int read_point = PySet_Contains(r.read_points, prefix);
  if (read_point != 0) {
    return nullptr;  // an early launch here (or an error): _record
  }
  Py_INCREF(guess);  // (kept alive while its refs are replayed)
  PyObject* refs = PyTuple_GET_ITEM(guess, 1);
  PyObject* outs = nullptr;
  int wired = replay(r, inputs, refs);
  if (wired == 1) {
    outs = append_node(r, fn, refs, prefix, out_buffers);
  }
  Py_DECREF(guess);
  return outs;
}

// record(fn, inputs, out_buffers[, urgent]): fusion.record.
PyObject* record(PyObject* self, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  const auto* r = static_cast<const Recorder*>(PyCapsule_GetPointer(self, kCapsule));
  Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  if (r == nullptr) {
    return nullptr;
  }
  if (nargs != 3 || kwnames != nullptr || !(PyList_CheckExact(args[1]) || PyTuple_CheckExact(args[1])) ||
      !plain_out_buffers(args[2])) {
    return PyObject_Vectorcall(r->fallback, args, nargsf, kwnames);
  }
  PyObject* held = PyObject_CallNoArgs(r->acquire);
  if (held == nullptr) {
    return nullptr;
  }
  Py_DECREF(held);
  PyObject* outs = record_predicted(*r, args[0], args[1], args[2]);
  PyObject* error_type = nullptr;
  PyObject* error_value = nullptr;
  PyObject* error_trace = nullptr;
  PyErr_Fetch(&error_type, &error_value, &error_trace);  // (released whatever happened)
  PyObject* released = PyObject_CallNoArgs(r->release);
  if (released == nullptr) {
    Py_XDECREF(error_type);
    Py_XDECREF(error_value);
    Py_XDECREF(error_trace);
    Py_XDECREF(outs);
    return nullptr;
  }
  Py_DECREF(released);
  PyErr_Restore(error_type, error_value, error_trace);
  if (outs != nullptr || PyErr_Occurred()) {
    return outs;
  }
  return PyObject_Vectorcall(r->fallback, args, nargsf, kwnames);
}

PyMethodDef record_def = {
    "record", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(record)),
    METH_FASTCALL | METH_KEYWORDS, "fusion.record, with a predicted op recorded in C++ (native/recorder.cpp)."};

}  // namespace

Py_ssize_t member_offset(PyTypeObject* type, const char* name) {
  PyObject* descr = PyDict_GetItemString(type->tp_dict, name);  // borrowed
  if (descr == nullptr || Py_TYPE(descr) != &PyMemberDescr_Type) {
    PyErr_Format(PyExc_TypeError, "%s.%s is not a __slots__ member", type->tp_name, name);
    return -1;
  }
  return reinterpret_cast<PyMemberDescrObject*>(descr)->d_member->offset;
}

PyObject* fused_recorder(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 2 || !PyDict_Check(args[0])) {
    PyErr_SetString(PyExc_TypeError, "fused_recorder(fusion_globals, fallback)");
    return nullptr;
  }
  PyObject* g = args[0];
  auto* r = new Recorder();
  Py_INCREF(g);
  r->globals = g;
  Py_INCREF(args[1]);
  r->fallback = args[1];
  PyObject* lock = item(g, "_lock");
  PyObject* numbers = item(g, "_numbers");
  PyObject* jax = item(g, "jax");
  bool ok = lock != nullptr && numbers != nullptr && jax != nullptr;
  if (ok) {
    r->acquire = PyObject_GetAttrString(lock, "acquire");
    r->release = PyObject_GetAttrString(lock, "release");
    r->jax_array = PyObject_GetAttrString(jax, "Array");
    ok = r->acquire && r->release && r->jax_array && PyTuple_Check(numbers) && PyTuple_GET_SIZE(numbers) == 2;
  }
  if (ok) {
    for (int k = 0; k < 2; ++k) {
      r->packs[k] = PyTuple_GET_ITEM(numbers, k);
      Py_INCREF(r->packs[k]);
    }
    r->nodes = item(g, "_nodes");
    r->external = item(g, "_external");
    r->external_index = item(g, "_external_index");
    r->next = item(g, "_next");
    r->read_points = item(g, "_read_points");
    r->lazy_type = type_item(g, "LazyBuffer");
    r->node_type = type_item(g, "_Node");
    r->produced_type = type_item(g, "Produced");
    r->number_type = type_item(g, "Number");
    r->array_impl = type_item(g, "_ArrayImpl");
    r->guess_name = PyUnicode_InternFromString("_guess");
    r->max_name = PyUnicode_InternFromString("MAX_PENDING_OPS");
    ok = r->nodes && PyList_CheckExact(r->nodes) && r->external && PyList_CheckExact(r->external) &&
         r->external_index && PyDict_CheckExact(r->external_index) && r->next && PyDict_CheckExact(r->next) &&
         r->read_points && PySet_CheckExact(r->read_points) && PyList_CheckExact(r->packs[0]) &&
         PyList_CheckExact(r->packs[1]) && r->lazy_type && r->node_type && r->produced_type &&
         r->number_type && r->array_impl && r->guess_name && r->max_name;
    if (!ok && !PyErr_Occurred()) {
      PyErr_SetString(PyExc_TypeError, "fusion's pending-program state is not as the native recorder expects");
    }
  }
  const char* lazy_names[] = {"shape", "dtype", "value", "node", "slot", "early"};
  const char* node_names[] = {"fn", "refs", "outputs", "prefix", "urgent"};
  for (int k = 0; ok && k < 6; ++k) {
    ok = (r->lazy_slots[k] = member_offset(r->lazy_type, lazy_names[k])) >= 0;
  }
  for (int k = 0; ok && k < 5; ++k) {
    ok = (r->node_slots[k] = member_offset(r->node_type, node_names[k])) >= 0;
  }
  Py_XDECREF(lock);
  Py_XDECREF(numbers);
  Py_XDECREF(jax);
  PyObject* capsule = ok ? PyCapsule_New(r, kCapsule, drop_capsule) : nullptr;
  if (capsule == nullptr) {
    drop(r);
    return nullptr;
  }
  PyObject* fn = PyCFunction_New(&record_def, capsule);  // (holds the capsule: the recorder lives as long)
  Py_DECREF(capsule);
  return fn;
}

}  // namespace torch_tpu_native
