#include "security/senders.hpp"

#include "dice/logging/log.hpp"

#include "caf/actor_registry.hpp"

#include <chrono>

namespace dice {

namespace {

// New log lines per second across all sources of one drop_log.
constexpr std::size_t max_lines_per_second = 8;

} // namespace

sender_kind classify(const caf::strong_actor_ptr& src, caf::actor_system& sys) {
  if (!src)
    return sender_kind::anonymous;
  if (src->node() != sys.node())
    return sender_kind::remote;
  if (sys.registry().get(src->id()) == src)
    return sender_kind::exposed;
  return sender_kind::local;
}

std::string describe_sender(const caf::strong_actor_ptr& src,
                            caf::actor_system& sys) {
  switch (classify(src, sys)) {
    case sender_kind::anonymous: return "an anonymous sender";
    case sender_kind::exposed:
      return "a sender another node can name (actor " + caf::to_string(src)
        + ")";
    case sender_kind::remote:
      return "a stranger (actor " + caf::to_string(src) + ")";
    default: return "actor " + caf::to_string(src);
  }
}

void drop_log::drop(std::uint32_t node, trust_event ev,
                    const caf::strong_actor_ptr& src, const std::string& what,
                    const std::string& why, caf::actor_clock::time_point now) {
  count(ev);
  ++dropped_;
  auto key = src ? caf::to_string(src) : std::string{"anonymous"};
  if (seen_.count(key) > 0)
    return;
  if (now - window_ >= std::chrono::seconds{1}) {
    window_ = now;
    lines_in_window_ = 0;
  }
  if (lines_in_window_ >= max_lines_per_second) {
    ++suppressed_;
    return;
  }
  ++lines_in_window_;
  if (seen_.size() >= max_sources)
    seen_.erase(seen_.begin());
  seen_.insert(key);
  std::string who = src ? "actor " + key : "an anonymous sender";
  auto line = "dropped " + what + " from " + who + ": " + why + " ("
    + to_string(ev);
  if (suppressed_ > 0)
    line += "; " + std::to_string(suppressed_)
      + " drops from new sources not logged";
  line += ")";
  suppressed_ = 0;
  log::warning(node, line);
}

} // namespace dice
