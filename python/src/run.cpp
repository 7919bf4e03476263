// dice._core.run: dice::run for a Python program. The calling thread
// releases the GIL for the whole run; main() is called once per node (and
// per restart) with the GIL, to build that node's pipeline.

#include "dice/runtime/run.hpp"

#include "dice/runtime/stop_signals.hpp"

#include "bindings.hpp"

#include <stdexcept>

namespace dice::python {

namespace {

/// dice::run's options, with CAF's workers that do not spin for work: a
/// Python cluster runs more processes than cores, and idle workers polling
/// took the cores from the nodes with work (as for dice::rl's programs;
/// --work-stealing.* on the command line still sets them).
struct python_config : run_config {
  python_config() {
    set("work-stealing.aggressive-poll-attempts", 0);
    set("work-stealing.moderate-poll-attempts", 0);
  }
};

void build_node(node_setup& n, const std::shared_ptr<gil_object>& main,
                const std::shared_ptr<run_errors>& errors) {
  py::gil_scoped_acquire gil;
  auto node = std::make_shared<py_node>();
  node->setup = &n;
  node->id = n.id();
  node->roles = n.roles().bits();
  node->index = n.index();
  node->workers = n.workers();
  node->distributed = n.distributed();
  node->restarts = n.restarts();
  node->errors = errors;
  n.use(node_stage(node));
  {
    current_scope scope{node.get()};
    try {
      main->get()();
    } catch (py::error_already_set& e) {
      node->setup = nullptr;
      throw std::runtime_error(record_failure(*node, e, "main() raised:\n"));
    }
  }
  node->setup = nullptr;
  if (!node->ctx) {
    auto cls = py::module_::import("dice.framework.context")
                 .attr("OnlineRLContext");
    node->ctx = std::make_shared<gil_object>(cls());
  }
  node->ctx->get().cast<py_context&>().origin = n.id();
  n.max_step(node->max_step);
}

} // namespace

void bind_run(py::module_& m) {
  m.def(
    "run",
    [](py::object main, std::vector<std::string> args) {
      if (args.empty())
        args.emplace_back("python");
      std::vector<char*> argv;
      for (auto& a : args)
        argv.push_back(a.data());
      argv.push_back(nullptr);
      auto argc = static_cast<int>(args.size());
      auto errors = std::make_shared<run_errors>();
      auto fn = std::make_shared<gil_object>(std::move(main));
      int rc = 0;
      {
        py::gil_scoped_release nogil;
        rc = dice::run<python_config>(argc, argv.data(), [&](node_setup& n) {
          build_node(n, fn, errors);
        });
      }
      std::lock_guard<std::mutex> guard{errors->mtx};
      if (errors->first && (rc != 0 || errors->from_handler)) {
        auto e = std::move(errors->first);
        e->restore();
        throw py::error_already_set();
      }
      return rc;
    },
    py::arg("main"), py::arg("argv"),
    "Runs main() once per node with dice's options in argv; returns the "
    "exit code, or raises the first exception of a node that failed.");
  m.def(
    "stop_signal",
    [] {
      return stop_signal_received();
    },
    "The SIGINT/SIGTERM that stopped the run (0: none).");
}

} // namespace dice::python
