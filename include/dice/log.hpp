#pragma once

#include <cstdint>
#include <functional>
#include <sstream>
#include <string>

namespace dice::log {

/// Severity of a log line.
enum class level : std::uint8_t { debug, info, warning, error };

/// "debug", "info", "warning" or "error".
const char* to_string(level x) noexcept;

/// Receives every log line dice writes at or above the threshold.
using sink = std::function<void(level, std::uint32_t node, const std::string&)>;

/// Replaces the sink (default: stderr with time, level and node id); returns
/// the previous one so tests can restore it.
sink set_sink(sink fn);

/// Sets the lowest level that is written (default: info).
void set_threshold(level x);

/// Writes one line on behalf of `node`.
void write(level lvl, std::uint32_t node, const std::string& msg);

/// Writes a warning on behalf of `node`.
inline void warning(std::uint32_t node, const std::string& msg) {
  write(level::warning, node, msg);
}

/// Writes an informational line on behalf of `node`.
inline void info(std::uint32_t node, const std::string& msg) {
  write(level::info, node, msg);
}

/// Writes an error on behalf of `node`.
inline void error(std::uint32_t node, const std::string& msg) {
  write(level::error, node, msg);
}

/// Writes a debug line on behalf of `node`.
inline void debug(std::uint32_t node, const std::string& msg) {
  write(level::debug, node, msg);
}

} // namespace dice::log
