// A Python kernel registered for the tpu key from C++, in place of
// torch.library's registration.  The dispatcher hands a kernel its arguments
// on a stack of IValues; torch.library's holder (PythonKernelHolder) turns
// them into a tuple and a dict through the schema, calls the kernel through
// pybind11, and turns the result back.  That is ~2 us an op, and a Python
// number in a tensor position (``x * 0.5``: a "wrapped number" tensor) costs
// ~3 us more: the holder makes it a Python tensor, looks for an attribute it
// does not have (an AttributeError made and dropped), then reads its value.
// This kernel makes the same arguments -- positional ones up to the last that
// is not its default, keyword-only ones that are not their defaults as
// keywords, dtypes, layouts and memory formats as their Python objects, a
// wrapped number as the Python number it was -- into one vectorcall, and
// pushes the result as the holder does (a tensor result unpacked directly).
#include "helper.h"

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/SmallVector.h>
#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/csrc/utils/tensor_memoryformats.h>
#include <torch/library.h>

namespace torch_tpu_native {
namespace {

// how an argument becomes a Python object: by its schema type, as the holder does
enum class ArgKind { kDtype, kLayout, kMemoryFormat, kValue };

ArgKind kind_of(const c10::Argument& arg) {
  auto is = [&](c10::TypeKind kind) {
    const auto& t = arg.real_type();
    if (t->kind() == kind) {
      return true;
    }
    auto optional = t->cast<c10::OptionalType>();
    return optional && optional->getElementType()->kind() == kind;
  };
  if (is(c10::ScalarTypeType::Kind)) {
    return ArgKind::kDtype;
  }
  if (is(c10::LayoutType::Kind)) {
    return ArgKind::kLayout;
  }
  if (is(c10::MemoryFormatType::Kind)) {
    return ArgKind::kMemoryFormat;
  }
  return ArgKind::kValue;
}

// A wrapped number's value as the Python number it came from, or nullptr
// (not one of the kinds Python numbers wrap to).
PyObject* wrapped_number(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::ScalarType::Double:
      return PyFloat_FromDouble(*t.const_data_ptr<double>());
    case at::ScalarType::Long:
      return PyLong_FromLongLong(*t.const_data_ptr<int64_t>());
    case at::ScalarType::Bool:
      return PyBool_FromLong(*t.const_data_ptr<bool>());
    case at::ScalarType::ComplexDouble: {
      const auto z = *t.const_data_ptr<c10::complex<double>>();
      return PyComplex_FromDoubles(z.real(), z.imag());
    }
    default:
      return nullptr;
  }
}

// ``v`` as the holder passes it (a new reference; throws on an error)
PyObject* to_python(const c10::IValue& v, ArgKind kind) {
  if (v.isNone()) {
    Py_RETURN_NONE;
  }
  switch (kind) {
    case ArgKind::kDtype:
      return Py_NewRef(reinterpret_cast<PyObject*>(torch::getTHPDtype(static_cast<c10::ScalarType>(v.toInt()))));
    case ArgKind::kLayout:
      return Py_NewRef(reinterpret_cast<PyObject*>(torch::getTHPLayout(static_cast<c10::Layout>(v.toInt()))));
    case ArgKind::kMemoryFormat:
      return Py_NewRef(torch::utils::getTHPMemoryFormat(static_cast<c10::MemoryFormat>(v.toInt())));
    case ArgKind::kValue:
      break;
  }
  if (v.isTensor()) {
    const at::Tensor& t = v.toTensor();
    if (t.defined() && !t.unsafeGetTensorImpl()->is_wrapped_number()) {
      return THPVariable_Wrap(t);
    }
    if (t.defined()) {
      if (PyObject* number = wrapped_number(t)) {
        return number;
      }
    }
  } else if (v.isDouble()) {
    return PyFloat_FromDouble(v.toDouble());
  } else if (v.isInt()) {
    return PyLong_FromLongLong(v.toInt());
  } else if (v.isBool()) {
    return PyBool_FromLong(v.toBool());
  }
  return torch::jit::toPyObject(v).release().ptr();
}

[[noreturn]] void raise_python_error() {
  python_error error;
  error.persist();
  throw std::move(error);
}

struct BoxedPythonKernel final : c10::OperatorKernel {
  PyObject* fn = nullptr;              // the kernel (held for the process, as its registration)
  std::vector<ArgKind> kinds;          // each argument's
  std::vector<PyObject*> names;        // each argument's name, interned (held for the process)
  size_t kwarg_only_start = 0;         // the first keyword-only argument
  std::vector<c10::TypePtr> returns;   // the schema's return types
  std::vector<bool> returns_tensor;    // whether each is a plain Tensor

  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
    const auto& schema = op.schema();
    const size_t n = kinds.size();
    const auto arguments = torch::jit::last(*stack, n);
    auto is_default = [&](size_t i) {
      const auto& d = schema.arguments()[i].default_value();
      return d.has_value() && !(*d != arguments[i]);
    };
    size_t positional = kwarg_only_start;
    while (positional > 0 && is_default(positional - 1)) {
      --positional;
    }
    c10::SmallVector<size_t, 4> keywords;
    for (size_t i = kwarg_only_start; i < n; ++i) {
      if (!is_default(i)) {
        keywords.push_back(i);
      }
    }
    pybind11::gil_scoped_acquire gil;
    c10::SmallVector<PyObject*, 8> items;
    PyObject* kwnames = nullptr;
    PyObject* result = nullptr;
    bool failed = false;
    try {
      for (size_t i = 0; i < positional; ++i) {
        items.push_back(to_python(arguments[i], kinds[i]));
      }
      if (!keywords.empty()) {
        kwnames = PyTuple_New(static_cast<Py_ssize_t>(keywords.size()));
        failed = kwnames == nullptr;
        for (size_t k = 0; !failed && k < keywords.size(); ++k) {
          PyTuple_SET_ITEM(kwnames, k, Py_NewRef(names[keywords[k]]));
          items.push_back(to_python(arguments[keywords[k]], kinds[keywords[k]]));
        }
      }
    } catch (...) {  // (toPyObject's error)
      for (PyObject* item : items) {
        Py_XDECREF(item);
      }
      Py_XDECREF(kwnames);
      throw;
    }
    for (PyObject* item : items) {
      failed = failed || item == nullptr;
    }
    if (!failed) {
      result = PyObject_Vectorcall(fn, items.data(), positional, kwnames);
    }
    for (PyObject* item : items) {
      Py_XDECREF(item);
    }
    Py_XDECREF(kwnames);
    if (result == nullptr) {
      raise_python_error();
    }
    pybind11::object out = pybind11::reinterpret_steal<pybind11::object>(result);
    torch::jit::drop(*stack, n);
    push_result(op, stack, out);
  }

  // the result on the stack, as the holder's pushPyOutToStack does
  void push_result(const c10::OperatorHandle& op, torch::jit::Stack* stack, const pybind11::object& out) {
    auto push_one = [&](PyObject* obj, size_t i) {
      if (returns_tensor[i] && THPVariable_CheckExact(obj)) {
        torch::jit::push(stack, THPVariable_Unpack(obj));
      } else {
        torch::jit::push(stack, torch::jit::toIValue(obj, returns[i]));
      }
    };
    if (returns.empty()) {
      TORCH_CHECK(out.is_none(), "Expected the tpu kernel for ", op.operator_name(),
                  " to return None but it returned something else instead.");
    } else if (returns.size() == 1) {
      push_one(out.ptr(), 0);
    } else {
      auto outs = pybind11::cast<pybind11::sequence>(out);
      for (size_t i = 0; i < outs.size(); ++i) {
        pybind11::object item = outs[i];
        push_one(item.ptr(), i);
      }
    }
  }
};

// A kernel replaced on purpose (registry.guard and wrap_entry put a wrapper in
// front of an op's kernel) is not worth the dispatcher's warning.
struct Quiet final : c10::WarningHandler {
  void process(const c10::Warning&) override {}
};

// one IMPL library per namespace, alive as long as the process (the registrations)
std::unordered_map<std::string, torch::Library*>& libraries() {
  static std::unordered_map<std::string, torch::Library*> libs;
  return libs;
}

}  // namespace

// register_python_kernel(namespace, "name[.overload]", fn): ``fn`` as the tpu
// key's kernel of that op (its overload name, if any, after the dot), called
// as torch.library would call it.
PyObject* register_python_kernel(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 3 || !PyUnicode_Check(args[0]) || !PyUnicode_Check(args[1]) || !PyCallable_Check(args[2])) {
    PyErr_SetString(PyExc_TypeError, "register_python_kernel(namespace, 'name.overload', fn)");
    return nullptr;
  }
  const std::string ns = PyUnicode_AsUTF8(args[0]);
  const std::string name = PyUnicode_AsUTF8(args[1]);
  try {
    const auto dot = name.find('.');
    const std::string base = name.substr(0, dot);
    const std::string overload = dot == std::string::npos ? "" : name.substr(dot + 1);
    auto op = c10::Dispatcher::singleton().findSchema({ns + "::" + base, overload});
    if (!op.has_value()) {
      PyErr_Format(PyExc_RuntimeError, "no operator %s::%s", ns.c_str(), name.c_str());
      return nullptr;
    }
    const auto& schema = op->schema();
    auto kernel = std::make_unique<BoxedPythonKernel>();
    kernel->kwarg_only_start = schema.arguments().size();
    for (const auto& arg : schema.arguments()) {
      kernel->kinds.push_back(kind_of(arg));
      kernel->names.push_back(PyUnicode_InternFromString(arg.name().c_str()));
    }
    while (kernel->kwarg_only_start > 0 && schema.arguments()[kernel->kwarg_only_start - 1].kwarg_only()) {
      --kernel->kwarg_only_start;
    }
    for (const auto& ret : schema.returns()) {
      kernel->returns.push_back(ret.real_type());
      kernel->returns_tensor.push_back(ret.real_type()->kind() == c10::TensorType::Kind);
    }
    Py_INCREF(args[2]);
    kernel->fn = args[2];
    auto& lib = libraries()[ns];
    if (lib == nullptr) {
      lib = new torch::Library(torch::Library::IMPL, ns, c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
    }
    Quiet quiet;
    c10::WarningUtils::WarningHandlerGuard silenced(&quiet);
    lib->impl(name.c_str(), torch::CppFunction::makeFromBoxedKernel(
                                c10::BoxedKernel::makeFromFunctor(std::move(kernel))));
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return nullptr;
  }
  Py_RETURN_NONE;
}

}  // namespace torch_tpu_native
