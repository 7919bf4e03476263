#pragma once

// What the sources of dice's Python module (dice._core) share. The module
// binds dice's C++ core; it never re-implements it. Python objects cross
// into dice as dice::value trees (messages/value.hpp), torch modules as
// model snapshots, and Python middleware runs on the node's role actor with
// the GIL held only while Python code runs.

#include "dice/core/model.hpp"
#include "dice/messages/value.hpp"
#include "dice/pipeline/context.hpp"
#include "dice/pipeline/middleware.hpp"

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace dice {
class node_setup;
class node_services;
} // namespace dice

namespace dice::python {

namespace py = pybind11;

/// A Python object that may be dropped on any thread (a CAF worker, after
/// the run): takes the GIL to release it.
class gil_object {
 public:
  gil_object() = default;
  explicit gil_object(py::object x) : obj_(std::move(x)) {}
  gil_object(const gil_object&) = delete;
  gil_object& operator=(const gil_object&) = delete;
  ~gil_object();

  /// The object (use with the GIL held).
  const py::object& get() const noexcept {
    return obj_;
  }

  /// Replaces the object (with the GIL held).
  void reset(py::object x = py::object()) {
    obj_ = std::move(x);
  }

 private:
  py::object obj_;
};

// -- values (convert.cpp) and dice.codec (codec.cpp)
// ----------------------------

/// Converts a Python object to a value; arrays view the object's memory and
/// keep it alive. Anything dice cannot carry raises TypeError naming `path`
/// (e.g. "trajectories[3]['obs']").
value to_value(const py::handle& x, const std::string& path);

/// Converts a value to Python objects; arrays become numpy arrays or torch
/// tensors that view the value's bytes (no copy).
py::object from_value(const value& x);

/// Items of a Python list as one payload of len(list) items (from node
/// `origin`); raises TypeError with the path below `root`.
payload pack_list(const py::handle& list, const std::string& root,
                  std::uint32_t origin, std::int64_t model_version);

/// The items of `xs` (pack_list's or a C++ program's pack_values) as one
/// Python list. A payload that is not a dice value encoding is refused
/// (counted, logged for node `receiver`, its item count added to
/// `*refused`) and skipped.
py::list unpack_list(const std::vector<payload>& xs, std::uint32_t receiver,
                     std::size_t* refused = nullptr, bool event = false);

/// Binds dice.codec's functions (codec.cpp).
void bind_codec(py::module_& m);

// -- context (context.cpp) ----------------------------------------------------

/// The C++ side of a Python context (DI-engine's OnlineRLContext): DI-engine's
/// fields read and write the node's dice::context; trajectories and
/// episodes are decoded on first read and encoded when assigned.
struct py_context {
  /// Used until the context belongs to a node.
  context own;
  /// The node's context (or `own`).
  context* cpp = &own;
  /// Node id written into the payloads this context packs.
  std::uint32_t origin = 0;
  /// total_step when Python last entered (a change: the role actor renewed).
  std::int64_t seen_step = 0;

  /// What Python last read or assigned, and the payloads it stands for.
  struct cached_list {
    py::object list;
    std::vector<const void*> source;
    std::size_t length = 0;
  };
  cached_list trajectories;
  cached_list episodes;
};

/// Points `ctx` at the node's context before Python middleware runs; when
/// the role actor renewed it, clears the Python attributes DI-engine drops.
void enter_context(py::object& ctx, context& c);

/// After Python middleware ran: a list Python grew or shrank in place is
/// packed again so that C++ stages see it.
void leave_context(py::object& ctx);

/// Binds dice._core.ContextBase.
void bind_context(py::module_& m);

// -- nodes and middleware (node.cpp, stage.cpp, run.cpp) ---------------------

/// What failed in Python during a run: the first exception, re-raised in
/// Python when the run ends with an error.
struct run_errors {
  std::mutex mtx;
  std::unique_ptr<py::error_already_set> first;
  /// An event handler raised: no restart replaces what it lost, so the
  /// exception is raised even if every node ended without an error.
  bool from_handler = false;
};

/// One node of a Python program, as `task` sees it while the program's
/// main builds it and while its middleware runs.
struct py_node : std::enable_shared_from_this<py_node> {
  /// Set while main() builds the node.
  node_setup* setup = nullptr;
  /// Set once the node's first stage attached (valid while it runs).
  node_services* services = nullptr;
  /// Node id, roles, position.
  std::uint32_t id = 0;
  std::uint8_t roles = 0;
  std::uint32_t index = 0;
  std::uint32_t workers = 1;
  bool distributed = false;
  std::int64_t restarts = 0;
  /// The node's Python context (a ContextBase).
  std::shared_ptr<gil_object> ctx;
  /// task.on handlers: (event, function).
  std::vector<std::pair<std::string, std::shared_ptr<gil_object>>> handlers;
  /// task.finish was set from Python, and why.
  bool finish_requested = false;
  std::string finish_reason = "task.finish";
  /// Iterations (task.run(max_step=...)); 0: until finish.
  std::int64_t max_step = 0;
  /// Shared by all nodes of the process.
  std::shared_ptr<run_errors> errors;
};

/// The node whose main() or middleware runs on this thread (null: none).
py_node* current_node() noexcept;

/// Sets current_node() for a scope.
class current_scope {
 public:
  explicit current_scope(py_node* x);
  ~current_scope();
  current_scope(const current_scope&) = delete;
  current_scope& operator=(const current_scope&) = delete;

 private:
  py_node* prev_;
};

/// A stage that runs Python `fn(ctx)` (a function, or a generator function:
/// before its yield in order, after it in reverse).
middleware python_stage(std::shared_ptr<py_node> node, py::object fn,
                        std::string name);

/// The stage every Python node starts with: takes the node's services and
/// subscribes its task.on handlers.
middleware node_stage(std::shared_ptr<py_node> node);

/// Records a Python exception of node `node` (the first one is kept) and
/// returns `where` followed by its traceback.
std::string record_failure(py_node& node, py::error_already_set& e,
                           const std::string& where);

/// A C++ middleware built in Python (ContextExchanger(...), ...), used once.
struct py_middleware {
  std::unique_ptr<middleware> stage;
  std::string name;
};

/// Binds dice._core.Node (what `task` calls).
void bind_node(py::module_& m);

/// A model port over a torch.nn.Module's state_dict (model.cpp).
model_port_ptr python_model(py::object module);

/// Binds the exchangers and loaders (ContextExchanger, ModelExchanger, ...).
void bind_exchangers(py::module_& m);

/// Binds dice._core.run.
void bind_run(py::module_& m);

} // namespace dice::python
