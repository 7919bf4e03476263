#pragma once

#include "caf/config_option_set.hpp"
#include "caf/expected.hpp"

#include <string>
#include <vector>

namespace dice {

/// Rewrites command-line arguments so that CAF 0.17's parser, which reads
/// only `--key=value`, also takes `--key value`: an option of `opts` that
/// needs a value and has none after '=' takes the next argument. Flags
/// (`--quiet`) stay as they are. An option `opts` does not know is an error
/// that names it. Arguments after "--" and positional ones are left alone.
caf::expected<std::vector<std::string>>
normalize_cli(const caf::config_option_set& opts,
              std::vector<std::string> args);

} // namespace dice
