#pragma once

// What the tests that start dice's programs share: where the programs are,
// and the report line a launched node ends with.

#include "support/child_process.hpp"
#include "support/json.hpp"

#include <string>

namespace dice::test {

/// The build's program folder (dice-launch, hello_exchange, ...), with a
/// trailing slash.
inline const std::string bin_dir = std::string{DICE_BINARY_DIR} + "/bin/";

/// bench/remote_bench, which process tests start as real nodes.
inline const std::string remote_bench = bin_dir + "remote_bench";

/// The last JSON report line (the one holding "stop_reason") of node `id`
/// in dice-launch's output: the last incarnation's, if it restarted.
inline std::string report_of(const child_process& p, int id) {
  std::string result;
  auto tag = "[node " + std::to_string(id) + "] ";
  for (auto& l : p.lines())
    if (l.rfind(tag, 0) == 0 && json_in(l).contains("stop_reason"))
      result = l;
  return result;
}

} // namespace dice::test
