#include "dice/security/trust.hpp"

#include <nlohmann/json.hpp>

#include <array>
#include <atomic>

namespace dice {

namespace {

std::array<std::atomic<std::uint64_t>, trust_event_count> counters;

} // namespace

const char* to_string(trust_event x) noexcept {
  switch (x) {
    case trust_event::payload_rejected: return "payload_rejected";
    case trust_event::snapshot_rejected: return "snapshot_rejected";
    case trust_event::message_rejected: return "message_rejected";
    case trust_event::unknown_topic: return "unknown_topic";
    case trust_event::wrong_version: return "wrong_version";
    case trust_event::auth_refused: return "auth_refused";
    case trust_event::remote_exit_ignored: return "remote_exit_ignored";
    case trust_event::oversize: return "oversize";
    case trust_event::config_rejected: return "config_rejected";
    case trust_event::duplicate_dropped: return "duplicate_dropped";
    case trust_event::preamble_rejected: return "preamble_rejected";
    case trust_event::preamble_timeout: return "preamble_timeout";
    case trust_event::pending_evicted: return "pending_evicted";
    case trust_event::anonymous_dropped: return "anonymous_dropped";
    case trust_event::stranger_dropped: return "stranger_dropped";
    case trust_event::forged_origin: return "forged_origin";
    case trust_event::frame_rejected: return "frame_rejected";
  }
  return "unknown";
}

void count(trust_event x) noexcept {
  auto i = static_cast<std::size_t>(x);
  if (i < trust_event_count)
    counters[i].fetch_add(1, std::memory_order_relaxed);
}

std::uint64_t counter(trust_event x) noexcept {
  auto i = static_cast<std::size_t>(x);
  return i < trust_event_count ? counters[i].load(std::memory_order_relaxed)
                               : 0;
}

std::string trust_counters_json() {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  for (std::size_t i = 0; i < trust_event_count; ++i) {
    auto x = static_cast<trust_event>(i);
    j[to_string(x)] = counter(x);
  }
  return j.dump();
}

} // namespace dice
