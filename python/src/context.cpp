// dice._core.ContextBase: DI-engine's context fields over the node's
// dice::context, so C++ stages (the exchangers) and Python middleware see
// one context. Python's own attributes live in the object's __dict__.

#include "bindings.hpp"

namespace dice::python {

namespace {

std::vector<const void*> sources(const std::vector<payload>& xs) {
  std::vector<const void*> result;
  result.reserve(xs.size());
  for (auto& x : xs)
    result.push_back(x.bytes.data());
  return result;
}

// DI-engine's trajectories / episodes: None when empty, else a list.
py::object read_list(py_context& c, py_context::cached_list& cache,
                     const std::vector<payload>& xs) {
  auto now = sources(xs);
  if (cache.list && cache.source == now)
    return cache.list;
  if (xs.empty())
    return py::none();
  cache.list = unpack_list(xs, c.origin);
  cache.source = std::move(now);
  cache.length = py::len(cache.list);
  (void)c;
  return cache.list;
}

void write_list(py_context& c, py_context::cached_list& cache,
                std::vector<payload>& xs, const py::object& list,
                const char* root) {
  xs.clear();
  cache = py_context::cached_list{};
  if (list.is_none())
    return;
  auto packed = pack_list(list, root, c.origin, c.cpp->model_version);
  if (packed.count > 0)
    xs.push_back(std::move(packed));
  cache.list = list;
  cache.source = sources(xs);
  cache.length = py::len(list);
}

// A list Python changed in place since it was read or assigned.
void repack(py_context& c, py_context::cached_list& cache,
            std::vector<payload>& xs, const char* root) {
  if (!cache.list || cache.list.is_none())
    return;
  if (py::len(cache.list) == cache.length && cache.source == sources(xs))
    return;
  if (cache.source != sources(xs))
    return; // C++ replaced it: C++'s wins
  auto list = cache.list;
  write_list(c, cache, xs, list, root);
}

template <class T>
void field(py::class_<py_context>& cls, const char* name, T context::*member,
           const char* doc) {
  cls.def_property(
    name,
    [member](py_context& c) {
      return c.cpp->*member;
    },
    [member](py_context& c, T x) {
      c.cpp->*member = x;
    },
    doc);
}

} // namespace

void enter_context(py::object& ctx, context& c) {
  auto& self = ctx.cast<py_context&>();
  self.cpp = &c;
  if (c.total_step != self.seen_step) {
    self.seen_step = c.total_step;
    self.trajectories = {};
    self.episodes = {};
    ctx.attr("_on_renew")();
  }
}

void leave_context(py::object& ctx) {
  auto& self = ctx.cast<py_context&>();
  repack(self, self.trajectories, self.cpp->trajectories, "trajectories");
  repack(self, self.episodes, self.cpp->episodes, "episodes");
}

void bind_context(py::module_& m) {
  py::class_<py_context> cls(m, "ContextBase", py::dynamic_attr(),
                             "DI-engine's context fields over dice's context.");
  cls.def(py::init<>());
  field(cls, "total_step", &context::total_step,
        "Index of the current iteration.");
  field(cls, "env_step", &context::env_step,
        "Environment steps (a collector's own; summed on learner/evaluator).");
  field(cls, "env_episode", &context::env_episode, "Environment episodes.");
  field(cls, "train_iter", &context::train_iter, "Training iterations.");
  field(cls, "last_eval_iter", &context::last_eval_iter,
        "train_iter of the last evaluation (-1: none).");
  field(cls, "last_eval_value", &context::last_eval_value,
        "Return of the last evaluation.");
  field(cls, "eval_value", &context::eval_value,
        "Evaluation return of this iteration.");
  field(cls, "wandb_url", &context::wandb_url,
        "Experiment tracker link (kept across iterations).");
  cls.def_property_readonly(
    "model_version",
    [](py_context& c) {
      return c.cpp->model_version;
    },
    "Version of the model the node holds (-1: none).");
  cls.def_property(
    "trajectory_end_idx",
    [](py_context& c) -> py::object {
      if (c.cpp->trajectory_end_idx.empty())
        return py::none();
      return py::cast(c.cpp->trajectory_end_idx);
    },
    [](py_context& c, const py::object& x) {
      c.cpp->trajectory_end_idx.clear();
      if (!x.is_none())
        c.cpp->trajectory_end_idx = x.cast<std::vector<std::int64_t>>();
    },
    "Ends of trajectories (indices into the merged trajectories).");
  cls.def_property(
    "trajectories",
    [](py_context& c) {
      return read_list(c, c.trajectories, c.cpp->trajectories);
    },
    [](py_context& c, const py::object& x) {
      write_list(c, c.trajectories, c.cpp->trajectories, x, "trajectories");
    },
    "This iteration's trajectories: None or a list of dice values "
    "(assigned on a collector, merged from every collector on a learner).");
  cls.def_property(
    "episodes",
    [](py_context& c) {
      return read_list(c, c.episodes, c.cpp->episodes);
    },
    [](py_context& c, const py::object& x) {
      write_list(c, c.episodes, c.cpp->episodes, x, "episodes");
    },
    "This iteration's episodes, like trajectories.");
  cls.def(
    "_renew_fields",
    [](py_context& c) {
      if (c.cpp != &c.own)
        throw py::value_error(
          "a node's context is renewed by dice after each iteration");
      c.own.renew();
      c.seen_step = c.own.total_step;
      c.trajectories = {};
      c.episodes = {};
    },
    "Renews the C++ fields of a context that belongs to no node.");
  cls.def_property_readonly("_attached", [](py_context& c) {
    return c.cpp != &c.own;
  });
}

} // namespace dice::python
