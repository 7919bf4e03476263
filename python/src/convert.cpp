// Python objects <-> dice::value. Arrays are never copied on the way in
// (the value points at the numpy array's or tensor's memory while it is
// encoded) nor on the way out (numpy arrays and tensors view the received
// bytes). Tensors go through numpy views, so this module needs no LibTorch
// headers: torch's own Python functions (numpy(), from_numpy) share memory.

#include "dice/core/errc.hpp"
#include "dice/logging/log.hpp"
#include "dice/logging/sampler.hpp"
#include "dice/security/trust.hpp"

#include "bindings.hpp"
#include <pybind11/numpy.h>

#include <atomic>
#include <cstring>
#include <string_view>

namespace dice::python {

gil_object::~gil_object() {
  if (!obj_)
    return;
  if (!Py_IsInitialized() || _Py_IsFinalizing()) {
    obj_.release(); // the interpreter is gone: nothing left to free
    return;
  }
  py::gil_scoped_acquire gil;
  obj_ = py::object();
}

namespace {

constexpr std::size_t max_depth = 64;

struct dtype_name {
  dtype type;
  const char* numpy;
};

// bfloat16 has no numpy type: tensors of it travel as int16 views.
constexpr dtype_name numpy_names[] = {
  {dtype::float32, "float32"}, {dtype::float64, "float64"},
  {dtype::float16, "float16"}, {dtype::int64, "int64"},
  {dtype::int32, "int32"},     {dtype::int16, "int16"},
  {dtype::int8, "int8"},       {dtype::uint8, "uint8"},
  {dtype::boolean, "bool"},    {dtype::bfloat16, "int16"},
};

const char* numpy_name(dtype x) {
  for (auto& n : numpy_names)
    if (n.type == x)
      return n.numpy;
  return nullptr;
}

[[noreturn]] void type_error(const std::string& what) {
  throw py::type_error(what);
}

std::string type_name(const py::handle& x) {
  return py::str(py::type::handle_of(x).attr("__qualname__"));
}

/// Where a converted object sits, rendered only for an error message (a
/// string per leaf cost more than the conversion itself).
struct path {
  const path* parent = nullptr;
  const std::string* root = nullptr;
  const char* key = nullptr; // dict key, or null for an index
  std::size_t index = 0;

  std::string str() const {
    if (root != nullptr)
      return *root;
    auto prefix = parent->str();
    if (key != nullptr)
      return prefix + "['" + key + "']";
    return prefix + "[" + std::to_string(index) + "]";
  }
};

/// Python objects the converter looks up once per process. Leaked on
/// purpose: they must outlive every conversion, and dropping them at exit
/// would run after the interpreter is gone.
struct lookups {
  py::handle numpy_generic;
  py::handle sys_modules;
  py::handle torch_tensor; // once torch is imported

  static lookups& get() {
    static lookups* x = [] {
      auto l = new lookups;
      l->numpy_generic = py::object(
                           py::module_::import("numpy").attr("generic"))
                           .release();
      l->sys_modules = py::object(py::module_::import("sys").attr("modules"))
                         .release();
      return l;
    }();
    return *x;
  }

  // torch.Tensor if the program imported torch (never imported here).
  py::handle tensor_type() {
    if (!torch_tensor) {
      auto modules = py::reinterpret_borrow<py::dict>(sys_modules);
      if (modules.contains("torch"))
        torch_tensor = py::object(modules["torch"].attr("Tensor")).release();
    }
    return torch_tensor;
  }
};

std::optional<dtype> numpy_dtype(const py::dtype& dt) {
  auto size = dt.itemsize();
  switch (dt.kind()) {
    case 'f':
      return size == 4 ? std::optional{dtype::float32}
        : size == 8    ? std::optional{dtype::float64}
        : size == 2    ? std::optional{dtype::float16}
                       : std::nullopt;
    case 'i':
      return size == 8 ? std::optional{dtype::int64}
        : size == 4    ? std::optional{dtype::int32}
        : size == 2    ? std::optional{dtype::int16}
        : size == 1    ? std::optional{dtype::int8}
                       : std::nullopt;
    case 'u': return size == 1 ? std::optional{dtype::uint8} : std::nullopt;
    case 'b': return dtype::boolean;
    default: return std::nullopt;
  }
}

value array_value(py::array arr, array_flavor flavor, bool bfloat16,
                  const path& at) {
  if (!(arr.flags() & py::array::c_style))
    arr = py::array::ensure(arr, py::array::c_style); // the one copy
  auto type = bfloat16 ? std::optional{dtype::bfloat16}
                       : numpy_dtype(arr.dtype());
  // Byte order: only the machine's own (numpy's '=' or '|').
  if (!type || arr.dtype().attr("byteorder").cast<std::string>() == ">")
    type_error("dice cannot send an array of dtype "
               + std::string(py::str(arr.dtype())) + " at " + at.str()
               + " (supported: float16/32/64, bfloat16 tensors, int8/16/32/64,"
                 " uint8, bool)");
  value_array a;
  a.type = *type;
  a.shape.reserve(static_cast<std::size_t>(arr.ndim()));
  for (py::ssize_t i = 0; i < arr.ndim(); ++i)
    a.shape.push_back(static_cast<std::int64_t>(arr.shape(i)));
  a.data = static_cast<const std::uint8_t*>(arr.data());
  a.nbytes = static_cast<std::size_t>(arr.nbytes());
  a.flavor = flavor;
  a.owner = std::make_shared<gil_object>(std::move(arr));
  return value::of(std::move(a));
}

value tensor_value(const py::handle& x, const path& at) {
  auto torch = py::module_::import("torch");
  auto t = py::reinterpret_borrow<py::object>(x).attr("detach")();
  if (t.attr("device").attr("type").cast<std::string>() != "cpu")
    t = t.attr("cpu")();
  t = t.attr("contiguous")();
  bool bf16 = t.attr("dtype").is(torch.attr("bfloat16"));
  if (bf16)
    t = t.attr("view")(torch.attr("int16"));
  py::object arr;
  try {
    arr = t.attr("numpy")();
  } catch (py::error_already_set&) {
    type_error("dice cannot send a tensor of dtype "
               + std::string(py::str(t.attr("dtype"))) + " at " + at.str());
  }
  return array_value(arr, array_flavor::tensor, bf16, at);
}

value convert(const py::handle& x, const path& at, std::size_t depth) {
  auto p = x.ptr();
  if (depth > max_depth)
    type_error("dice cannot send objects nested deeper than "
               + std::to_string(max_depth) + " levels (at " + at.str() + ")");
  if (p == Py_None)
    return value::none();
  if (PyBool_Check(p))
    return value::of(p == Py_True);
  if (PyLong_Check(p)) {
    int overflow = 0;
    auto v = PyLong_AsLongLongAndOverflow(p, &overflow);
    if (overflow != 0)
      type_error("dice cannot send an int beyond 64 bits at " + at.str());
    return value::of(static_cast<std::int64_t>(v));
  }
  if (PyFloat_Check(p))
    return value::of(PyFloat_AS_DOUBLE(p));
  if (PyUnicode_Check(p)) {
    Py_ssize_t n = 0;
    auto s = PyUnicode_AsUTF8AndSize(p, &n);
    if (s == nullptr)
      throw py::error_already_set();
    return value::of(std::string{s, static_cast<std::size_t>(n)});
  }
  if (PyBytes_Check(p))
    return value::of_bytes(std::string{
      PyBytes_AS_STRING(p), static_cast<std::size_t>(PyBytes_GET_SIZE(p))});
  if (PyByteArray_Check(p))
    return value::of_bytes(
      std::string{PyByteArray_AS_STRING(p),
                  static_cast<std::size_t>(PyByteArray_GET_SIZE(p))});
  if (PyList_CheckExact(p) || PyTuple_CheckExact(p)) {
    bool tuple = PyTuple_CheckExact(p);
    auto n = static_cast<std::size_t>(tuple ? PyTuple_GET_SIZE(p)
                                            : PyList_GET_SIZE(p));
    std::vector<value> items;
    items.reserve(n);
    for (std::size_t i = 0; i < n; ++i) {
      path item{&at, nullptr, nullptr, i};
      auto* y = tuple ? PyTuple_GET_ITEM(p, static_cast<Py_ssize_t>(i))
                      : PyList_GET_ITEM(p, static_cast<Py_ssize_t>(i));
      items.push_back(convert(y, item, depth + 1));
    }
    return tuple ? value::tuple(std::move(items))
                 : value::list(std::move(items));
  }
  if (PyDict_CheckExact(p)) {
    std::vector<std::string> keys;
    std::vector<value> items;
    auto n = static_cast<std::size_t>(PyDict_GET_SIZE(p));
    keys.reserve(n);
    items.reserve(n);
    PyObject* k = nullptr;
    PyObject* v = nullptr;
    Py_ssize_t pos = 0;
    while (PyDict_Next(p, &pos, &k, &v)) {
      if (!PyUnicode_Check(k))
        type_error("dice cannot send a dict key of type "
                   + type_name(py::handle(k)) + " at " + at.str()
                   + " (dict keys must be str)");
      Py_ssize_t len = 0;
      auto s = PyUnicode_AsUTF8AndSize(k, &len);
      if (s == nullptr)
        throw py::error_already_set();
      keys.emplace_back(s, static_cast<std::size_t>(len));
      path item{&at, nullptr, keys.back().c_str(), 0};
      items.push_back(convert(v, item, depth + 1));
    }
    return value::dict(std::move(keys), std::move(items));
  }
  if (py::isinstance<py::array>(x))
    return array_value(py::reinterpret_borrow<py::array>(x),
                       array_flavor::numpy, false, at);
  auto& l = lookups::get();
  if (PyObject_IsInstance(p, l.numpy_generic.ptr()) == 1)
    return array_value(py::array::ensure(x), array_flavor::numpy_scalar, false,
                       at);
  auto tensor = l.tensor_type();
  if (tensor && PyObject_IsInstance(p, tensor.ptr()) == 1)
    return tensor_value(x, at);
  type_error("dice cannot send a " + type_name(x) + " at " + at.str()
             + ": only None, bool, int, float, str, bytes, list, tuple, dict"
               " with str keys, numpy arrays and torch tensors travel"
               " (nothing is pickled)");
}

// numpy's dtype objects, made once (leaked like lookups).
const py::dtype& numpy_dtype_of(dtype x) {
  static auto table = [] {
    auto t = new std::vector<py::dtype>;
    for (int i = 0; i <= static_cast<int>(dtype::boolean); ++i)
      t->push_back(py::dtype(numpy_name(static_cast<dtype>(i))));
    return t;
  }();
  return (*table)[static_cast<std::size_t>(x)];
}

py::object array_object(const value_array& a) {
  auto& dt = numpy_dtype_of(a.type);
  std::vector<py::ssize_t> shape(a.shape.begin(), a.shape.end());
  py::array arr;
  if (a.nbytes == 0 || a.data == nullptr) {
    arr = py::array(dt, shape);
  } else {
    // The array keeps the received buffer alive; no byte is copied.
    auto keep = new std::shared_ptr<const void>(a.owner);
    py::capsule base(keep, [](void* p) {
      delete static_cast<std::shared_ptr<const void>*>(p);
    });
    arr = py::array(dt, shape, {}, a.data, base);
  }
  switch (a.flavor) {
    case array_flavor::numpy_scalar: return arr[py::tuple()];
    case array_flavor::tensor: {
      auto torch = py::module_::import("torch");
      auto t = torch.attr("from_numpy")(arr);
      if (a.type == dtype::bfloat16)
        t = t.attr("view")(torch.attr("bfloat16"));
      return t;
    }
    default: return std::move(arr);
  }
}

} // namespace

value to_value(const py::handle& x, const std::string& where) {
  path root{nullptr, &where, nullptr, 0};
  return convert(x, root, 1);
}

py::object from_value(const value& x) {
  switch (x.kind) {
    case value_kind::none: return py::none();
    case value_kind::boolean: return py::bool_(x.boolean);
    case value_kind::integer: return py::int_(x.integer);
    case value_kind::real: return py::float_(x.real);
    case value_kind::string: return py::str(x.text);
    case value_kind::bytes: return py::bytes(x.text);
    case value_kind::list: {
      py::list out(x.items.size());
      for (std::size_t i = 0; i < x.items.size(); ++i)
        out[i] = from_value(x.items[i]);
      return std::move(out);
    }
    case value_kind::tuple: {
      py::tuple out(x.items.size());
      for (std::size_t i = 0; i < x.items.size(); ++i)
        out[i] = from_value(x.items[i]);
      return std::move(out);
    }
    case value_kind::dict: {
      py::dict out;
      for (std::size_t i = 0; i < x.items.size(); ++i)
        out[py::str(x.keys[i])] = from_value(x.items[i]);
      return std::move(out);
    }
    case value_kind::array: return array_object(x.array);
  }
  return py::none();
}

payload pack_list(const py::handle& list, const std::string& root,
                  std::uint32_t origin, std::int64_t model_version) {
  if (!PyList_Check(list.ptr()) && !PyTuple_Check(list.ptr()))
    type_error(root + " must be a list (or None), not a " + type_name(list));
  auto seq = py::reinterpret_borrow<py::sequence>(list);
  std::vector<value> items;
  items.reserve(seq.size());
  path top{nullptr, &root, nullptr, 0};
  for (std::size_t i = 0; i < seq.size(); ++i) {
    path item{&top, nullptr, nullptr, i};
    items.push_back(convert(seq[i], item, 1));
  }
  // The bytes are copied once, into the payload, without the GIL.
  auto packed = [&] {
    py::gil_scoped_release nogil;
    return pack_values(items, origin, model_version);
  }();
  if (!packed)
    throw py::value_error("cannot pack " + root + ": "
                          + caf::to_string(packed.error()));
  return std::move(*packed);
}

py::list unpack_list(const std::vector<payload>& xs, std::uint32_t receiver,
                     std::size_t* refused, bool event) {
  // A peer's malformed payload is refused, counted and skipped: the node
  // goes on with what its other peers sent (a node survives what a peer
  // sends it). Logged the first time and every 1024th after, per sender,
  // for context and events apart.
  static log::sampler sampled;
  std::vector<value> items;
  for (auto& x : xs) {
    auto err = [&] {
      py::gil_scoped_release nogil;
      return unpack_values_into(x, items);
    }();
    if (!err)
      continue;
    if (refused != nullptr)
      *refused += x.count;
    auto n = sampled.next((event ? "event|" : "context|")
                          + std::to_string(x.origin));
    if (n > 0)
      log::warning(receiver,
                   std::string{"refused "} + (event ? "an event of " : "")
                     + std::to_string(x.count) + " item(s) from node "
                     + std::to_string(x.origin)
                     + " that are not dice values (a C++ sender packs them "
                       "with dice::pack_values for Python receivers): "
                     + render(err) + log::sampled_note(n));
  }
  py::list out(items.size());
  for (std::size_t i = 0; i < items.size(); ++i)
    out[i] = from_value(items[i]);
  return out;
}

} // namespace dice::python
