#pragma once

// What learners of a data-parallel group tell each other over the router:
// the topics, after a failed step which learners are still alive, and a
// restarted learner's request to join the running group (the rendezvous
// itself, rank 0's announcement and the store's requests, is in
// torch/learner_group_router_store.hpp). All travel as short text with a
// strict parser: the router is authenticated (cluster secret, TLS), and a
// malformed line is refused, never trusted.

#include <charconv>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dice {

/// Topic of rank 0's rendezvous announcement (the router retains its last
/// message).
inline constexpr const char learner_group_topic[] = "learner_group";

/// Topic on which survivors of a failed step announce themselves, and
/// restarted learners ask to join.
inline constexpr const char learner_group_alive_topic[] = "learner_group_alive";

/// A survivor of a failed step of generation `generation`.
struct learner_group_alive {
  /// The generation whose step failed.
  std::uint64_t generation = 0;
  /// The survivor's rank in that generation.
  std::uint32_t rank = 0;
};

/// A learner that (re)started while its group runs asks to be admitted.
struct learner_group_join {
  /// The learner's node id.
  std::uint32_t node = 0;
  /// Random per incarnation: echoed by the rendezvous announcement that admits
  /// it.
  std::uint64_t nonce = 0;
};

namespace detail {

/// Splits `str` at single spaces.
inline std::vector<std::string_view> split_words(std::string_view str) {
  std::vector<std::string_view> result;
  while (!str.empty()) {
    auto pos = str.find(' ');
    result.push_back(str.substr(0, pos));
    if (pos == std::string_view::npos)
      break;
    str.remove_prefix(pos + 1);
  }
  return result;
}

/// Parses a whole decimal word into `x`, refusing anything else.
template <class T>
bool parse_word(std::string_view word, T& x) {
  auto res = std::from_chars(word.data(), word.data() + word.size(), x);
  return res.ec == std::errc{} && res.ptr == word.data() + word.size();
}

} // namespace detail

/// "dice-lg1 join NODE NONCE".
inline std::string to_wire(const learner_group_join& x) {
  return "dice-lg1 join " + std::to_string(x.node) + " "
    + std::to_string(x.nonce);
}

/// "dice-lg1 alive GENERATION RANK".
inline std::string to_wire(const learner_group_alive& x) {
  return "dice-lg1 alive " + std::to_string(x.generation) + " "
    + std::to_string(x.rank);
}

/// Parses `to_wire`'s alive; nullopt for anything else.
inline std::optional<learner_group_alive>
parse_learner_group_alive(std::string_view str) {
  auto w = detail::split_words(str);
  learner_group_alive x;
  if (w.size() != 4 || w[0] != "dice-lg1" || w[1] != "alive"
      || !detail::parse_word(w[2], x.generation)
      || !detail::parse_word(w[3], x.rank) || x.rank >= 65536)
    return std::nullopt;
  return x;
}

/// Parses `to_wire`'s join; nullopt for anything else.
inline std::optional<learner_group_join>
parse_learner_group_join(std::string_view str) {
  auto w = detail::split_words(str);
  learner_group_join x;
  if (w.size() != 4 || w[0] != "dice-lg1" || w[1] != "join"
      || !detail::parse_word(w[2], x.node)
      || !detail::parse_word(w[3], x.nonce))
    return std::nullopt;
  return x;
}

} // namespace dice
