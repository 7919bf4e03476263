// dice.codec: encode / decode / rejected_count for Python (the codec's
// bindings; the conversions are convert.cpp's).

#include "dice/core/errc.hpp"
#include "dice/security/trust.hpp"

#include "bindings.hpp"

#include <cstring>

namespace dice::python {

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
    .def("__len__",
         [](const encoded& e) {
           return e.bytes.size();
         })
    .def_property_readonly(
      "address",
      [](const encoded& e) {
        return reinterpret_cast<std::uintptr_t>(e.bytes.data());
      },
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
    [] {
      return counter(trust_event::payload_rejected);
    },
    "Payloads and encodings this process refused so far.");
}

} // namespace dice::python
