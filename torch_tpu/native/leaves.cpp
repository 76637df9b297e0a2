// A cached signature's check (ops/signature_match.py, Matcher.match) in C++.
// After PyTorch's C++ tensor check has passed, each leaf of the call is
// checked against the signature's: a tensor's buffer (the jax array or
// pending fused result its storage holds), that buffer's shape and dtype and
// the tensor's storage offset; a number's type; a static value.  An
// optimizer's foreach op has ~30-110 leaves and the Python loop costs
// ~0.5-1 us a leaf; this one a fraction of that.  matcher_inputs makes the
// whole check -- a list argument's elements laid out as leaves, the tensor
// check, the repeats, the leaves -- from a Matcher's ``checks``, for the
// kernel entry (entry.cpp).  Both answer exactly as the Python code
// (tests/test_signature_match.py compares them).
#include "helper.h"

#include <algorithm>
#include <vector>

#include <torch/csrc/Storage.h>
#include <torch/csrc/autograd/python_variable.h>

namespace torch_tpu_native {
namespace {

// the leaf kinds, numbered as signature_match numbers them
enum Kind : long { kTensor = 0, kNumber = 1, kListNumber = 2, kStatic = 3 };

struct Names {
  PyObject* tpu_buf = PyUnicode_InternFromString("_tpu_buf");
  PyObject* aval = PyUnicode_InternFromString("aval");
  PyObject* shape = PyUnicode_InternFromString("shape");
  PyObject* dtype = PyUnicode_InternFromString("dtype");
};

const Names& names() {
  static const Names n;  // (first call: under the GIL)
  return n;
}

// 1 if ``x`` differs from ``want`` (identity first), 0 if not, -1 on an error.
int differs(PyObject* x, PyObject* want) {
  return x == want ? 0 : PyObject_RichCompareBool(x, want, Py_NE);
}

// The buffer that tensor leaf ``x`` passes, if it has the signature's
// (buffer shape ``shape``, dtype ``dtype``, storage offset ``offset`` -- None:
// any, a view read at a run-time offset): a new
// reference; nullptr with no error set if it does not; nullptr with an error
// set on an error.
PyObject* tensor_buffer(PyObject* x, PyObject* shape, PyObject* dtype, PyObject* offset, PyObject* lazy_type) {
  if (!THPVariable_Check(x)) {
    return nullptr;
  }
  const at::Tensor& t = THPVariable_Unpack(x);
  PyObject* storage = THPStorage_Wrap(t.storage());
  if (storage == nullptr) {
    return nullptr;
  }
  PyObject* buf = optional_attr(storage, names().tpu_buf);
  Py_DECREF(storage);
  if (buf == nullptr) {  // a C++-made alias storage (or an error): the caller's slow way
    return nullptr;
  }
  // shape and dtype: a jax.Array's abstract value has them; a LazyBuffer (or NumPy array) itself
  PyObject* aval = reinterpret_cast<PyObject*>(Py_TYPE(buf)) == lazy_type ? nullptr : optional_attr(buf, names().aval);
  if (aval == nullptr) {
    if (PyErr_Occurred()) {
      Py_DECREF(buf);
      return nullptr;
    }
    Py_INCREF(buf);
    aval = buf;
  }
  int bad = -1;
  PyObject* got_shape = PyObject_GetAttr(aval, names().shape);
  if (got_shape != nullptr) {
    bad = differs(got_shape, shape);
    Py_DECREF(got_shape);
  }
  if (bad == 0) {
    PyObject* got_dtype = PyObject_GetAttr(aval, names().dtype);
    bad = got_dtype == nullptr ? -1 : differs(got_dtype, dtype);
    Py_XDECREF(got_dtype);
  }
  Py_DECREF(aval);
  if (bad == 0 && offset != Py_None) {  // (None: a view read at a run-time offset, any offset)
    long long want = PyLong_AsLongLong(offset);
    bad = (want == -1 && PyErr_Occurred()) ? -1 : t.storage_offset() != want;
  }
  if (bad != 0) {
    Py_DECREF(buf);
    return nullptr;
  }
  return buf;
}

}  // namespace

PyObject* leaves_of(PyObject* const* items, Py_ssize_t n, PyObject* specs, bool fused, const LeafRefs& refs) {
  n = std::min(n, PyTuple_GET_SIZE(specs));  // (zip's)
  PyObject* inputs = PyList_New(0);
  bool refused = false;
  for (Py_ssize_t i = 0; inputs != nullptr && !refused && i < n; ++i) {
    PyObject* x = items[i];
    PyObject* spec = PyTuple_GET_ITEM(specs, i);
    const long kind = PyLong_AsLong(PyTuple_GET_ITEM(spec, 0));
    PyObject* a = PyTuple_GET_ITEM(spec, 1);
    PyObject* input = nullptr;  // new reference to append
    if (kind == kTensor) {
      PyObject* buf = tensor_buffer(x, a, PyTuple_GET_ITEM(spec, 2), PyTuple_GET_ITEM(spec, 3), refs.lazy_type);
      if (buf == nullptr) {
        refused = true;
      } else if (fused || reinterpret_cast<PyObject*>(Py_TYPE(buf)) != refs.lazy_type) {
        input = buf;
      } else {  // a pending fused result passed in strict mode: computed first
        input = PyObject_CallOneArg(refs.resolve, buf);
        Py_DECREF(buf);
      }
    } else if (kind == kStatic) {  // as Python's ``x != a``: no identity shortcut (a NaN is not equal to itself)
      if (Py_TYPE(x) != Py_TYPE(a)) {
        refused = true;
      } else {
        PyObject* ne = PyObject_RichCompare(x, a, Py_NE);
        refused = ne == nullptr || PyObject_IsTrue(ne) != 0;
        Py_XDECREF(ne);
      }
    } else if (reinterpret_cast<PyObject*>(Py_TYPE(x)) != a) {  // a traced number of kind ``a``
      refused = true;
    } else if (kind == kNumber && !fused) {
      // its device copy looked up first (on_device's first step, without its frame)
      PyObject* kept = PyFloat_CheckExact(x) ? refs.floats : PyLong_CheckExact(x) ? refs.ints : nullptr;
      input = kept == nullptr ? nullptr : PyDict_GetItemWithError(kept, x);
      if (input != nullptr) {
        Py_INCREF(input);
      } else if (!PyErr_Occurred()) {
        input = PyObject_CallOneArg(refs.on_device, x);
      }
    } else {  // fused mode records numbers as they are; a list's numbers are passed so
      Py_INCREF(x);
      input = x;
    }
    if (PyErr_Occurred()) {
      Py_XDECREF(input);
      Py_CLEAR(inputs);
    } else if (input != nullptr) {
      if (PyList_Append(inputs, input) < 0) {
        Py_CLEAR(inputs);
      }
      Py_DECREF(input);
    }
  }
  if (inputs != nullptr && refused) {
    Py_DECREF(inputs);
    Py_RETURN_NONE;
  }
  return inputs;
}

namespace {

// ``x``'s items if it is a list or tuple of ``n``, else nullptr.
PyObject* const* items_of(PyObject* x, Py_ssize_t n) {
  if (PyList_CheckExact(x) && PyList_GET_SIZE(x) == n) {
    return PySequence_Fast_ITEMS(x);
  }
  if (PyTuple_CheckExact(x) && PyTuple_GET_SIZE(x) == n) {
    return PySequence_Fast_ITEMS(x);
  }
  return nullptr;
}

// The checks after the leaves are laid out: the tensor check (geometry.cpp's,
// or PyTorch's TensorGuards), the repeats, each leaf.
PyObject* checked_leaves(PyObject* const* leaves, Py_ssize_t n, PyObject* guard_check, PyObject* tensor_at,
                         PyObject* repeats, PyObject* specs, bool fused, const LeafRefs& refs) {
  // PyTorch's C++ check of the distinct tensors' geometry, in one call
  const Py_ssize_t k = PyTuple_GET_SIZE(tensor_at);
  std::vector<PyObject*> tensors(static_cast<size_t>(k));
  for (Py_ssize_t i = 0; i < k; ++i) {
    const Py_ssize_t at = PyLong_AsSsize_t(PyTuple_GET_ITEM(tensor_at, i));
    if (at < 0 || at >= n) {
      if (!PyErr_Occurred()) {
        PyErr_SetString(PyExc_IndexError, "a matcher's tensor position is out of range");
      }
      return nullptr;
    }
    tensors[static_cast<size_t>(i)] = leaves[at];
  }
  int passed = geometry_passes(guard_check, tensors.data(), k);  // (our own check: no call)
  if (passed < 0) {
    PyObject* ok = PyObject_Vectorcall(guard_check, tensors.data(), k, nullptr);
    if (ok == nullptr) {
      return nullptr;
    }
    passed = PyObject_IsTrue(ok);
    Py_DECREF(ok);
  }
  if (passed <= 0) {
    if (passed < 0) {
      return nullptr;
    }
    Py_RETURN_NONE;
  }
  // a tensor passed twice is that same object each time
  for (Py_ssize_t r = 0; r < PyTuple_GET_SIZE(repeats); ++r) {
    PyObject* pair = PyTuple_GET_ITEM(repeats, r);
    const Py_ssize_t i = PyLong_AsSsize_t(PyTuple_GET_ITEM(pair, 0));
    const Py_ssize_t j = PyLong_AsSsize_t(PyTuple_GET_ITEM(pair, 1));
    if (i < 0 || j < 0 || i >= n || j >= n) {
      if (!PyErr_Occurred()) {
        PyErr_SetString(PyExc_IndexError, "a matcher's repeat is out of range");
      }
      return nullptr;
    }
    if (leaves[i] != leaves[j]) {
      Py_RETURN_NONE;
    }
  }
  return leaves_of(leaves, n, specs, fused, refs);
}

}  // namespace

PyObject* matcher_inputs(PyObject* checks, PyObject* const* args, Py_ssize_t nargs, bool fused,
                         const LeafRefs& refs) {
  if (!PyTuple_CheckExact(checks) || PyTuple_GET_SIZE(checks) != 6) {
    PyErr_SetString(PyExc_TypeError,
                    "a matcher's checks are (guard_check, tensor_at, repeats, leaves, list_lens, moving)");
    return nullptr;
  }
  PyObject* guard_check = PyTuple_GET_ITEM(checks, 0);
  PyObject* tensor_at = PyTuple_GET_ITEM(checks, 1);
  PyObject* repeats = PyTuple_GET_ITEM(checks, 2);
  PyObject* specs = PyTuple_GET_ITEM(checks, 3);
  PyObject* list_lens = PyTuple_GET_ITEM(checks, 4);
  if (list_lens == Py_None) {  // one leaf an argument: the arguments are the leaves
    if (nargs != PyTuple_GET_SIZE(specs)) {
      Py_RETURN_NONE;
    }
    return checked_leaves(args, nargs, guard_check, tensor_at, repeats, specs, fused, refs);
  }
  if (nargs != PyTuple_GET_SIZE(list_lens)) {
    Py_RETURN_NONE;
  }
  // a list argument's elements are leaves (held: the checks may run Python)
  std::vector<PyObject*> leaves;
  leaves.reserve(static_cast<size_t>(PyTuple_GET_SIZE(specs)));
  bool refused = false;
  for (Py_ssize_t i = 0; i < nargs && !refused; ++i) {
    const Py_ssize_t n = PyLong_AsSsize_t(PyTuple_GET_ITEM(list_lens, i));
    if (n == -1 && PyErr_Occurred()) {
      return nullptr;
    }
    if (n < 0) {
      leaves.push_back(args[i]);
    } else if (PyObject* const* items = items_of(args[i], n)) {
      leaves.insert(leaves.end(), items, items + n);
    } else {
      refused = true;
    }
  }
  if (refused) {
    Py_RETURN_NONE;
  }
  for (PyObject* x : leaves) {
    Py_INCREF(x);
  }
  PyObject* inputs = checked_leaves(leaves.data(), static_cast<Py_ssize_t>(leaves.size()), guard_check, tensor_at,
                                    repeats, specs, fused, refs);
  for (PyObject* x : leaves) {
    Py_DECREF(x);
  }
  return inputs;
}

namespace {

// (lazy_type, resolve, on_device[, floats, ints]) as LeafRefs (borrowed)
void refs_of(PyObject* const* args, Py_ssize_t n, LeafRefs* refs) {
  refs->lazy_type = args[0];
  refs->resolve = args[1];
  refs->on_device = args[2];
  refs->floats = n > 3 && PyDict_Check(args[3]) ? args[3] : nullptr;
  refs->ints = n > 4 && PyDict_Check(args[4]) ? args[4] : nullptr;
}

}  // namespace

// match_leaves(leaves, specs, fused, lazy_type, resolve, on_device): the
// inputs Matcher.match returns for these leaves (a list), or None.
PyObject* match_leaves(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 6) {
    PyErr_SetString(PyExc_TypeError, "match_leaves(leaves, specs, fused, lazy_type, resolve, on_device)");
    return nullptr;
  }
  if (!PyTuple_Check(args[1])) {
    PyErr_SetString(PyExc_TypeError, "specs must be a tuple");
    return nullptr;
  }
  PyObject* leaves = PySequence_Fast(args[0], "leaves must be a sequence");
  if (leaves == nullptr) {
    return nullptr;
  }
  LeafRefs refs;
  refs_of(args + 3, 3, &refs);
  PyObject* inputs = leaves_of(PySequence_Fast_ITEMS(leaves), PySequence_Fast_GET_SIZE(leaves), args[1],
                               PyObject_IsTrue(args[2]) == 1, refs);
  Py_DECREF(leaves);
  return inputs;
}

// match_call(checks, args, fused, lazy_type, resolve, on_device, floats, ints):
// what a Matcher's check returns for ``args`` (a tuple), checked in C++ from
// its ``checks`` as the kernel entry checks it (tests compare the two).
PyObject* match_call(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 8 || !PyTuple_Check(args[1])) {
    PyErr_SetString(PyExc_TypeError, "match_call(checks, args, fused, lazy_type, resolve, on_device, floats, ints)");
    return nullptr;
  }
  LeafRefs refs;
  refs_of(args + 3, 5, &refs);
  return matcher_inputs(args[0], PySequence_Fast_ITEMS(args[1]), PyTuple_GET_SIZE(args[1]),
                      PyObject_IsTrue(args[2]) == 1, refs);
}

}  // namespace torch_tpu_native
