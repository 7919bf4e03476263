// Python objects <-> dice::value. Arrays are never copied on the way in
// (the value points at the numpy array's or tensor's memory while it is
// encoded) nor on the way out (numpy arrays and tensors view the received
// bytes). Tensors go through numpy views, so this module needs no LibTorch
// headers: torch's own Python functions (numpy(), from_numpy) share memory.

#include "bindings.hpp"

#include "dice/core/errc.hpp"
#include "dice/security/trust.hpp"

#include <pybind11/numpy.h>

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

// torch, if the program imported it (the codec never imports it itself).
py::object torch_module() {
  auto modules = py::module_::import("sys").attr("modules");
  if (modules.contains("torch"))
    return modules["torch"];
  return py::none();
}

value array_value(py::array arr, array_flavor flavor, bool bfloat16,
                  const std::string& path) {
  if (!(arr.flags() & py::array::c_style))
    arr = py::array::ensure(arr, py::array::c_style); // the one copy
  auto name = std::string(py::str(arr.dtype()));
  std::optional<dtype> type;
  if (bfloat16)
    type = dtype::bfloat16;
  else
    for (auto& n : numpy_names)
      if (name == n.numpy && n.type != dtype::bfloat16)
        type = n.type;
  if (!type)
    type_error("dice cannot send an array of dtype " + name + " at " + path
               + " (supported: float16/32/64, bfloat16 tensors, int8/16/32/64,"
                 " uint8, bool)");
  value_array a;
  a.type = *type;
  for (py::ssize_t i = 0; i < arr.ndim(); ++i)
    a.shape.push_back(static_cast<std::int64_t>(arr.shape(i)));
  a.data = static_cast<const std::uint8_t*>(arr.data());
  a.nbytes = static_cast<std::size_t>(arr.nbytes());
  a.flavor = flavor;
  a.owner = std::make_shared<gil_object>(arr);
  return value::of(std::move(a));
}

value convert(const py::handle& x, const std::string& path, std::size_t depth) {
  if (depth > max_depth)
    type_error("dice cannot send objects nested deeper than "
               + std::to_string(max_depth) + " levels (at " + path + ")");
  if (x.is_none())
    return value::none();
  if (PyBool_Check(x.ptr()))
    return value::of(x.ptr() == Py_True);
  if (PyLong_Check(x.ptr())) {
    int overflow = 0;
    auto v = PyLong_AsLongLongAndOverflow(x.ptr(), &overflow);
    if (overflow != 0)
      type_error("dice cannot send an int beyond 64 bits at " + path);
    return value::of(static_cast<std::int64_t>(v));
  }
  if (PyFloat_Check(x.ptr()))
    return value::of(PyFloat_AS_DOUBLE(x.ptr()));
  if (PyUnicode_Check(x.ptr())) {
    Py_ssize_t n = 0;
    auto s = PyUnicode_AsUTF8AndSize(x.ptr(), &n);
    if (s == nullptr)
      throw py::error_already_set();
    return value::of(std::string{s, static_cast<std::size_t>(n)});
  }
  if (PyBytes_Check(x.ptr()))
    return value::of_bytes(std::string{PyBytes_AS_STRING(x.ptr()),
                                       static_cast<std::size_t>(
                                         PyBytes_GET_SIZE(x.ptr()))});
  if (PyByteArray_Check(x.ptr()))
    return value::of_bytes(std::string{PyByteArray_AS_STRING(x.ptr()),
                                       static_cast<std::size_t>(
                                         PyByteArray_GET_SIZE(x.ptr()))});
  if (PyList_CheckExact(x.ptr()) || PyTuple_CheckExact(x.ptr())) {
    auto seq = py::reinterpret_borrow<py::sequence>(x);
    std::vector<value> items;
    items.reserve(seq.size());
    for (std::size_t i = 0; i < seq.size(); ++i)
      items.push_back(
        convert(seq[i], path + "[" + std::to_string(i) + "]", depth + 1));
    return PyTuple_Check(x.ptr()) ? value::tuple(std::move(items))
                                  : value::list(std::move(items));
  }
  if (PyDict_CheckExact(x.ptr())) {
    std::vector<std::string> keys;
    std::vector<value> items;
    for (auto kv : py::reinterpret_borrow<py::dict>(x)) {
      if (!PyUnicode_Check(kv.first.ptr()))
        type_error("dice cannot send a dict key of type "
                   + type_name(kv.first) + " at " + path
                   + " (dict keys must be str)");
      auto key = kv.first.cast<std::string>();
      items.push_back(convert(kv.second, path + "['" + key + "']", depth + 1));
      keys.push_back(std::move(key));
    }
    return value::dict(std::move(keys), std::move(items));
  }
  if (py::isinstance<py::array>(x))
    return array_value(py::reinterpret_borrow<py::array>(x),
                       array_flavor::numpy, false, path);
  auto np = py::module_::import("numpy");
  if (py::isinstance(x, np.attr("generic")))
    return array_value(np.attr("asarray")(x), array_flavor::numpy_scalar, false,
                       path);
  auto torch = torch_module();
  if (!torch.is_none() && py::isinstance(x, torch.attr("Tensor"))) {
    auto t = py::reinterpret_borrow<py::object>(x).attr("detach")();
    if (std::string(py::str(t.attr("device").attr("type"))) != "cpu")
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
                 + std::string(py::str(t.attr("dtype"))) + " at " + path);
    }
    return array_value(arr, array_flavor::tensor, bf16, path);
  }
  type_error("dice cannot send a " + type_name(x) + " at " + path
             + ": only None, bool, int, float, str, bytes, list, tuple, dict"
               " with str keys, numpy arrays and torch tensors travel"
               " (nothing is pickled)");
}

py::object array_object(const value_array& a) {
  auto name = numpy_name(a.type);
  std::vector<py::ssize_t> shape(a.shape.begin(), a.shape.end());
  py::array arr;
  if (a.nbytes == 0 || a.data == nullptr) {
    arr = py::array(py::dtype(name), shape);
  } else {
    // The array keeps the received buffer alive; no byte is copied.
    auto keep = new std::shared_ptr<const void>(a.owner);
    py::capsule base(keep, [](void* p) {
      delete static_cast<std::shared_ptr<const void>*>(p);
    });
    arr = py::array(py::dtype(name), shape, {}, a.data, base);
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

value to_value(const py::handle& x, const std::string& path) {
  return convert(x, path, 1);
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
  for (std::size_t i = 0; i < seq.size(); ++i)
    items.push_back(to_value(seq[i], root + "[" + std::to_string(i) + "]"));
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

py::list unpack_list(const std::vector<payload>& xs) {
  std::vector<value> items;
  for (auto& x : xs) {
    caf::error err;
    {
      py::gil_scoped_release nogil;
      err = unpack_values_into(x, items);
    }
    if (err)
      throw py::value_error(
        "items from node " + std::to_string(x.origin)
        + " are not dice values (a C++ sender packs them with"
          " dice::pack_values for Python receivers): "
        + caf::to_string(err));
  }
  py::list out(items.size());
  for (std::size_t i = 0; i < items.size(); ++i)
    out[i] = from_value(items[i]);
  return out;
}

namespace {

/// Encoded bytes Python can look at (buffer protocol) and decode in place.
struct encoded {
  shared_bytes bytes;
};

value decode_or_raise(const shared_bytes& bytes) {
  auto x = [&] {
    py::gil_scoped_release nogil;
    return decode_value(bytes);
  }();
  if (!x)
    throw py::value_error(caf::to_string(x.error()));
  return std::move(*x);
}

} // namespace

void bind_codec(py::module_& m) {
  py::class_<encoded>(m, "Encoded", py::buffer_protocol(),
                      "Bytes of dice's value codec (read-only buffer).")
    .def_buffer([](encoded& e) {
      return py::buffer_info(const_cast<std::uint8_t*>(e.bytes.data()), 1,
                             py::format_descriptor<std::uint8_t>::format(), 1,
                             {static_cast<py::ssize_t>(e.bytes.size())}, {1},
                             true);
    })
    .def("__len__", [](const encoded& e) { return e.bytes.size(); })
    .def_property_readonly(
      "address",
      [](const encoded& e) { return reinterpret_cast<std::uintptr_t>(e.bytes.data()); },
      "Address of the first byte (to check that decoding copies nothing).");
  m.def(
    "encode",
    [](const py::handle& x) {
      auto v = to_value(x, "value");
      auto bytes = [&] {
        py::gil_scoped_release nogil;
        return encode_value(v);
      }();
      if (!bytes)
        throw py::value_error(caf::to_string(bytes.error()));
      return encoded{std::move(*bytes)};
    },
    py::arg("obj"),
    "Encodes obj with dice's codec (no pickle); TypeError names the path of "
    "anything it cannot carry.");
  m.def(
    "decode",
    [](const py::object& x) -> py::object {
      if (py::isinstance<encoded>(x))
        return from_value(decode_or_raise(x.cast<encoded&>().bytes));
      auto buf = py::reinterpret_borrow<py::buffer>(x).request();
      auto n = static_cast<std::size_t>(buf.size * buf.itemsize);
      writable_bytes copy{n};
      if (n > 0)
        std::memcpy(copy.data(), buf.ptr, n);
      return from_value(decode_or_raise(shared_bytes{std::move(copy)}));
    },
    py::arg("data"),
    "Decodes bytes made by encode(); arrays view the bytes when given an "
    "Encoded. Malformed bytes raise ValueError and are counted.");
  m.def(
    "rejected_count",
    [] { return counter(trust_event::payload_rejected); },
    "Payloads and encodings this process refused so far.");
}

} // namespace dice::python
