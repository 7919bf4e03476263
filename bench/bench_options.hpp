#pragma once

// Options and result lines of the multi-process benchmarks (remote_bench,
// connect_bench): `--name value` or `--name=value` after the first
// argument, unknown names refused; one JSON line per result, which bench/run
// reads.

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

namespace dice::bench {

/// The value of `--name` among argv[first..], or `fallback`.
inline std::string option(int argc, char** argv, int first,
                          const std::string& name,
                          const std::string& fallback) {
  auto flag = "--" + name;
  for (int i = first; i < argc; ++i) {
    std::string a = argv[i];
    if (a == flag && i + 1 < argc)
      return argv[i + 1];
    if (a.rfind(flag + "=", 0) == 0)
      return a.substr(flag.size() + 1);
  }
  return fallback;
}

/// "" if every argument from argv[first] on is a known `--name` with a
/// value, else what is wrong (naming the option).
inline std::string check_options(int argc, char** argv, int first,
                                 const std::vector<std::string>& known) {
  for (int i = first; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--", 0) != 0)
      return "unexpected argument '" + a + "'";
    auto eq = a.find('=');
    auto name = a.substr(2,
                         eq == std::string::npos ? std::string::npos : eq - 2);
    if (std::find(known.begin(), known.end(), name) == known.end())
      return "unknown option '--" + name + "'";
    if (eq == std::string::npos && ++i >= argc)
      return "option '--" + name + "' needs a value";
  }
  return "";
}

/// Prints `why` and the known options to stderr; returns 1 (the exit code).
inline int refuse(const char* program, const std::string& why,
                  const std::vector<std::string>& known) {
  std::string names;
  for (auto& k : known)
    names += " --" + k;
  std::fprintf(stderr, "%s: %s (known:%s)\n", program, why.c_str(),
               names.c_str());
  return 1;
}

/// Prints one result as a JSON line on stdout.
inline void print_json(const nlohmann::ordered_json& j) {
  std::printf("%s\n", j.dump().c_str());
  std::fflush(stdout);
}

} // namespace dice::bench
