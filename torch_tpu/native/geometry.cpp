// A cached signature's tensor check (ops/signature_match.py, _guard): the
// distinct tensors of a call have the Python type, dispatch keys, dtype,
// device, requires_grad, sizes and strides they had when the signature was
// made.  This is what Dynamo's TensorGuards checks for static shapes, without
// its call through Python's tuple protocol and its per-call local-state
// snapshot (~0.4 us an op): the kernel entry (leaves.cpp) runs it directly.
// The dispatch keys are compared as the tensor holds them, not with the
// thread's included and excluded keys applied: a kernel's program depends on
// the tensor (a lazy conjugate or negative view, a zero tensor), not on which
// dispatch keys the caller's thread has switched off around it.
#include "helper.h"

#include <memory>
#include <vector>

#include <torch/csrc/autograd/python_variable.h>

namespace torch_tpu_native {
namespace {

struct Geometry {
  PyTypeObject* pytype;  // (held: guard_dealloc lets go)
  bool plain;            // strided, with concrete sizes: the only tensors whose geometry is compared
  uint64_t keys;
  c10::ScalarType dtype;
  c10::DeviceIndex index;
  bool requires_grad;
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
};

struct GeometryGuard {
  PyObject_HEAD
  std::vector<Geometry>* geometries;
};

bool plain(const at::Tensor& t) {
  return t.defined() && t.layout() == c10::kStrided && !t.unsafeGetTensorImpl()->has_symbolic_sizes_strides();
}

Geometry geometry_of(PyObject* x) {
  const at::Tensor& t = THPVariable_Unpack(x);
  Py_INCREF(Py_TYPE(x));
  if (!plain(t)) {  // (sparse, nested, symbolic: never passes; such a call takes the Kernel's own path)
    return Geometry{Py_TYPE(x), false, 0, c10::ScalarType::Undefined, -1, false, {}, {}};
  }
  return Geometry{Py_TYPE(x), true, t.key_set().raw_repr(), t.scalar_type(), t.device().index(),
                  t.requires_grad(), t.sizes().vec(), t.strides().vec()};
}

bool same(const Geometry& g, PyObject* x) {
  if (!g.plain || Py_TYPE(x) != g.pytype) {  // (a tensor type: THPVariable_Unpack below is valid)
    return false;
  }
  const at::Tensor& t = THPVariable_Unpack(x);
  return plain(t) && t.key_set().raw_repr() == g.keys && t.scalar_type() == g.dtype &&
         t.device().index() == g.index && t.requires_grad() == g.requires_grad && t.sizes().equals(g.sizes) &&
         t.strides().equals(g.strides);
}

bool passes(const GeometryGuard* guard, PyObject* const* tensors, Py_ssize_t n) {
  const auto& geometries = *guard->geometries;
  if (n != static_cast<Py_ssize_t>(geometries.size())) {
    return false;
  }
  for (Py_ssize_t i = 0; i < n; ++i) {
    if (!same(geometries[static_cast<size_t>(i)], tensors[i])) {
      return false;
    }
  }
  return true;
}

PyObject* guard_check(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  return PyBool_FromLong(passes(reinterpret_cast<GeometryGuard*>(self), args, nargs));
}

void let_go(std::vector<Geometry>& geometries) {
  for (const Geometry& g : geometries) {
    Py_DECREF(g.pytype);
  }
  geometries.clear();
}

void guard_dealloc(PyObject* self) {
  auto* geometries = reinterpret_cast<GeometryGuard*>(self)->geometries;
  let_go(*geometries);
  delete geometries;
  Py_TYPE(self)->tp_free(self);
}

PyMethodDef guard_methods[] = {
    {"check", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(guard_check)), METH_FASTCALL,
     "check(*tensors): whether they have the geometry this guard was made from."},
    {nullptr, nullptr, 0, nullptr},
};

PyTypeObject guard_type = [] {
  PyTypeObject t{PyVarObject_HEAD_INIT(nullptr, 0)};
  t.tp_name = "torch_tpu.native.GeometryGuard";
  t.tp_basicsize = sizeof(GeometryGuard);
  t.tp_dealloc = guard_dealloc;
  t.tp_flags = Py_TPFLAGS_DEFAULT;
  t.tp_doc = "The geometry of a signature's tensors (geometry_guard); check(*tensors) compares a call's.";
  t.tp_methods = guard_methods;
  return t;
}();

}  // namespace

PyObject* geometry_guard(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (PyType_Ready(&guard_type) < 0) {
    return nullptr;
  }
  auto geometries = std::make_unique<std::vector<Geometry>>();
  geometries->reserve(static_cast<size_t>(nargs));
  for (Py_ssize_t i = 0; i < nargs; ++i) {
    if (!THPVariable_Check(args[i])) {
      let_go(*geometries);
      PyErr_SetString(PyExc_TypeError, "geometry_guard(*tensors): every argument is a tensor");
      return nullptr;
    }
    geometries->push_back(geometry_of(args[i]));
  }
  auto* guard = PyObject_New(GeometryGuard, &guard_type);
  if (guard == nullptr) {
    let_go(*geometries);
    return nullptr;
  }
  guard->geometries = geometries.release();
  return reinterpret_cast<PyObject*>(guard);
}

int geometry_passes(PyObject* check, PyObject* const* tensors, Py_ssize_t n) {
  if (!PyCFunction_Check(check)) {
    return -1;
  }
  PyObject* self = PyCFunction_GET_SELF(check);
  if (self == nullptr || Py_TYPE(self) != &guard_type) {
    return -1;
  }
  return passes(reinterpret_cast<GeometryGuard*>(self), tensors, n) ? 1 : 0;
}

}  // namespace torch_tpu_native
