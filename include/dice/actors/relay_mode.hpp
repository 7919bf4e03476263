#pragma once

// When a node sends a large snapshot to many remote peers down a relay tree
// of them (actors/router_relay.cpp) and when one copy to each.

#include <cstdint>
#include <optional>
#include <string>

namespace dice {

/// How a router sends a large snapshot to many remote peers.
enum class relay_mode : std::uint8_t {
  /// One copy to each peer (`--dice.relay=false`).
  off,
  /// Always down the relay tree (`--dice.relay=true`).
  on,
  /// Whichever way this node measured faster, probed again now and then
  /// (`--dice.relay=auto`, the default).
  automatic,
};

/// "auto", "true"/"on" or "false"/"off" as a relay_mode; none otherwise.
/// Inline: node options parse it without linking the router (fuzz/'s
/// config target links only what the option decoders need).
inline std::optional<relay_mode> parse_relay_mode(const std::string& text) {
  if (text == "auto")
    return relay_mode::automatic;
  if (text == "true" || text == "on" || text == "1")
    return relay_mode::on;
  if (text == "false" || text == "off" || text == "0")
    return relay_mode::off;
  return std::nullopt;
}

/// How often the routers of this process decided, in auto mode, for the
/// relay tree or for the star (one copy per peer).
struct relay_choice_counts {
  /// Decisions for the relay tree.
  std::uint64_t tree = 0;
  /// Decisions for the star.
  std::uint64_t star = 0;
};

/// This process's auto-mode decisions so far.
relay_choice_counts relay_choices() noexcept;

} // namespace dice
