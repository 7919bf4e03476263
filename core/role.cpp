#include "dice/core/role.hpp"

#include "dice/core/errc.hpp"

namespace dice {

const char* to_string(role x) noexcept {
  switch (x) {
    case role::learner: return "learner";
    case role::collector: return "collector";
    case role::evaluator: return "evaluator";
    case role::fetcher: return "fetcher";
  }
  return "unknown";
}

caf::expected<role> parse_role(std::string_view str) {
  for (auto x : all_roles)
    if (str == to_string(x))
      return x;
  return make_error(errc::invalid_config,
                    "unknown role '" + std::string{str}
                      + "' (expected learner, collector, evaluator or "
                        "fetcher)");
}

int role_set::size() const noexcept {
  int n = 0;
  for (auto x : all_roles)
    n += has(x) ? 1 : 0;
  return n;
}

std::string to_string(role_set xs) {
  if (xs.empty())
    return "none";
  std::string result;
  for (auto x : all_roles) {
    if (!xs.has(x))
      continue;
    if (!result.empty())
      result += ',';
    result += to_string(x);
  }
  return result;
}

caf::expected<role_set> parse_role_set(std::string_view str) {
  role_set result;
  if (str.empty() || str == "none")
    return result;
  while (!str.empty()) {
    auto pos = str.find(',');
    auto token = str.substr(0, pos);
    auto x = parse_role(token);
    if (!x)
      return std::move(x.error());
    result.add(*x);
    if (pos == std::string_view::npos)
      break;
    str.remove_prefix(pos + 1);
  }
  return result;
}

} // namespace dice
