#pragma once

// Reading the JSON that programs print or write (reports, summaries,
// metrics lines) with nlohmann-json, not by pattern.

#include <nlohmann/json.hpp>

#include <cmath>
#include <string>
#include <vector>

namespace dice::test {

/// The JSON object that starts at the first '{' of `line` (a line may carry
/// a prefix such as dice-launch's "[node 3] "); a discarded value if there is
/// none or it does not parse.
inline nlohmann::json json_in(const std::string& line) {
  auto at = line.find('{');
  if (at == std::string::npos)
    return nlohmann::json::value_t::discarded;
  return nlohmann::json::parse(line.begin() + static_cast<long>(at), line.end(),
                               nullptr, false);
}

/// Every line of `text` that holds a JSON object, parsed.
inline std::vector<nlohmann::json> json_lines(const std::string& text) {
  std::vector<nlohmann::json> result;
  std::size_t pos = 0;
  while (pos < text.size()) {
    auto nl = text.find('\n', pos);
    if (nl == std::string::npos)
      nl = text.size();
    auto j = json_in(text.substr(pos, nl - pos));
    if (j.is_object())
      result.push_back(std::move(j));
    pos = nl + 1;
  }
  return result;
}

/// The integer `name` of the JSON object in `line` (-1: absent or not an
/// integer).
inline long json_int(const std::string& line, const std::string& name) {
  auto j = json_in(line);
  if (!j.is_object() || !j.contains(name) || !j[name].is_number_integer())
    return -1;
  return j[name].get<long>();
}

/// The number `name` of the JSON object in `line` (NaN: absent or null).
inline double json_num(const std::string& line, const std::string& name) {
  auto j = json_in(line);
  if (!j.is_object() || !j.contains(name) || !j[name].is_number())
    return std::nan("");
  return j[name].get<double>();
}

/// The string `name` of the JSON object in `line` ("": absent).
inline std::string json_str(const std::string& line, const std::string& name) {
  auto j = json_in(line);
  if (!j.is_object() || !j.contains(name) || !j[name].is_string())
    return "";
  return j[name].get<std::string>();
}

} // namespace dice::test
