#pragma once

#include "caf/meta/type_name.hpp"

#include <cstdint>
#include <string>

namespace dice {

/// Tells every node that the run is over (DI-engine's `finish` event). Each
/// node stops after its current iteration.
struct finish {
  /// Node that finished first.
  std::uint32_t sender = 0;
  /// Why: "max_step", "stop_value", or an error text.
  std::string reason;
  /// True when the run ends because of an error.
  bool failed = false;
};

/// Field-wise equality.
bool operator==(const finish& x, const finish& y);

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, finish& x) {
  return f(caf::meta::type_name("dice::finish"), x.sender, x.reason, x.failed);
}

} // namespace dice
