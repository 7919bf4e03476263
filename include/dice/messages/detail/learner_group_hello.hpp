#pragma once

// What learners of a data-parallel group tell each other over the router:
// rank 0's rendezvous address (retained, so a learner that connects later
// still gets it), after a failed step which learners are still alive, and a
// restarted learner's request to join the running group.
// Both travel as short text with a strict parser: the router is authenticated
// (cluster secret, TLS), and a malformed line is refused, never trusted.

#include <charconv>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dice {

/// Topic of rank 0's rendezvous address (the router retains its last message).
inline constexpr const char learner_group_topic[] = "learner_group";

/// Topic on which survivors of a failed step announce themselves, and
/// restarted learners ask to join.
inline constexpr const char learner_group_alive_topic[] = "learner_group_alive";

/// Rank 0's rendezvous: where generation `generation` of the group forms.
struct learner_group_hello {
  /// Re-formations so far (0: the first group).
  std::uint64_t generation = 0;
  /// Learners in this generation.
  std::uint32_t size = 0;
  /// Address of rank 0's store.
  std::string host;
  /// Port of rank 0's store.
  std::uint16_t port = 0;
  /// Set when this generation admits a learner that asked to join: its
  /// node id; it takes the last rank.
  std::optional<std::uint32_t> joiner;
  /// The joiner's nonce (from its `learner_group_join`), so that a later
  /// incarnation of the same node never forms with a stale hello.
  std::uint64_t joiner_nonce = 0;
};

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
  /// Random per incarnation: echoed by the hello that admits it.
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

/// "dice-lg1 hello GENERATION SIZE HOST PORT", followed by " NODE NONCE"
/// when the generation admits a joiner.
inline std::string to_wire(const learner_group_hello& x) {
  auto result = "dice-lg1 hello " + std::to_string(x.generation) + " "
    + std::to_string(x.size) + " " + x.host + " " + std::to_string(x.port);
  if (x.joiner)
    result += " " + std::to_string(*x.joiner) + " "
      + std::to_string(x.joiner_nonce);
  return result;
}

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

/// Parses `to_wire`'s hello; nullopt for anything else (host names are at
/// most 253 characters, groups at most 65536 learners).
inline std::optional<learner_group_hello>
parse_learner_group_hello(std::string_view str) {
  auto w = detail::split_words(str);
  learner_group_hello x;
  if ((w.size() != 6 && w.size() != 8) || w[0] != "dice-lg1" || w[1] != "hello"
      || !detail::parse_word(w[2], x.generation)
      || !detail::parse_word(w[3], x.size) || x.size == 0 || x.size > 65536
      || w[4].empty() || w[4].size() > 253 || !detail::parse_word(w[5], x.port)
      || x.port == 0)
    return std::nullopt;
  if (w.size() == 8) {
    std::uint32_t node = 0;
    if (x.size < 2 || !detail::parse_word(w[6], node)
        || !detail::parse_word(w[7], x.joiner_nonce))
      return std::nullopt;
    x.joiner = node;
  }
  x.host = std::string{w[4]};
  return x;
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
