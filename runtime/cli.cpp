#include "runtime/cli.hpp"

#include "dice/core/errc.hpp"

#include "caf/config_option.hpp"

namespace dice {

namespace {

caf::error bad(const std::string& what) {
  return make_error(errc::invalid_config, what + " (see --help)");
}

} // namespace

caf::expected<std::vector<std::string>>
normalize_cli(const caf::config_option_set& opts,
              std::vector<std::string> args) {
  std::vector<std::string> result;
  result.reserve(args.size());
  for (std::size_t i = 0; i < args.size(); ++i) {
    auto& arg = args[i];
    if (arg == "--") {
      result.insert(result.end(), std::make_move_iterator(args.begin() + i),
                    std::make_move_iterator(args.end()));
      break;
    }
    if (arg.size() < 2 || arg[0] != '-') {
      result.push_back(std::move(arg));
      continue;
    }
    if (arg[1] != '-') {
      // Short options: CAF already takes "-k value" and "-kvalue".
      if (opts.cli_short_name_lookup(arg[1]) == nullptr)
        return bad("unknown option '" + arg.substr(0, 2) + "'");
      result.push_back(std::move(arg));
      continue;
    }
    auto eq = arg.find('=');
    auto name = arg.substr(
      2, eq == std::string::npos ? std::string::npos : eq - 2);
    auto opt = opts.cli_long_name_lookup(name);
    if (opt == nullptr)
      return bad("unknown option '--" + name + "'");
    if (eq != std::string::npos || opt->is_flag()) {
      result.push_back(std::move(arg));
      continue;
    }
    if (i + 1 >= args.size())
      return bad("option '--" + name + "' needs a value");
    result.push_back("--" + name + "=" + args[++i]);
  }
  return result;
}

} // namespace dice
