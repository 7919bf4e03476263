// Python middleware as dice stages. A stage takes the GIL only while
// Python code runs, on the node's role actor; C++ stages and the other
// nodes' actors run meanwhile. An exception in Python is logged with its
// traceback and fails the node like a C++ middleware that throws (the role
// actor restarts it under --dice.max-restarts, else the cluster finishes);
// the first one is raised again in Python when dice.run returns.

#include "dice/logging/log.hpp"
#include "dice/messages/payload.hpp"
#include "dice/pipeline/node_services.hpp"
#include "dice/pipeline/topic.hpp"

#include "bindings.hpp"

#include <stdexcept>

namespace dice::python {

namespace {

thread_local py_node* current = nullptr;

struct stage_state {
  gil_object fn;
  gil_object gen; // the generator between before and after
};

bool is_generator(const py::object& x) {
  return PyGen_Check(x.ptr()) != 0;
}

// Runs the generator to its next yield; true while it has not ended.
bool advance(const py::object& gen) {
  try {
    py::module_::import("builtins").attr("next")(gen);
    return true;
  } catch (py::error_already_set& e) {
    if (e.matches(PyExc_StopIteration))
      return false;
    throw;
  }
}

[[noreturn]] void fail(py_node& node, py::error_already_set& e,
                       const std::string& where) {
  auto text = record_failure(node, e, where);
  throw std::runtime_error(text);
}

} // namespace

py_node* current_node() noexcept {
  return current;
}

current_scope::current_scope(py_node* x) : prev_(current) {
  current = x;
}

current_scope::~current_scope() {
  current = prev_;
}

std::string record_failure(py_node& node, py::error_already_set& e,
                           const std::string& where) {
  std::string text = where + e.what();
  try {
    auto tb = py::module_::import("traceback");
    auto lines = tb.attr("format_exception")(e.type(), e.value(), e.trace());
    text = where + py::str("").attr("join")(lines).cast<std::string>();
    while (!text.empty() && text.back() == '\n')
      text.pop_back();
  } catch (py::error_already_set&) {
    // keep e.what()
  }
  if (node.errors) {
    std::lock_guard<std::mutex> guard{node.errors->mtx};
    if (!node.errors->first)
      node.errors->first = std::make_unique<py::error_already_set>(
        std::move(e));
  }
  return text;
}

middleware python_stage(std::shared_ptr<py_node> node, py::object fn,
                        std::string name) {
  auto st = std::make_shared<stage_state>();
  st->fn.reset(std::move(fn));
  middleware m;
  m.name = name;
  m.before = [node, st, name](context& c) -> step {
    py::gil_scoped_acquire gil;
    current_scope scope{node.get()};
    auto ctx = node->ctx->get();
    try {
      enter_context(ctx, c);
      py::object result = st->fn.get()(ctx);
      if (is_generator(result)) {
        if (advance(result))
          st->gen.reset(std::move(result));
      }
      leave_context(ctx);
    } catch (py::error_already_set& e) {
      fail(*node, e, "");
    }
    return proceed;
  };
  m.after = [node, st, name](context& c) {
    py::gil_scoped_acquire gil;
    if (!st->gen.get())
      return;
    current_scope scope{node.get()};
    auto ctx = node->ctx->get();
    auto gen = st->gen.get();
    st->gen.reset();
    try {
      enter_context(ctx, c);
      advance(gen);
      leave_context(ctx);
    } catch (py::error_already_set& e) {
      fail(*node, e, "after its yield: ");
    }
  };
  return m;
}

middleware node_stage(std::shared_ptr<py_node> node) {
  middleware m;
  m.name = "python node";
  m.attach = [node](node_services& s) {
    node->services = &s;
    std::vector<std::pair<std::string, std::shared_ptr<gil_object>>> handlers;
    {
      py::gil_scoped_acquire gil;
      handlers = node->handlers;
    }
    for (auto& [event, fn] : handlers) {
      auto who = node;
      auto handler = fn;
      auto ev = event;
      s.on(topic<payload>{"task." + event},
           [who, handler, ev](const payload& x) {
             py::gil_scoped_acquire gil;
             current_scope scope{who.get()};
             try {
               // The payload holds the emitted arguments, one item each.
               std::size_t refused = 0;
               auto args = unpack_list({x}, who->id, &refused, true);
               if (refused == 0)
                 handler->get()(*args);
             } catch (py::error_already_set& e) {
               auto text = record_failure(
                 *who, e, "handler of event '" + ev + "' raised:\n");
               log::error(who->id, text);
               if (who->errors) {
                 std::lock_guard<std::mutex> guard{who->errors->mtx};
                 who->errors->from_handler = true;
               }
               if (who->services)
                 who->services->request_finish("error: " + text);
             }
           });
    }
  };
  m.before = [node](context&) -> step {
    if (node->finish_requested && node->services)
      node->services->request_finish(node->finish_reason);
    return proceed;
  };
  return m;
}

} // namespace dice::python
