// A torch.nn.Module as a dice model port: its state_dict travels as the
// same flat snapshot a C++ learner sends (names, dtypes, shapes, one
// buffer), so Python and C++ nodes load each other's models. Tensors are
// reached through numpy views (torch's Tensor.numpy / from_numpy share
// memory): one copy into the snapshot, one copy out of it, and no LibTorch
// headers in this module.

#include "dice/core/errc.hpp"

#include "bindings.hpp"
#include <pybind11/numpy.h>

#include <cstring>
#include <map>
#include <vector>

namespace dice::python {

namespace {

struct torch_dtype {
  const char* name; // str(torch.float32) == "torch.float32"
  dtype type;
};

constexpr torch_dtype torch_dtypes[] = {
  {"torch.float32", dtype::float32}, {"torch.float64", dtype::float64},
  {"torch.float16", dtype::float16}, {"torch.bfloat16", dtype::bfloat16},
  {"torch.int64", dtype::int64},     {"torch.int32", dtype::int32},
  {"torch.int16", dtype::int16},     {"torch.int8", dtype::int8},
  {"torch.uint8", dtype::uint8},     {"torch.bool", dtype::boolean},
};

std::optional<dtype> dtype_of(const py::handle& t) {
  auto name = std::string(py::str(t.attr("dtype")));
  for (auto& d : torch_dtypes)
    if (name == d.name)
      return d.type;
  return std::nullopt;
}

std::string shape_str(const std::vector<std::int64_t>& xs) {
  std::string s = "[";
  for (std::size_t i = 0; i < xs.size(); ++i)
    s += (i > 0 ? ", " : "") + std::to_string(xs[i]);
  return s + "]";
}

// A plain CPU tensor of `t`'s bytes, viewed as numpy (bfloat16 as int16).
py::array numpy_view(py::object t, const py::module_& torch) {
  t = t.attr("detach")();
  if (std::string(py::str(t.attr("device").attr("type"))) != "cpu")
    t = t.attr("cpu")();
  t = t.attr("contiguous")();
  if (t.attr("dtype").is(torch.attr("bfloat16")))
    t = t.attr("view")(torch.attr("int16"));
  return t.attr("numpy")();
}

class python_model_port : public model_port {
 public:
  explicit python_model_port(py::object module)
    : module_(std::make_shared<gil_object>(std::move(module))) {}

  caf::expected<model_snapshot> snapshot() override {
    py::gil_scoped_acquire gil;
    try {
      auto torch = py::module_::import("torch");
      auto sd = module_->get().attr("state_dict")();
      std::vector<std::string> names;
      std::vector<dtype> types;
      std::vector<py::array> views;
      std::size_t total = 0;
      for (auto item : py::reinterpret_borrow<py::dict>(sd)) {
        auto name = item.first.cast<std::string>();
        auto type = dtype_of(item.second);
        if (!type)
          return make_error(
            errc::model_mismatch,
            "tensor '" + name
              + "' has a dtype dice cannot "
                "send: "
              + std::string(py::str(item.second.attr("dtype"))));
        views.push_back(
          numpy_view(py::reinterpret_borrow<py::object>(item.second), torch));
        total += snapshot_builder::padded(views.back().nbytes());
        names.push_back(std::move(name));
        types.push_back(*type);
      }
      // The views hold the tensors; the copy runs without the GIL.
      py::gil_scoped_release nogil;
      snapshot_builder builder{total};
      for (std::size_t i = 0; i < views.size(); ++i) {
        std::vector<std::int64_t> shape;
        for (py::ssize_t d = 0; d < views[i].ndim(); ++d)
          shape.push_back(static_cast<std::int64_t>(views[i].shape(d)));
        builder.add(names[i], types[i], std::move(shape), views[i].data(),
                    static_cast<std::size_t>(views[i].nbytes()));
      }
      // (nogil ends before `views`: they die with the GIL held.)
      return builder.build(0, 0, 0, 0);
    } catch (py::error_already_set& e) {
      return make_error(errc::user_exception,
                        std::string{"state_dict snapshot failed: "} + e.what());
    }
  }

  caf::error load(const model_snapshot& x) override {
    if (auto err = validate(x))
      return err;
    py::gil_scoped_acquire gil;
    try {
      auto torch = py::module_::import("torch");
      auto sd = py::reinterpret_borrow<py::dict>(
        module_->get().attr("state_dict")());
      auto mismatch = [](std::string what) {
        return make_error(errc::model_mismatch, std::move(what));
      };
      // Everything is checked before anything is written: a snapshot that
      // does not fit leaves the model as it was.
      if (x.index.size() != py::len(sd))
        return mismatch("snapshot has " + std::to_string(x.index.size())
                        + " tensors, the model " + std::to_string(py::len(sd)));
      for (auto& e : x.index) {
        if (!sd.contains(e.name))
          return mismatch("snapshot has tensor '" + e.name
                          + "' the model does not have");
        auto t = sd[py::str(e.name)];
        auto type = dtype_of(t);
        if (!type || *type != e.type)
          return mismatch("tensor '" + e.name + "' is " + to_string(e.type)
                          + " in the snapshot, "
                          + std::string(py::str(t.attr("dtype")))
                          + " in the model");
        auto shape = t.attr("shape").cast<std::vector<std::int64_t>>();
        if (shape != e.shape)
          return mismatch("tensor '" + e.name + "' has shape "
                          + shape_str(e.shape) + " in the snapshot, "
                          + shape_str(shape) + " in the model");
      }
      // state_dict() holds detached tensors that share the parameters'
      // memory: writing them writes the model, outside autograd. A plain
      // CPU tensor takes its bytes with one memcpy without the GIL, as the
      // C++ port does (torch's copy_ went through TensorIterator at about
      // half memcpy's speed, and on every receiver of every round); any
      // other tensor takes copy_ from a numpy view of the snapshot.
      struct raw_copy {
        std::uint8_t* dst;
        const std::uint8_t* src;
        std::size_t n;
      };
      std::vector<raw_copy> raw;
      auto keep = std::make_shared<model_snapshot>(x);
      for (auto& e : x.index) {
        auto t = sd[py::str(e.name)];
        auto nbytes = t.attr("numel")().cast<std::size_t>()
          * t.attr("element_size")().cast<std::size_t>();
        if (std::string(py::str(t.attr("device").attr("type"))) == "cpu"
            && t.attr("is_contiguous")().cast<bool>() && nbytes == e.nbytes) {
          auto at = t.attr("data_ptr")().cast<std::uintptr_t>();
          raw.push_back(raw_copy{reinterpret_cast<std::uint8_t*>(at),
                                 x.data.data() + e.offset, e.nbytes});
          // As copy_ would, the write bumps the tensor's version (an
          // in-place op on an empty view of it: no byte touched), so a
          // backward that saved it before the load refuses instead of
          // using the new values. Before the copy: if it raises, nothing
          // was written.
          t.attr("view")(-1)[py::slice(0, 0, 1)].attr("zero_")();
          continue;
        }
        std::vector<py::ssize_t> shape(e.shape.begin(), e.shape.end());
        // A numpy view of the snapshot's bytes (no copy), then one copy_.
        auto owner = new std::shared_ptr<const void>(keep);
        py::capsule base(owner, [](void* p) {
          delete static_cast<std::shared_ptr<const void>*>(p);
        });
        py::dtype dt{e.type == dtype::bfloat16 ? "int16" : to_string(e.type)};
        py::object src = py::array(dt, shape, {}, x.data.data() + e.offset,
                                   base);
        src = torch.attr("from_numpy")(src);
        if (e.type == dtype::bfloat16)
          src = src.attr("view")(torch.attr("bfloat16"));
        t.attr("copy_")(src);
      }
      {
        // `sd` holds the tensors until the GIL is back.
        py::gil_scoped_release nogil;
        for (auto& c : raw)
          if (c.n > 0)
            std::memcpy(c.dst, c.src, c.n);
      }
      return caf::none;
    } catch (py::error_already_set& e) {
      return make_error(errc::user_exception,
                        std::string{"state_dict load failed: "} + e.what());
    }
  }

 private:
  std::shared_ptr<gil_object> module_;
};

} // namespace

model_port_ptr python_model(py::object module) {
  if (!py::hasattr(module, "state_dict"))
    throw py::type_error("the model must be a torch.nn.Module (it has no "
                         "state_dict)");
  return std::make_shared<python_model_port>(std::move(module));
}

} // namespace dice::python
