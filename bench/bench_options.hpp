#pragma once

// Options and result lines of the benchmarks that take their own options
// (remote_bench, connect_bench, router_latency_bench): parsed by CLI11
// (bench_options.cpp), `--name value` or `--name=value`, unknown names
// refused, `--help`; one JSON line per result, which bench/run reads.

#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <variant>
#include <vector>

namespace dice::bench {

/// What an option takes: a whole number, a real number, text, or nothing.
enum class value_kind : std::uint8_t { integer, real, text, flag };

/// One `--name` option of a benchmark.
struct option_spec {
  /// The name without the leading "--".
  std::string name;
  /// What it takes.
  value_kind kind = value_kind::text;
  /// What it sets, for --help.
  std::string description;
  /// The value's name in --help (empty: INT, NUMBER or TEXT).
  std::string value_name = {};
};

/// One mode of a benchmark with modes (`program MODE [OPTIONS]`).
struct mode_spec {
  /// The word on the command line.
  std::string name;
  /// What it measures, for --help.
  std::string description;
};

/// The options a benchmark was given, by name (without "--").
class option_values {
 public:
  /// Nothing given.
  option_values() = default;

  /// `mode` (empty: no modes) and the value of every option given.
  option_values(std::string mode, std::map<std::string, std::string> values);

  /// The mode given (empty for a benchmark without modes).
  const std::string& mode() const noexcept {
    return mode_;
  }

  /// Whether `--name` was given (a flag: set).
  bool has(const std::string& name) const;

  /// The value of `--name`, or `fallback`.
  std::string text(const std::string& name, const std::string& fallback) const;

  /// The whole number after `--name` (checked at parse time), or `fallback`.
  long integer(const std::string& name, long fallback) const;

  /// The real number after `--name` (checked at parse time), or `fallback`.
  double real(const std::string& name, double fallback) const;

 private:
  std::string mode_;
  std::map<std::string, std::string> values_;
};

/// A benchmark's command line: the values, or the exit code after --help
/// (0, the help on stdout) or after a refusal (1, on stderr as
/// "PROGRAM: what is wrong (see --help)").
using parsed_options = std::variant<option_values, int>;

/// Parses argv[1..] with CLI11 for `specs`. With `modes` the first
/// argument is one of them and every option follows it; an option given
/// twice counts with its first value (remote_bench puts a collector's own
/// --port and --node before the options it forwards).
parsed_options parse_options(const std::string& program,
                             const std::string& description,
                             const std::vector<option_spec>& specs,
                             const std::vector<mode_spec>& modes, int argc,
                             char** argv);

/// Prints one result as a JSON line on stdout.
inline void print_json(const nlohmann::ordered_json& j) {
  std::printf("%s\n", j.dump().c_str());
  std::fflush(stdout);
}

} // namespace dice::bench
