// A registered kernel's entry from PyTorch's dispatcher in C++: the cached
// path of ops/registry.py's Kernel.__call__.  A call in strict or fused
// mode (its keywords' values matched after its positional arguments, under
// their names, for a kernel with no checked scalar) is checked against the kernel's
// recent signatures (strict; then its last ones of the call's shapes) or the
// op the recorder predicts (fused), as Kernel._matched checks it: here, from
// each matcher's checks (leaves.cpp's matcher_inputs: what the matcher's own
// check does), and an in-place foreach call's written storages when they are
// all distinct.  A match is launched -- the jitted executable called (strict)
// or recorded (fused, through fusion.record), views' run-time offsets passed
// last -- and its output made by the native ledger's own_new (or
// Kernel._finish), or an in-place op's new buffers set on its storages.  No
// Python frame of ours for a cached op (strict: its launch noted in
// pending's queue here; fused: a predicted op recorded in C++).  An in-place
// TensorIterator kernel's destination is checked for overlap first, as
// out_checks.check_overlap does; a destination that overlaps itself or shares
// its storage with another argument goes to the Kernel, which raises or runs
// it.  A strict or fused out= call of a kernel that writes out's buffer in the op's own
// program (Kernel.writes_out: out= is its one keyword, the last leaf) is run
// (or recorded) as an in-place op writing out.  A strict write into part of a large buffer
// donates the buffer when access.can_donate says it may.  Anything
// else -- other keywords, debug mode, a profiler, a miss, a fused write into part
// of a large buffer, a launch that raises -- is handed to the Kernel itself,
// which does all of it as before (a failed launch then runs again there and
// raises its error).
#include "helper.h"

#include <algorithm>
#include <vector>

#include <ATen/MemoryOverlap.h>
#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/Storage.h>
#include <torch/csrc/autograd/python_variable.h>

namespace torch_tpu_native {
namespace {

// What every entry reads, set up once (entry_context).
struct Context {
  PyObject* modes = nullptr;      // eager/modes.py's globals: _mode
  PyObject* fused = nullptr;      // EagerMode.FUSED
  PyObject* strict = nullptr;     // EagerMode.STRICT
  PyObject* fusion = nullptr;     // eager/fusion.py's globals: _guess, record
  PyObject* precision = nullptr;  // precision.py's globals: current
  PyObject* profiler = nullptr;   // torch.autograd.profiler: _is_profiler_enabled
  PyObject* note = nullptr;       // eager/pending.py's note
  PyObject* pending = nullptr;    // its globals (_pending, _LIMIT, _overflow), or nullptr: note is called
  PyObject* own_new = nullptr;    // buffers.wrap_as's native maker
  PyObject* can_donate = nullptr;  // eager/access.py's can_donate(inputs, positions, owners)
  LeafRefs refs;                  // what a matcher's leaves read (owned here; none: the matchers' own check)
  PyObject* identity = nullptr;   // written_lists._IDENTITY: a list length's groups when no storage is shared
  PyObject* s_mode = nullptr;
  PyObject* s_guess = nullptr;
  PyObject* s_record = nullptr;
  PyObject* s_current = nullptr;
  PyObject* s_profiling = nullptr;
  PyObject* s_recent = nullptr;
  PyObject* s_by_fn = nullptr;
  PyObject* s_by_shape = nullptr;
  PyObject* s_shape = nullptr;
  PyObject* s_offsets = nullptr;
  PyObject* s_donor = nullptr;
  PyObject* s_fn = nullptr;
  PyObject* s_out_buffers = nullptr;
  PyObject* s_out_tensors = nullptr;
  PyObject* s_single = nullptr;
  PyObject* s_check = nullptr;
  PyObject* s_checks = nullptr;
  PyObject* s_finish = nullptr;
  PyObject* s_tpu_buf = nullptr;
  PyObject* s_pending = nullptr;
  PyObject* s_limit = nullptr;
  PyObject* s_overflow = nullptr;
  PyObject* s_append = nullptr;
  PyObject* s_free = nullptr;
  PyObject* s_by_offsets = nullptr;
  PyObject* s_is_deleted = nullptr;
  PyObject* s_holds = nullptr;
  PyObject* s_donations = nullptr;
};

Context* context = nullptr;

// One kernel's entry.
struct Entry {
  PyObject* kernel = nullptr;  // the Kernel (its cache read per call: it is replaced when cleared)
  PyObject* cache = nullptr;
  Py_ssize_t plain_arity = 0;
  bool returns_one = false;
  bool inplace = false;      // its mode is "inplace": the written tensors take the results
  bool writes_list = false;  // ... a _foreach_*_ op's list of them
  bool checks_overlap = false;  // its destination checked as out_checks.check_overlap does
  bool keywords = false;     // a call with keywords is matched too (Kernel.keywords)
  bool writes_out = false;   // an out= kernel whose out tensor (the one keyword) takes the result (Kernel.writes_out)
  PyObject* draw = nullptr;  // a random kernel's draw(entry, args) -> its words input (strict only), else nullptr
};

constexpr const char* kCapsule = "torch_tpu.native.Entry";

void drop_entry(PyObject* capsule) {
  auto* e = static_cast<Entry*>(PyCapsule_GetPointer(capsule, kCapsule));
  Py_XDECREF(e->kernel);
  Py_XDECREF(e->cache);
  Py_XDECREF(e->draw);
  delete e;
}

PyObject* borrowed(PyObject* dict, PyObject* name) {  // dict[name] or nullptr (an error set only on failure)
  return PyDict_GetItemWithError(dict, name);
}

// written_lists.matches's common case: 1 if the call whose inputs a matcher
// found has the signature's written-storage groups ``groups`` because every
// written buffer is its own and none is read elsewhere (the groups then are
// the identity's, written_lists._IDENTITY); 0 if only Python can say; -1 on
// an error.
int writes_distinct(const Context& c, PyObject* groups, PyObject* args, PyObject* found) {
  PyObject* written = PyTuple_GET_SIZE(args) > 0 ? PyTuple_GET_ITEM(args, 0) : nullptr;
  if (written == nullptr || !(PyList_CheckExact(written) || PyTuple_CheckExact(written)) || c.identity == nullptr) {
    return 0;
  }
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(written);
  const Py_ssize_t total = PyList_GET_SIZE(found);
  if (total < n) {
    return 0;
  }
  PyObject* length = PyLong_FromSsize_t(n);
  if (length == nullptr) {
    return -1;
  }
  PyObject* identity = borrowed(c.identity, length);
  Py_DECREF(length);
  if (identity == nullptr) {
    return PyErr_Occurred() ? -1 : 0;
  }
  const int same = PyObject_RichCompareBool(groups, identity, Py_EQ);
  if (same <= 0) {
    return same;
  }
  PyObject** items = PySequence_Fast_ITEMS(found);
  std::vector<PyObject*> writes(items, items + n);
  std::sort(writes.begin(), writes.end());
  if (std::adjacent_find(writes.begin(), writes.end()) != writes.end()) {
    return 0;
  }
  for (Py_ssize_t j = n; j < total; ++j) {
    if (std::binary_search(writes.begin(), writes.end(), items[j])) {
      return 0;
    }
  }
  return 1;
}

// The leaf at ``index`` of a call laid out as its matcher lays it out
// (Matcher.offsets: each list argument's elements in turn; ``list_lens``
// None: the arguments themselves), borrowed; nullptr (no error) if none.
PyObject* leaf_of(PyObject* args, PyObject* list_lens, Py_ssize_t index) {
  if (list_lens == Py_None) {
    return index >= 0 && index < PyTuple_GET_SIZE(args) ? PyTuple_GET_ITEM(args, index) : nullptr;
  }
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(args) && i < PyTuple_GET_SIZE(list_lens) && index >= 0; ++i) {
    const Py_ssize_t n = PyLong_AsSsize_t(PyTuple_GET_ITEM(list_lens, i));  // (-1: not a list)
    PyObject* a = PyTuple_GET_ITEM(args, i);
    if (n < 0 && index == 0) {
      return a;
    }
    if (n >= 0 && index < n) {
      return (PyList_CheckExact(a) || PyTuple_CheckExact(a)) && PySequence_Fast_GET_SIZE(a) == n
                 ? PySequence_Fast_GET_ITEM(a, index) : nullptr;
    }
    index -= n < 0 ? 1 : n;
  }
  return nullptr;
}

// The entry for a call a matcher took (a new reference): the hit's own, or
// for views read at run-time offsets (the matcher's ``moving`` leaves) the
// offset-free entry's entry at the call's offsets (_Entry.at), when made
// already; nullptr (no error) when only the Kernel can say.
PyObject* entry_at(const Context& c, PyObject* entry, PyObject* checks, PyObject* args) {
  PyObject* moving = PyTuple_GET_ITEM(checks, 5);
  if (PyTuple_GET_SIZE(moving) == 0) {
    Py_INCREF(entry);
    return entry;
  }
  PyObject* list_lens = PyTuple_GET_ITEM(checks, 4);
  PyObject* offsets = PyTuple_New(PyTuple_GET_SIZE(moving));
  for (Py_ssize_t k = 0; offsets != nullptr && k < PyTuple_GET_SIZE(moving); ++k) {
    PyObject* x = leaf_of(args, list_lens, PyLong_AsSsize_t(PyTuple_GET_ITEM(moving, k)));
    PyObject* offset = x != nullptr && THPVariable_Check(x)
                           ? PyLong_FromLongLong(THPVariable_Unpack(x).storage_offset()) : nullptr;
    if (offset == nullptr) {
      Py_CLEAR(offsets);
    } else {
      PyTuple_SET_ITEM(offsets, k, offset);
    }
  }
  PyErr_Clear();  // (an odd leaf: the Kernel's path)
  PyObject* free = offsets == nullptr ? nullptr : PyObject_GetAttr(entry, c.s_free);
  PyObject* by = free == nullptr || free == Py_None ? nullptr : PyObject_GetAttr(free, c.s_by_offsets);
  PyObject* at = by != nullptr && PyDict_CheckExact(by) ? PyDict_GetItemWithError(by, offsets) : nullptr;
  Py_XINCREF(at);
  Py_XDECREF(by);
  Py_XDECREF(free);
  Py_XDECREF(offsets);
  PyErr_Clear();
  return at;
}

// Whether a signature's keywords ``kw`` (((name, encoding), ...), as
// Kernel._fast_key makes them) are the call's keyword ``names`` (a tuple of
// str, or nullptr: none), in order: 1 if so, 0 if not, -1 when only Python
// can say (an odd key).
int keywords_named(PyObject* kw, PyObject* names) {
  const Py_ssize_t n = names == nullptr ? 0 : PyTuple_GET_SIZE(names);
  if (!PyTuple_CheckExact(kw)) {
    return -1;
  }
  if (PyTuple_GET_SIZE(kw) != n) {
    return 0;
  }
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* pair = PyTuple_GET_ITEM(kw, i);
    if (!PyTuple_CheckExact(pair) || PyTuple_GET_SIZE(pair) != 2) {
      return -1;
    }
    const int same = PyObject_RichCompareBool(PyTuple_GET_ITEM(pair, 0), PyTuple_GET_ITEM(names, i), Py_EQ);
    if (same <= 0) {
      PyErr_Clear();
      return same < 0 ? -1 : 0;
    }
  }
  return 1;
}

// Kernel._matched: the entry (a new reference) of ``hit`` if a matcher takes
// ``args`` (a tuple), its inputs in ``*inputs`` (new); nullptr with no error
// when none does; ``*python`` set when only the Python path can say (a list
// signature's written-storage groups, but for their common case).  nullptr
// with an error on an error.
PyObject* matched(const Context& c, PyObject* hit, PyObject* args, PyObject* names, bool fused, PyObject** inputs,
                  bool* python) {
  if (!PyTuple_CheckExact(hit) || PyTuple_GET_SIZE(hit) != 3) {
    *python = true;
    return nullptr;
  }
  PyObject* key = PyTuple_GET_ITEM(hit, 1);
  PyObject* matchers = PyTuple_GET_ITEM(hit, 2);
  if (!PyTuple_CheckExact(key) || PyTuple_GET_SIZE(key) < 5 || !PyList_CheckExact(matchers)) {
    *python = true;
    return nullptr;
  }
  // torch.get_default_dtype() without the call (dtypes are singletons: compared by identity, as _matched does)
  PyObject* dtype =
      reinterpret_cast<PyObject*>(torch::getTHPDtype(c10::typeMetaToScalarType(at::get_default_dtype())));
  PyObject* current = borrowed(c.precision, c.s_current);
  if (PyTuple_GET_ITEM(key, 3) != dtype || PyTuple_GET_ITEM(key, 4) != current) {
    return nullptr;
  }
  const int same_names = keywords_named(PyTuple_GET_ITEM(key, 1), names);
  if (same_names <= 0) {
    *python = same_names < 0;
    return nullptr;
  }
  PyObject* groups = PyTuple_GET_ITEM(key, 2);
  for (Py_ssize_t k = 0; k < PyList_GET_SIZE(matchers); ++k) {
    PyObject* m = PyList_GET_ITEM(matchers, k);
    Py_INCREF(m);
    // the matcher's checks made here (Matcher.checks); else (None) its own check
    PyObject* checks = c.refs.lazy_type == nullptr ? nullptr : PyObject_GetAttr(m, c.s_checks);
    PyObject* check = checks == nullptr || checks == Py_None ? PyObject_GetAttr(m, c.s_check) : nullptr;
    Py_DECREF(m);
    PyObject* found = nullptr;
    if (check != nullptr) {
      PyObject* call_args[2] = {args, fused ? Py_True : Py_False};
      found = PyObject_Vectorcall(check, call_args, 2, nullptr);
      Py_DECREF(check);
    } else if (checks != nullptr && checks != Py_None) {
      found = matcher_inputs(checks, PySequence_Fast_ITEMS(args), PyTuple_GET_SIZE(args), fused, c.refs);
    }
    if (found == nullptr) {
      Py_XDECREF(checks);
      return nullptr;
    }
    if (found != Py_None && groups != Py_None) {
      const int distinct = PyList_CheckExact(found) ? writes_distinct(c, groups, args, found) : 0;
      if (distinct <= 0) {
        Py_XDECREF(checks);
        Py_DECREF(found);
        *python = distinct == 0;  // written_lists.matches: Python's
        return nullptr;
      }
    }
    if (found != Py_None) {
      PyObject* entry = PyTuple_GET_ITEM(hit, 0);
      entry = checks == nullptr || checks == Py_None ? (Py_INCREF(entry), entry) : entry_at(c, entry, checks, args);
      Py_XDECREF(checks);
      if (entry == nullptr) {  // (at offsets not made yet, or a list's moving views: the Kernel's)
        Py_DECREF(found);
        *python = !PyErr_Occurred();
        return nullptr;
      }
      *inputs = found;
      return entry;  // (held: the matcher's Python may have let the cache drop its hit)
    }
    Py_XDECREF(checks);
    Py_DECREF(found);
  }
  return nullptr;
}

// getattr(x, "shape", None) as a new reference (nullptr with an error on an error)
PyObject* shape_of(PyObject* x, PyObject* name) {
  PyObject* shape = optional_attr(x, name);
  if (shape == nullptr && !PyErr_Occurred()) {
    Py_INCREF(Py_None);
    shape = Py_None;
  }
  return shape;
}

// Kernel._shape_matched: a strict call none of the recent signatures took,
// checked against the kernel's last signatures with its first two
// arguments' shapes (_Cache.by_shape; a training step's many matmul shapes).
// Unlike the Kernel, a hit found so is not moved first among the recent ones.
PyObject* shape_matched(const Context& c, const Entry& e, PyObject* recent, PyObject* args, PyObject* names,
                        PyObject** inputs, bool* python) {
  PyObject* by_shape = PyObject_GetAttr(e.cache, c.s_by_shape);
  if (by_shape == nullptr || !PyDict_CheckExact(by_shape) || PyDict_GET_SIZE(by_shape) == 0) {
    Py_XDECREF(by_shape);
    return nullptr;
  }
  const Py_ssize_t nargs = PyTuple_GET_SIZE(args);
  PyObject* first = shape_of(PyTuple_GET_ITEM(args, 0), c.s_shape);
  PyObject* second = first == nullptr ? nullptr : nargs > 1 ? shape_of(PyTuple_GET_ITEM(args, 1), c.s_shape)
                                                            : (Py_INCREF(Py_None), Py_None);
  PyObject* key = second == nullptr ? nullptr : PyTuple_Pack(2, first, second);
  Py_XDECREF(first);
  Py_XDECREF(second);
  PyObject* same = key == nullptr ? nullptr : borrowed(by_shape, key);
  Py_XDECREF(key);
  PyObject* entry = nullptr;
  if (same != nullptr && PyList_CheckExact(same)) {
    Py_INCREF(same);
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(same) && entry == nullptr && !*python && !PyErr_Occurred(); ++k) {
      PyObject* hit = PyList_GET_ITEM(same, k);
      bool seen = false;  // (recent ones were refused already)
      for (Py_ssize_t r = 0; r < PyList_GET_SIZE(recent) && !seen; ++r) {
        seen = PyList_GET_ITEM(recent, r) == hit;
      }
      if (!seen) {
        Py_INCREF(hit);
        entry = matched(c, hit, args, names, false, inputs, python);
        Py_DECREF(hit);
      }
    }
    Py_DECREF(same);
  }
  Py_DECREF(by_shape);
  return entry;
}

// ``t.untyped_storage()._tpu_buf = buf`` if ``t`` is a tensor whose storage
// has that attribute: whether it did (false, no error: not so).
bool set_tpu_buf(const Context& c, PyObject* t, PyObject* buf) {
  if (!THPVariable_Check(t)) {
    return false;
  }
  PyObject* storage = THPStorage_Wrap(THPVariable_Unpack(t).storage());
  if (storage == nullptr) {
    PyErr_Clear();
    return false;
  }
  PyObject* old = optional_attr(storage, c.s_tpu_buf);
  const bool set = old != nullptr && PyObject_SetAttr(storage, c.s_tpu_buf, buf) == 0;
  Py_XDECREF(old);
  Py_DECREF(storage);
  return set;
}

// Kernel._finish for an in-place kernel: each written tensor's storage takes
// its new buffer (a _foreach_*_ list's, position by position); the result
// (None for a list, else the written tensor).  A storage PyTorch made without
// our buffer attribute (an alias made in C++) sends the whole call to
// _finish, which finds the storage's own (setting a buffer twice is the same).
PyObject* written_back(const Context& c, const Entry& e, PyObject* entry, PyObject* results, PyObject* args,
                       PyObject* written, PyObject* names) {
  bool python = written == nullptr;
  if (!python && e.writes_list) {
    python = !(PyList_CheckExact(written) || PyTuple_CheckExact(written)) || !PySequence_Check(results);
    const Py_ssize_t n = python ? 0 : std::min(PySequence_Fast_GET_SIZE(written), PySequence_Size(results));
    for (Py_ssize_t i = 0; i < n && !python; ++i) {
      PyObject* buf = PySequence_GetItem(results, i);
      python = buf == nullptr || !set_tpu_buf(c, PySequence_Fast_GET_ITEM(written, i), buf);
      Py_XDECREF(buf);
    }
    if (!python && !PyErr_Occurred()) {
      Py_RETURN_NONE;
    }
  } else if (!python) {
    PyObject* buf = PyList_CheckExact(results) && PyList_GET_SIZE(results) > 0 ? PyList_GET_ITEM(results, 0)
                                                                               : results;  // (recorded: a list)
    python = !set_tpu_buf(c, written, buf);
    if (!python && !PyErr_Occurred()) {
      Py_INCREF(written);
      return written;
    }
  }
  if (PyErr_Occurred()) {
    return nullptr;
  }
  PyObject* kwargs = PyDict_New();
  if (kwargs != nullptr && e.writes_out && PyDict_SetItem(kwargs, PyTuple_GET_ITEM(names, 0), written) < 0) {
    Py_CLEAR(kwargs);  // (out= by its name: _finish's written-out case)
  }
  PyObject* finish = kwargs == nullptr ? nullptr : PyObject_GetAttr(e.kernel, c.s_finish);
  PyObject* result = nullptr;
  if (finish != nullptr) {
    PyObject* finish_args[4] = {entry, results, args, kwargs};
    result = PyObject_Vectorcall(finish, finish_args, 4, nullptr);
    Py_DECREF(finish);
  }
  Py_XDECREF(kwargs);
  return result;
}

// The launch queue's newest note, compared by identity only (borrowed: the
// queue holds it while the GIL is), and its index in ``*index``; nullptr when
// the queue is empty, with an error set on an error.
PyObject* newest_note(PyObject* queue, Py_ssize_t* index) {
  const Py_ssize_t held = PyObject_Size(queue);
  *index = held - 1;
  PyObject* last = held > 0 ? PySequence_GetItem(queue, held - 1) : nullptr;
  Py_XDECREF(last);
  return last;
}

// pending.note(results) without its frame: a launch remembered by its single
// array (or a flat tuple or list's first), appended to the queue, which
// Python prunes past its limit; anything else goes to note itself.  The
// newest noted result, when it is one of this launch's ``inputs``, is
// replaced: XLA starts a launch only once its inputs are computed, so waiting
// for the new result waits for both (a chain of ops keeps one entry instead
// of one per op, each asked is_ready() when pruned).  (In C++ only: the GIL
// is held from the look to the replacement, so no other thread's launch comes between.)
// False with an error set on an error.
bool noted(const Context& c, PyObject* results, PyObject* inputs) {
  PyObject* first = results;
  if (PyTuple_CheckExact(results) || PyList_CheckExact(results)) {
    first = PySequence_Fast_GET_SIZE(results) > 0 ? PySequence_Fast_GET_ITEM(results, 0) : nullptr;
  }
  PyObject* queue = c.pending == nullptr ? nullptr : PyDict_GetItemWithError(c.pending, c.s_pending);
  PyObject* limit = queue == nullptr ? nullptr : PyDict_GetItemWithError(c.pending, c.s_limit);
  if (first == nullptr || first == Py_None || PyTuple_CheckExact(first) || PyList_CheckExact(first) ||
      limit == nullptr || !PyLong_CheckExact(limit)) {
    if (PyErr_Occurred()) {
      return false;
    }
    PyObject* done = PyObject_CallOneArg(c.note, results);
    Py_XDECREF(done);
    return done != nullptr;
  }
  Py_ssize_t index = -1;
  PyObject* last = PyList_CheckExact(inputs) ? newest_note(queue, &index) : nullptr;
  if (PyErr_Occurred()) {
    return false;
  }
  if (last != nullptr) {
    bool read = false;
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(inputs) && !read; ++k) {
      read = PyList_GET_ITEM(inputs, k) == last;
    }
    if (read) {  // the newest note becomes this launch's (the queue's length unchanged)
      return PySequence_SetItem(queue, index, first) == 0;
    }
  }
  PyObject* appended = PyObject_CallMethodOneArg(queue, c.s_append, first);
  if (appended == nullptr) {
    return false;
  }
  Py_DECREF(appended);
  const Py_ssize_t size = PyObject_Size(queue);
  const long long most = PyLong_AsLongLong(limit);
  if (size < 0 || (most == -1 && PyErr_Occurred())) {
    return false;
  }
  if (size > most) {
    PyObject* overflow = PyDict_GetItemWithError(c.pending, c.s_overflow);
    PyObject* pruned = overflow == nullptr ? nullptr : PyObject_CallNoArgs(overflow);
    Py_XDECREF(pruned);
    return pruned != nullptr;
  }
  return true;
}

// out_checks.check_overlap's common case: the written tensor (an in-place
// op's first argument, an out= call's out) has no element twice, and no
// argument but itself shares its storage.  False sends the call to the
// Kernel, whose check raises or passes.
bool overlap_free(PyObject* written, PyObject* const* argv, Py_ssize_t nargs) {
  if (written == nullptr || !THPVariable_Check(written)) {
    return false;
  }
  const at::Tensor& dst = THPVariable_Unpack(written);
  // (TooHard -- a strided view -- passes, as TensorIterator's check lets it)
  if (!dst.has_storage() || at::has_internal_overlap(dst) == at::MemOverlap::Yes) {
    return false;
  }
  for (Py_ssize_t k = 0; k < nargs; ++k) {
    if (argv[k] != written && THPVariable_Check(argv[k])) {
      const at::Tensor& x = THPVariable_Unpack(argv[k]);
      if (x.has_storage() && x.storage().is_alias_of(dst.storage())) {
        return false;
      }
    }
  }
  return true;
}

// access.can_donate(inputs, positions, written) for a foreach update's
// written list (``written[k]``'s buffer at ``positions[k]``), its rule in one
// C++ pass: each buffer a jax array, not deleted, its tensor's storage's,
// passed once and held by no one but that storage and the launch queue
// (pending.holds), which is rare: the queue holds one result per launch.
// 1 (and access.donations counted) or 0; -1 with an error.
int list_donatable(const Context& c, PyObject* inputs, PyObject* positions, PyObject* written) {
  PyObject* access = PyFunction_Check(c.can_donate) ? PyFunction_GetGlobals(c.can_donate) : nullptr;
  if (access == nullptr || !PyList_CheckExact(written) || !PyTuple_CheckExact(positions) ||
      PyTuple_GET_SIZE(positions) != PyList_GET_SIZE(written)) {
    return 0;
  }
  static PyObject* array_type = nullptr;  // jax's concrete array type (access._array_type), asked once
  if (array_type == nullptr) {
    PyObject* ask = PyDict_GetItemString(access, "_array_type");
    array_type = ask == nullptr ? nullptr : PyObject_CallNoArgs(ask);
    if (array_type == nullptr) {
      return PyErr_Occurred() ? -1 : 0;
    }
  }
  PyObject* const* items = PySequence_Fast_ITEMS(inputs);
  const Py_ssize_t n_inputs = PyList_GET_SIZE(inputs);
  for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(positions); ++k) {
    const Py_ssize_t p = PyLong_AsSsize_t(PyTuple_GET_ITEM(positions, k));
    if (p < 0 || p >= n_inputs) {
      return PyErr_Occurred() ? -1 : 0;
    }
    PyObject* buf = items[p];
    PyObject* owner = PyList_GET_ITEM(written, k);
    if (reinterpret_cast<PyObject*>(Py_TYPE(buf)) != array_type || !THPVariable_Check(owner)) {
      return 0;
    }
    PyObject* storage = THPStorage_Wrap(THPVariable_Unpack(owner).storage());
    PyObject* held = storage == nullptr ? nullptr : optional_attr(storage, c.s_tpu_buf);
    Py_XDECREF(storage);
    const bool own = held == buf;
    // references: the storage's, ``inputs``', ``held``
    const Py_ssize_t extra = Py_REFCNT(buf) - 3;
    Py_XDECREF(held);
    if (PyErr_Occurred()) {
      return -1;
    }
    if (!own) {
      return 0;
    }
    PyObject* deleted = PyObject_CallMethodNoArgs(buf, c.s_is_deleted);
    const int gone = deleted == nullptr ? -1 : PyObject_IsTrue(deleted);
    Py_XDECREF(deleted);
    if (gone != 0) {
      return gone < 0 ? -1 : 0;
    }
    if (extra > 0) {  // passed again, or the launch queue's (the newest launch's result)
      Py_ssize_t uses = 0;
      for (Py_ssize_t i = 0; i < n_inputs; ++i) {
        uses += items[i] == buf;
      }
      if (uses != 1 || c.pending == nullptr) {
        return 0;
      }
      // pending.holds' common case first: the one other reference is the
      // launch queue's newest note (this buffer was the last launch's result)
      PyObject* queue = PyDict_GetItemWithError(c.pending, c.s_pending);
      Py_ssize_t index = -1;
      PyObject* last = extra == 1 && queue != nullptr ? newest_note(queue, &index) : nullptr;
      if (PyErr_Occurred()) {
        return -1;
      }
      if (last == buf) {
        continue;
      }
      PyObject* holds = PyDict_GetItemWithError(c.pending, c.s_holds);
      if (holds == nullptr) {
        return PyErr_Occurred() ? -1 : 0;
      }
      PyObject* count = PyLong_FromSsize_t(extra);
      PyObject* answer = count == nullptr ? nullptr : PyObject_CallFunctionObjArgs(holds, buf, count, nullptr);
      Py_XDECREF(count);
      const int yes = answer == nullptr ? -1 : PyObject_IsTrue(answer);
      Py_XDECREF(answer);
      if (yes != 1) {
        return yes;
      }
    }
  }
  PyObject* donations = PyDict_GetItemWithError(access, c.s_donations);
  PyObject* one = PyLong_FromLong(1);
  PyObject* more = donations == nullptr || one == nullptr ? nullptr : PyNumber_Add(donations, one);
  const int set = more == nullptr ? -1 : PyDict_SetItem(access, c.s_donations, more);
  Py_XDECREF(one);
  Py_XDECREF(more);
  return set < 0 ? -1 : 1;
}

// The executable of a strict write into part of a large buffer or of a
// foreach update (an entry with a donor): the donating one when
// access.can_donate(inputs, positions, owners) allows it (owners: the written
// list, or (written,)), else the copying one (a new reference), as
// Kernel.__call__ chooses; nullptr with an error on an error.
PyObject* donating(const Context& c, PyObject* donor, PyObject* fn, PyObject* inputs, PyObject* written,
                   bool writes_list) {
  if (!PyTuple_CheckExact(donor) || PyTuple_GET_SIZE(donor) != 2 || c.can_donate == nullptr) {
    PyErr_SetString(PyExc_RuntimeError, "tpu: an entry's donor is not (fn, positions)");
    return nullptr;
  }
  if (writes_list) {
    const int may = list_donatable(c, inputs, PyTuple_GET_ITEM(donor, 1), written);
    if (may < 0) {
      return nullptr;
    }
    return Py_NewRef(may == 1 ? PyTuple_GET_ITEM(donor, 0) : fn);
  }
  PyObject* owners = PyTuple_Pack(1, written);
  if (owners == nullptr) {
    return nullptr;
  }
  PyObject* call_args[3] = {inputs, PyTuple_GET_ITEM(donor, 1), owners};
  PyObject* may = PyObject_Vectorcall(c.can_donate, call_args, 3, nullptr);
  Py_DECREF(owners);
  if (may == nullptr) {
    return nullptr;
  }
  PyObject* chosen = may == Py_True ? PyTuple_GET_ITEM(donor, 0) : fn;
  Py_DECREF(may);
  Py_INCREF(chosen);
  return chosen;
}

// The call's result, or nullptr with no error set when the Kernel must take
// the call, or nullptr with an error.
PyObject* cached_call(const Context& c, const Entry& e, PyObject* const* argv, Py_ssize_t nargs, PyObject* names) {
  PyObject* mode = borrowed(c.modes, c.s_mode);
  const bool fused = mode == c.fused;
  if (mode == nullptr || (!fused && mode != c.strict) || nargs > e.plain_arity || (fused && e.draw != nullptr)) {
    return nullptr;
  }
  // an out= call: its out tensor its one keyword (the last leaf)
  if (e.writes_out && (names == nullptr || PyTuple_GET_SIZE(names) != 1)) {
    return nullptr;
  }
  PyObject* written = e.writes_out ? argv[nargs] : nargs > 0 ? argv[0] : nullptr;  // (borrowed)
  if (e.checks_overlap && !overlap_free(written, argv, nargs)) {
    return nullptr;
  }
  if (!fused) {
    PyObject* profiling = PyObject_GetAttr(c.profiler, c.s_profiling);
    if (profiling == nullptr) {
      return nullptr;
    }
    const int on = PyObject_IsTrue(profiling);
    Py_DECREF(profiling);
    if (on != 0) {
      return nullptr;  // (a profiler range: launch's)
    }
  }
  // the leaves matched: the positional arguments, then the keywords' values (Kernel.__call__'s)
  const Py_ssize_t nleaves = nargs + (names == nullptr ? 0 : PyTuple_GET_SIZE(names));
  PyObject* args = PyTuple_New(nleaves);
  if (args == nullptr) {
    return nullptr;
  }
  for (Py_ssize_t k = 0; k < nleaves; ++k) {
    Py_INCREF(argv[k]);
    PyTuple_SET_ITEM(args, k, argv[k]);
  }
  PyObject* entry = nullptr;
  PyObject* inputs = nullptr;
  bool python = false;
  if (fused) {
    PyObject* guess = borrowed(c.fusion, c.s_guess);
    PyObject* by_fn = guess != nullptr && guess != Py_None ? PyObject_GetAttr(e.cache, c.s_by_fn) : nullptr;
    PyObject* hit = by_fn != nullptr && PyTuple_CheckExact(guess) && PyTuple_GET_SIZE(guess) > 0
                        ? borrowed(by_fn, PyTuple_GET_ITEM(guess, 0)) : nullptr;
    if (hit != nullptr) {
      Py_INCREF(hit);
      entry = matched(c, hit, args, names, true, &inputs, &python);
      Py_DECREF(hit);
    }
    Py_XDECREF(by_fn);
  } else {
    PyObject* recent = PyObject_GetAttr(e.cache, c.s_recent);
    if (recent != nullptr && PyList_CheckExact(recent)) {
      for (Py_ssize_t k = 0; k < PyList_GET_SIZE(recent) && entry == nullptr && !python && !PyErr_Occurred(); ++k) {
        PyObject* hit = PyList_GET_ITEM(recent, k);
        Py_INCREF(hit);  // (held while its matchers' Python runs)
        entry = matched(c, hit, args, names, false, &inputs, &python);
        Py_DECREF(hit);
      }
      if (entry == nullptr && !python && !PyErr_Occurred() && nargs > 0) {
        entry = shape_matched(c, e, recent, args, names, &inputs, &python);
      }
    }
    Py_XDECREF(recent);
  }
  if (entry == nullptr || PyErr_Occurred()) {
    Py_XDECREF(entry);
    Py_DECREF(args);
    Py_XDECREF(inputs);
    return nullptr;
  }
  PyObject* result = nullptr;
  PyObject* offsets = PyObject_GetAttr(entry, c.s_offsets);
  PyObject* fn = offsets == nullptr ? nullptr : PyObject_GetAttr(entry, c.s_fn);
  PyObject* out_buffers = fn == nullptr ? nullptr : PyObject_GetAttr(entry, c.s_out_buffers);
  PyObject* results = nullptr;
  bool plain = out_buffers != nullptr && PyTuple_CheckExact(offsets) && PyList_CheckExact(inputs);
  PyObject* donor = plain ? PyObject_GetAttr(entry, c.s_donor) : nullptr;
  plain = donor != nullptr && (donor == Py_None || ((e.inplace || e.writes_out) && written != nullptr));
  if (plain && PyTuple_GET_SIZE(offsets) > 0) {  // views read at run-time offsets: theirs passed last
    plain = PyList_SetSlice(inputs, PyList_GET_SIZE(inputs), PyList_GET_SIZE(inputs), offsets) == 0;
  }
  PyErr_Clear();  // (an error here: the Kernel's path)
  if (plain && e.draw != nullptr) {  // a random kernel: its words last (drawn once per call, as the Kernel does)
    PyObject* words = PyObject_CallFunctionObjArgs(e.draw, entry, args, nullptr);
    plain = words != nullptr && PyList_Append(inputs, words) == 0;  // (else the draw's error, raised below)
    Py_XDECREF(words);
  }
  if (plain && donor != Py_None && !fused) {  // a write into part of a large buffer, a foreach update
    PyObject* chosen = donating(c, donor, fn, inputs, written, e.writes_list);
    plain = chosen != nullptr;  // (else can_donate's error, raised as on the Kernel's path)
    if (plain) {
      Py_SETREF(fn, chosen);
    }
  }
  Py_XDECREF(donor);
  if (plain && fused && out_buffers != Py_None) {
    PyObject* record = borrowed(c.fusion, c.s_record);  // (looked up: a test may wrap it)
    PyObject* record_args[3] = {fn, inputs, out_buffers};
    results = record == nullptr ? nullptr : PyObject_Vectorcall(record, record_args, 3, nullptr);
  } else if (plain && !fused) {
    results = PyObject_Vectorcall(fn, PySequence_Fast_ITEMS(inputs), PyList_GET_SIZE(inputs), nullptr);
    if (results == nullptr) {
      PyErr_Clear();  // the Kernel runs it again and names the failure
    } else {
      if (!noted(c, results, inputs)) {
        Py_CLEAR(results);
      }
    }
  }
  if (results != nullptr && (e.inplace || e.writes_out)) {
    result = written_back(c, e, entry, results, args, written, names);
    Py_DECREF(results);
  } else if (results != nullptr) {
    PyObject* metas = PyObject_GetAttr(entry, c.s_out_tensors);
    PyObject* single = metas == nullptr ? nullptr : PyObject_GetAttr(entry, c.s_single);
    if (single != nullptr && metas != Py_None && single == Py_True && e.returns_one && PyList_CheckExact(metas) &&
        PyList_GET_SIZE(metas) > 0 && PyTuple_CheckExact(PyList_GET_ITEM(metas, 0)) &&
        PyTuple_GET_SIZE(PyList_GET_ITEM(metas, 0)) == 4 && PySequence_Check(results) &&
        PySequence_Size(results) > 0) {
      PyObject* first = PySequence_GetItem(results, 0);
      PyObject* meta = PyList_GET_ITEM(metas, 0);
      if (first != nullptr) {
        PyObject* make_args[5] = {first, PyTuple_GET_ITEM(meta, 0), PyTuple_GET_ITEM(meta, 1),
                                  PyTuple_GET_ITEM(meta, 2), PyTuple_GET_ITEM(meta, 3)};
        result = PyObject_Vectorcall(c.own_new, make_args, 5, nullptr);
        Py_DECREF(first);
      }
    } else if (single != nullptr) {
      PyObject* kwargs = PyDict_New();
      PyObject* finish = kwargs == nullptr ? nullptr : PyObject_GetAttr(e.kernel, c.s_finish);
      if (finish != nullptr) {
        PyObject* finish_args[4] = {entry, results, args, kwargs};
        result = PyObject_Vectorcall(finish, finish_args, 4, nullptr);
        Py_DECREF(finish);
      }
      Py_XDECREF(kwargs);
    }
    Py_XDECREF(metas);
    Py_XDECREF(single);
    if (result == nullptr && !PyErr_Occurred()) {
      PyErr_SetString(PyExc_RuntimeError, "tpu: an op's output could not be made");
    }
    Py_DECREF(results);
  }
  Py_XDECREF(offsets);
  Py_XDECREF(fn);
  Py_XDECREF(out_buffers);
  Py_DECREF(entry);
  Py_DECREF(inputs);
  Py_DECREF(args);
  return result;
}

PyObject* entry_call(PyObject* self, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  const auto* e = static_cast<const Entry*>(PyCapsule_GetPointer(self, kCapsule));
  if (e == nullptr) {
    return nullptr;
  }
  const Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  // (PyTorch passes an empty dict of keywords: no names)
  PyObject* names = kwnames == nullptr || PyTuple_GET_SIZE(kwnames) == 0 ? nullptr : kwnames;
  if ((names == nullptr || e->keywords) && context != nullptr) {
    PyObject* result = cached_call(*context, *e, args, nargs, names);
    if (result != nullptr || PyErr_Occurred()) {
      return result;
    }
  }
  return PyObject_Vectorcall(e->kernel, args, nargs, kwnames);
}

PyMethodDef entry_def = {"kernel_entry", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(entry_call)),
                         METH_FASTCALL | METH_KEYWORDS,
                         "A registered kernel's cached path in C++ (native/entry.cpp); else the Kernel."};

PyObject* intern(const char* s) {
  return PyUnicode_InternFromString(s);
}

}  // namespace

// entry_context(modes_globals, fused, strict, fusion_globals, precision_globals,
//               profiler_module, note, own_new,
//               (lazy_type, resolve, on_device, floats, ints), identity_groups, can_donate): once
PyObject* entry_context(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 11 || !PyDict_Check(args[0]) || !PyDict_Check(args[3]) || !PyDict_Check(args[4]) ||
      !PyTuple_Check(args[8]) || PyTuple_GET_SIZE(args[8]) != 5 || !PyDict_Check(PyTuple_GET_ITEM(args[8], 3)) ||
      !PyDict_Check(PyTuple_GET_ITEM(args[8], 4)) || !PyDict_Check(args[9]) || !PyCallable_Check(args[10])) {
    PyErr_SetString(PyExc_TypeError, "entry_context(modes, fused, strict, fusion, precision, profiler, "
                                     "note, own_new, (lazy_type, resolve, on_device, floats, "
                                     "ints), identity_groups, can_donate)");
    return nullptr;
  }
  if (context != nullptr) {
    Py_RETURN_NONE;  // (set up once per process)
  }
  auto* c = new Context();
  PyObject** slots[] = {&c->modes, &c->fused, &c->strict, &c->fusion, &c->precision,
                        &c->profiler, &c->note, &c->own_new};
  for (int k = 0; k < 8; ++k) {
    Py_INCREF(args[k]);
    *slots[k] = args[k];
  }
  if (PyFunction_Check(c->note)) {  // (its module's queue, appended to here: noted)
    PyObject* globals = PyFunction_GetGlobals(c->note);
    const char* needed[] = {"_pending", "_LIMIT", "_overflow"};
    bool has_all = true;
    for (const char* name : needed) {
      has_all = has_all && PyDict_GetItemString(globals, name) != nullptr;
    }
    if (has_all) {  // (else every launch is noted by note itself)
      Py_INCREF(globals);
      c->pending = globals;
    }
  }
  PyObject** refs[] = {&c->refs.lazy_type, &c->refs.resolve, &c->refs.on_device, &c->refs.floats, &c->refs.ints};
  for (int k = 0; k < 5; ++k) {
    *refs[k] = PyTuple_GET_ITEM(args[8], k);
    Py_INCREF(*refs[k]);  // (held for the process, as the context)
  }
  Py_INCREF(args[9]);
  c->identity = args[9];
  Py_INCREF(args[10]);
  c->can_donate = args[10];
  c->s_mode = intern("_mode");
  c->s_guess = intern("_guess");
  c->s_record = intern("record");
  c->s_current = intern("current");
  c->s_profiling = intern("_is_profiler_enabled");
  c->s_recent = intern("recent");
  c->s_by_fn = intern("by_fn");
  c->s_by_shape = intern("by_shape");
  c->s_shape = intern("shape");
  c->s_offsets = intern("offsets");
  c->s_donor = intern("donor");
  c->s_fn = intern("fn");
  c->s_out_buffers = intern("out_buffers");
  c->s_out_tensors = intern("out_tensors");
  c->s_single = intern("single");
  c->s_check = intern("check");
  c->s_checks = intern("checks");
  c->s_finish = intern("_finish");
  c->s_tpu_buf = intern("_tpu_buf");
  c->s_pending = intern("_pending");
  c->s_limit = intern("_LIMIT");
  c->s_overflow = intern("_overflow");
  c->s_append = intern("append");
  c->s_free = intern("free");
  c->s_by_offsets = intern("by_offsets");
  c->s_is_deleted = intern("is_deleted");
  c->s_holds = intern("holds");
  c->s_donations = intern("donations");
  context = c;
  Py_RETURN_NONE;
}

// kernel_entry(kernel, cache, plain_arity, returns_one, inplace, writes_list, checks_overlap, keywords,
// draw, writes_out) -> the callable to register for the kernel
PyObject* kernel_entry(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 10) {
    PyErr_SetString(PyExc_TypeError, "kernel_entry(kernel, cache, plain_arity, returns_one, inplace, writes_list, "
                                     "checks_overlap, keywords, draw, writes_out)");
    return nullptr;
  }
  const Py_ssize_t arity = PyLong_AsSsize_t(args[2]);
  if (arity == -1 && PyErr_Occurred()) {
    return nullptr;
  }
  auto* e = new Entry();
  Py_INCREF(args[0]);
  e->kernel = args[0];
  Py_INCREF(args[1]);
  e->cache = args[1];
  e->plain_arity = arity;
  e->returns_one = PyObject_IsTrue(args[3]) == 1;
  e->inplace = PyObject_IsTrue(args[4]) == 1;
  e->writes_list = PyObject_IsTrue(args[5]) == 1;
  e->checks_overlap = PyObject_IsTrue(args[6]) == 1;
  e->keywords = PyObject_IsTrue(args[7]) == 1;
  e->writes_out = PyObject_IsTrue(args[9]) == 1;
  if (args[8] != Py_None) {
    Py_INCREF(args[8]);
    e->draw = args[8];
  }
  PyObject* capsule = PyCapsule_New(e, kCapsule, drop_entry);
  if (capsule == nullptr) {
    Py_DECREF(e->kernel);
    Py_DECREF(e->cache);
    Py_XDECREF(e->draw);
    delete e;
    return nullptr;
  }
  PyObject* fn = PyCFunction_New(&entry_def, capsule);
  Py_DECREF(capsule);
  return fn;
}

}  // namespace torch_tpu_native
