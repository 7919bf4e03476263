// dice._core.Node: what Python's `task` does to the node it stands for.
// While main() builds the node it adds stages; while the node runs, its
// middleware (on the role actor, GIL held) emits events and finishes.

#include "dice/core/role.hpp"
#include "dice/pipeline/node_services.hpp"
#include "dice/pipeline/topic.hpp"
#include "dice/runtime/run.hpp"

#include "bindings.hpp"

#include <limits>

namespace dice::python {

namespace {

py_node& building(py_node& n, const char* what) {
  if (n.setup == nullptr)
    throw py::value_error(std::string{"task."} + what
                          + " works only while main() builds the node (dice "
                            "runs the pipeline after main returns)");
  return n;
}

py_node& running(py_node& n, const char* what) {
  if (n.services == nullptr || current_node() != &n)
    throw py::value_error(std::string{"task."} + what
                          + " works only inside the node's middleware "
                            "(on the thread dice runs it on)");
  return n;
}

std::vector<std::string> role_names(std::uint8_t bits) {
  std::vector<std::string> names;
  auto set = role_set::from_bits(bits);
  for (auto r : all_roles)
    if (set.has(r))
      names.emplace_back(to_string(r));
  return names;
}

} // namespace

void bind_node(py::module_& m) {
  py::class_<py_node, std::shared_ptr<py_node>>(
    m, "Node", "One node of a dice cluster, as Python's task sees it.")
    .def_readonly("id", &py_node::id, "Node id.")
    .def_readonly("index", &py_node::index, "Position in the cluster.")
    .def_readonly("workers", &py_node::workers, "Nodes in the cluster.")
    .def_readonly("distributed", &py_node::distributed,
                  "This process is one node of a multi-process cluster.")
    .def_readonly("restarts", &py_node::restarts,
                  "Restarts of this node so far.")
    .def_property_readonly(
      "roles",
      [](const py_node& n) {
        return role_names(n.roles);
      },
      "The node's roles (dice assigns them from its options).")
    .def(
      "has_role",
      [](const py_node& n, const std::string& name) {
        auto r = parse_role(name);
        if (!r)
          throw py::value_error("unknown role '" + name + "'");
        return role_set::from_bits(n.roles).has(*r);
      },
      py::arg("role"))
    .def_property_readonly("building",
                           [](const py_node& n) {
                             return n.setup != nullptr;
                           })
    .def_property_readonly("ctx",
                           [](const py_node& n) -> py::object {
                             return n.ctx ? n.ctx->get() : py::none();
                           })
    .def("set_ctx",
         [](py_node& n, py::object ctx) {
           building(n, "start(ctx=...)");
           if (!py::isinstance<py_context>(ctx))
             throw py::type_error(
               "ctx must be a dice context (OnlineRLContext)");
           ctx.cast<py_context&>().origin = n.id;
           n.ctx = std::make_shared<gil_object>(std::move(ctx));
         })
    .def("use_python",
         [](py_node& n, py::object fn, std::string name) {
           building(n, "use");
           n.setup->use(python_stage(n.shared_from_this(), std::move(fn),
                                     std::move(name)));
         })
    .def("use_cpp",
         [](py_node& n, py_middleware& mw) {
           building(n, "use");
           if (!mw.stage)
             throw py::value_error(
               "middleware '" + mw.name
               + "' is used already (one instance per use)");
           n.setup->use(std::move(*mw.stage));
           mw.stage.reset();
         })
    .def("set_max_step",
         [](py_node& n, std::int64_t steps) {
           building(n, "run");
           n.max_step = steps;
         })
    .def("on",
         [](py_node& n, std::string event, py::object fn) {
           building(n, "on");
           n.handlers.emplace_back(std::move(event),
                                   std::make_shared<gil_object>(std::move(fn)));
         })
    .def("emit_remote",
         [](py_node& n, const std::string& event, const py::tuple& args) {
           running(n, "emit");
           auto packed = pack_list(args, "task.emit('" + event + "') argument",
                                   n.id, -1);
           n.services->emit(topic<payload>{"task." + event}, std::move(packed));
         })
    .def_property_readonly("finished",
                           [](const py_node& n) {
                             return n.finish_requested
                               || (n.services != nullptr
                                   && n.services->finished());
                           })
    .def(
      "request_finish",
      [](py_node& n, std::string reason) {
        n.finish_requested = true;
        n.finish_reason = reason;
        if (n.services != nullptr && current_node() == &n)
          n.services->request_finish(std::move(reason));
      },
      py::arg("reason") = "task.finish");
  m.def(
    "current",
    []() -> py::object {
      auto n = current_node();
      if (n == nullptr)
        return py::none();
      return py::cast(n->shared_from_this());
    },
    "The node whose main() or middleware runs on this thread, or None.");
}

} // namespace dice::python
