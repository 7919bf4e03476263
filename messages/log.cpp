#include "dice/log.hpp"

#include <chrono>
#include <cstdio>
#include <ctime>
#include <mutex>

namespace dice::log {

namespace {

std::mutex mtx;

level threshold = level::info;

void default_sink(level lvl, std::uint32_t node, const std::string& msg) {
  using namespace std::chrono;
  auto now = system_clock::now();
  auto secs = system_clock::to_time_t(now);
  auto ms = duration_cast<milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  localtime_r(&secs, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%H:%M:%S", &tm);
  std::fprintf(stderr, "%s.%03d %-7s [node %u] %s\n", stamp,
               static_cast<int>(ms), to_string(lvl), node, msg.c_str());
}

sink& current() {
  static sink fn = default_sink;
  return fn;
}

} // namespace

const char* to_string(level x) noexcept {
  switch (x) {
    case level::debug: return "debug";
    case level::info: return "info";
    case level::warning: return "warning";
    case level::error: return "error";
  }
  return "?";
}

sink set_sink(sink fn) {
  std::lock_guard<std::mutex> guard{mtx};
  auto prev = std::move(current());
  current() = fn ? std::move(fn) : sink{default_sink};
  return prev;
}

void set_threshold(level x) {
  std::lock_guard<std::mutex> guard{mtx};
  threshold = x;
}

void write(level lvl, std::uint32_t node, const std::string& msg) {
  std::lock_guard<std::mutex> guard{mtx};
  if (lvl < threshold)
    return;
  current()(lvl, node, msg);
}

} // namespace dice::log
