#pragma once

#include "dice/security/trust.hpp"

#include "caf/actor_clock.hpp"
#include "caf/actor_control_block.hpp"
#include "caf/actor_system.hpp"

#include <cstdint>
#include <set>
#include <string>

namespace dice {

/// Who sent a message, as far as a dice actor can tell (CAF 0.17).
enum class sender_kind : std::uint8_t {
  /// No sender: a local `anon_send` and a remote one look the same.
  anonymous,
  /// An actor of this node that no other node can name.
  local,
  /// An actor of this node that CAF's registry holds (published, or it once
  /// sent or was sent to another node): BASP resolves the claimed sender of
  /// a remote message whose source is this node from that registry, so any
  /// node that speaks BASP to this one can use it as a sender.
  exposed,
  /// An actor of another node.
  remote,
};

/// Classifies the sender `src` of a message an actor of `sys` received.
sender_kind classify(const caf::strong_actor_ptr& src, caf::actor_system& sys);

/// True if `src` is an actor of this node that no other node can name: the
/// only senders whose local control messages dice accepts.
inline bool trusted_local(const caf::strong_actor_ptr& src,
                          caf::actor_system& sys) {
  return classify(src, sys) == sender_kind::local;
}

/// Counts dropped messages and logs them once per source: the first drop
/// from each sender (at most `max_sources` remembered, at most a few new
/// lines per second), so a flood of junk cannot flood the log.
class drop_log {
 public:
  /// Most sources remembered.
  static constexpr std::size_t max_sources = 1024;

  /// Counts `ev` and logs "dropped WHAT from SOURCE (WHY)" on behalf of
  /// `node` unless this source was logged before.
  void drop(std::uint32_t node, trust_event ev,
            const caf::strong_actor_ptr& src, const std::string& what,
            const std::string& why, caf::actor_clock::time_point now);

  /// Drops counted by this log.
  std::uint64_t dropped() const noexcept {
    return dropped_;
  }

 private:
  std::set<std::string> seen_;
  caf::actor_clock::time_point window_;
  std::size_t lines_in_window_ = 0;
  std::uint64_t suppressed_ = 0;
  std::uint64_t dropped_ = 0;
};

/// True if `self`'s current message comes from an actor of this node that
/// names itself and that no other node can name; otherwise counts and logs
/// the drop in `drops` on behalf of `node` and returns false. A sender-less
/// message would look the same from anywhere, so it is dropped too.
template <class Self>
bool admit_local(Self self, drop_log& drops, std::uint32_t node,
                 const char* what, const char* why) {
  auto& src = self->current_sender();
  auto kind = classify(src, self->system());
  if (kind == sender_kind::local)
    return true;
  drops.drop(node,
             kind == sender_kind::anonymous ? trust_event::anonymous_dropped
                                            : trust_event::stranger_dropped,
             src, what, why, self->clock().now());
  return false;
}

/// "an anonymous sender", or "a stranger (actor 7@NODE)", for log lines.
std::string describe_sender(const caf::strong_actor_ptr& src,
                            caf::actor_system& sys);

} // namespace dice
