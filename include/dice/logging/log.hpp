#pragma once

// dice's log: every line names the node that wrote it. Lines go to an
// spdlog logger (stderr by default, "HH:MM:SS.mmm level [node N] text"), or
// to a user's sink instead. A line below the threshold costs one atomic load:
// the fmt overloads (`log::debug(node, "x {}", y)`) format nothing then.

#include <fmt/core.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>

namespace spdlog {
class logger;
} // namespace spdlog

namespace dice::log {

/// Severity of a log line.
enum class level : std::uint8_t { debug, info, warning, error };

/// "debug", "info", "warning" or "error".
const char* to_string(level x) noexcept;

/// Receives every log line dice writes at or above the threshold. Called on
/// the writing thread with no dice lock held: a sink that keeps state guards
/// it itself.
using sink = std::function<void(level, std::uint32_t node, const std::string&)>;

/// Replaces the sink (nullptr: back to the spdlog logger) and returns the
/// previous one once no thread is inside it any more. What it returns is
/// always callable (the default writes to the spdlog logger), so tests and
/// programs can chain to it and restore it. A sink must not call set_sink.
sink set_sink(sink fn);

/// Sets the lowest level that is written (default: info).
void set_threshold(level x);

/// True when lines at `lvl` are written.
bool enabled(level lvl) noexcept;

/// The spdlog logger behind the default sink: add sinks (files, syslog) or
/// change its pattern before the actor system starts.
std::shared_ptr<spdlog::logger> spdlog_logger();

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

/// Formats (fmt syntax) and writes one line, only if `lvl` is written.
template <class T, class... Ts>
void write(level lvl, std::uint32_t node, fmt::format_string<T, Ts...> fmt_str,
           T&& x, Ts&&... xs) {
  if (enabled(lvl))
    write(lvl, node,
          fmt::format(fmt_str, std::forward<T>(x), std::forward<Ts>(xs)...));
}

/// Formats and writes a warning, only if warnings are written.
template <class T, class... Ts>
void warning(std::uint32_t node, fmt::format_string<T, Ts...> fmt_str, T&& x,
             Ts&&... xs) {
  write(level::warning, node, fmt_str, std::forward<T>(x),
        std::forward<Ts>(xs)...);
}

/// Formats and writes an informational line, only if those are written.
template <class T, class... Ts>
void info(std::uint32_t node, fmt::format_string<T, Ts...> fmt_str, T&& x,
          Ts&&... xs) {
  write(level::info, node, fmt_str, std::forward<T>(x),
        std::forward<Ts>(xs)...);
}

/// Formats and writes an error.
template <class T, class... Ts>
void error(std::uint32_t node, fmt::format_string<T, Ts...> fmt_str, T&& x,
           Ts&&... xs) {
  write(level::error, node, fmt_str, std::forward<T>(x),
        std::forward<Ts>(xs)...);
}

/// Formats and writes a debug line, only if debug lines are written.
template <class T, class... Ts>
void debug(std::uint32_t node, fmt::format_string<T, Ts...> fmt_str, T&& x,
           Ts&&... xs) {
  write(level::debug, node, fmt_str, std::forward<T>(x),
        std::forward<Ts>(xs)...);
}

} // namespace dice::log
