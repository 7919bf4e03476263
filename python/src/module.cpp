// dice._core: the compiled half of dice's Python package.

#include "bindings.hpp"

PYBIND11_MODULE(_core, m) {
  m.doc() = "dice's C++ core for Python (use the dice package, not this).";
  dice::python::bind_codec(m);
  dice::python::bind_context(m);
  dice::python::bind_node(m);
  dice::python::bind_exchangers(m);
  dice::python::bind_run(m);
}
