// DI-engine's distributed middleware for Python: the C++ exchangers and
// loaders themselves, built for the node main() is building.

#include "dice/actors/model_loader.hpp"
#include "dice/actors/storage_loader.hpp"
#include "dice/core/errc.hpp"
#include "dice/exchangers/context_exchanger.hpp"
#include "dice/exchangers/model_exchanger.hpp"
#include "dice/exchangers/periodical_model_exchanger.hpp"
#include "dice/runtime/run.hpp"

#include "bindings.hpp"

#include <chrono>
#include <cmath>

namespace dice::python {

namespace {

/// DI-engine's FileStorageLoader / FileModelLoader: spawned for the node
/// being built when an exchanger takes it.
struct py_loader {
  loader_options opts;
  bool model = false;
};

node_setup& setup_of(const char* what) {
  auto n = current_node();
  if (n == nullptr || n->setup == nullptr)
    throw py::value_error(std::string{what}
                          + " is made inside main() while dice builds a node");
  return *n->setup;
}

caf::timespan seconds(double s) {
  if (!std::isfinite(s) || s > 1e9)
    return caf::timespan::max();
  if (s < 0)
    throw py::value_error("a duration cannot be negative");
  return std::chrono::duration_cast<caf::timespan>(
    std::chrono::duration<double>(s));
}

py_loader& loader_of(const py::object& x, bool model, const char* arg) {
  if (!py::isinstance<py_loader>(x) || x.cast<py_loader&>().model != model)
    throw py::type_error(std::string{arg} + " must be a "
                         + (model ? "FileModelLoader" : "FileStorageLoader"));
  return x.cast<py_loader&>();
}

loader_options options_for(node_setup& n, const py_loader& l) {
  auto opts = l.opts;
  opts.node = n.id();
  return opts;
}

// The node's storage loader for `x` (a FileStorageLoader), or none.
storage_loader_actor storage_loader_for(node_setup& n, const py::object& x) {
  if (x.is_none())
    return {};
  return spawn_storage_loader(
    n.system(), options_for(n, loader_of(x, false, "storage_loader")));
}

// The node's model loader for `x` (a FileModelLoader), or none.
model_loader_actor model_loader_for(node_setup& n, const py::object& x) {
  if (x.is_none())
    return {};
  return spawn_model_loader(n.system(),
                            options_for(n, loader_of(x, true, "model_loader")));
}

py_middleware wrap(middleware m) {
  auto name = m.name;
  return py_middleware{std::make_unique<middleware>(std::move(m)), name};
}

} // namespace

void bind_exchangers(py::module_& m) {
  py::class_<py_middleware>(m, "Middleware",
                            "A dice middleware written in C++.")
    .def_readonly("name", &py_middleware::name)
    .def("__repr__", [](const py_middleware& x) {
      return "<dice middleware " + x.name + ">";
    });

  py::class_<py_loader>(m, "Loader", "A storage or model loader.")
    .def(py::init([](std::string dirname, double ttl, bool model, bool shm) {
           py_loader l;
           l.opts.dirname = std::move(dirname);
           l.opts.ttl = seconds(ttl);
           l.opts.kind = shm ? storage_kind::shm : storage_kind::file;
           l.model = model;
           return l;
         }),
         py::arg("dirname"), py::arg("ttl"), py::arg("model"),
         py::arg("shm") = false);

  m.def(
    "context_exchanger",
    [](std::int64_t skip_n_iter, py::object storage_loader,
       std::size_t max_in_flight, double timeout) {
      auto& n = setup_of("ContextExchanger");
      context_exchanger_options opts;
      opts.skip_n_iter = skip_n_iter;
      opts.max_in_flight = max_in_flight;
      opts.timeout = seconds(timeout);
      opts.learner_timeout = seconds(timeout);
      opts.storage_loader = storage_loader_for(n, storage_loader);
      return wrap(context_exchanger(std::move(opts)));
    },
    py::arg("skip_n_iter"), py::arg("storage_loader"), py::arg("max_in_flight"),
    py::arg("timeout"));

  m.def(
    "model_exchanger",
    [](py::object model, py::object model_loader, double timeout) {
      auto& n = setup_of("ModelExchanger");
      model_exchanger_options opts;
      opts.timeout = seconds(timeout);
      opts.model_loader = model_loader_for(n, model_loader);
      return wrap(model_exchanger(python_model(std::move(model)), opts));
    },
    py::arg("model"), py::arg("model_loader"), py::arg("timeout"));

  // For tests: `src`'s state_dict through a snapshot into `dst`, the way a
  // ModelExchanger sends and loads it; None, or why `dst` refused it.
  m.def(
    "_copy_model",
    [](py::object src, py::object dst) -> py::object {
      auto x = python_model(std::move(src))->snapshot();
      if (!x)
        return py::str(render(x.error()));
      if (auto err = python_model(std::move(dst))->load(*x))
        return py::str(render(err));
      return py::none();
    },
    py::arg("src"), py::arg("dst"));

  m.def(
    "periodical_model_exchanger",
    [](py::object model, const std::string& mode, std::int64_t period,
       double delay_toleration, std::int64_t stale_toleration,
       std::string event_name, py::object model_loader, double timeout) {
      auto& n = setup_of("PeriodicalModelExchanger");
      periodical_model_exchanger_options opts;
      auto parsed = parse_exchange_mode(mode);
      if (!parsed)
        throw py::value_error("mode must be 'send' or 'receive', not '" + mode
                              + "'");
      if (period < 1)
        throw py::value_error("period must be at least 1");
      opts.mode = *parsed;
      opts.period = period;
      opts.delay_toleration = seconds(delay_toleration);
      opts.stale_toleration = stale_toleration;
      opts.event_name = std::move(event_name);
      opts.timeout = seconds(timeout);
      opts.model_loader = model_loader_for(n, model_loader);
      return wrap(
        periodical_model_exchanger(python_model(std::move(model)), opts));
    },
    py::arg("model"), py::arg("mode"), py::arg("period"),
    py::arg("delay_toleration"), py::arg("stale_toleration"),
    py::arg("event_name"), py::arg("model_loader"), py::arg("timeout"));
}

} // namespace dice::python
