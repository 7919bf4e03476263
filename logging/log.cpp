#include "dice/logging/log.hpp"

#include <spdlog/logger.h>
#include <spdlog/sinks/stdout_sinks.h>

#include <atomic>
#include <cstdlib>
#include <string>
#include <thread>

namespace dice::log {

namespace {

spdlog::level::level_enum to_spdlog(level x) noexcept {
  switch (x) {
    case level::debug: return spdlog::level::debug;
    case level::info: return spdlog::level::info;
    case level::warning: return spdlog::level::warn;
    case level::error: return spdlog::level::err;
  }
  return spdlog::level::err;
}

/// What every line passes through. Leaked on purpose: actors log until the
/// very end of the process, after static destructors may have run.
struct state {
  state() {
    auto out = std::make_shared<spdlog::sinks::stderr_sink_mt>();
    logger = std::make_shared<spdlog::logger>("dice", std::move(out));
    logger->set_pattern("%H:%M:%S.%e %-7l %v");
    // dice's threshold filters; the logger passes what reaches it.
    logger->set_level(spdlog::level::trace);
    // DICE_LOG_LEVEL=debug shows the per-delta lines (acks, duplicates,
    // resends) in every process a launcher starts, without a flag per tool.
    if (auto* env = std::getenv("DICE_LOG_LEVEL")) {
      std::string x{env};
      if (x == "debug")
        threshold = level::debug;
      else if (x == "warning")
        threshold = level::warning;
      else if (x == "error")
        threshold = level::error;
    }
  }

  std::shared_ptr<spdlog::logger> logger;
  std::atomic<level> threshold{level::info};
  // The user's sink, swapped atomically: writers take a reference and call
  // it without holding any lock.
  std::shared_ptr<const sink> user;
};

state& get() {
  static auto* ptr = new state;
  return *ptr;
}

void to_logger(level lvl, std::uint32_t node, const std::string& msg) {
  get().logger->log(to_spdlog(lvl), "[node {}] {}", node, msg);
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
  std::shared_ptr<const sink> next;
  if (fn)
    next = std::make_shared<const sink>(std::move(fn));
  auto prev = std::atomic_exchange(&get().user, std::move(next));
  if (!prev)
    return sink{to_logger};
  // Writers hold a reference only while they call the sink: once ours is
  // the last, no thread is inside it any more, so the caller may destroy
  // what it captured (a sink must not call set_sink itself).
  while (prev.use_count() > 1)
    std::this_thread::yield();
  std::atomic_thread_fence(std::memory_order_acquire);
  return *prev;
}

void set_threshold(level x) {
  get().threshold.store(x, std::memory_order_relaxed);
}

bool enabled(level lvl) noexcept {
  return lvl >= get().threshold.load(std::memory_order_relaxed);
}

std::shared_ptr<spdlog::logger> spdlog_logger() {
  return get().logger;
}

void write(level lvl, std::uint32_t node, const std::string& msg) {
  if (!enabled(lvl))
    return;
  if (auto fn = std::atomic_load(&get().user))
    (*fn)(lvl, node, msg);
  else
    to_logger(lvl, node, msg);
}

} // namespace dice::log
