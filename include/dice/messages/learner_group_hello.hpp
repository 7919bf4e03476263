#pragma once

// What learners of a data-parallel group tell each other over the bus:
// rank 0's rendezvous address (retained, so a learner that connects later
// still gets it) and, after a failed step, which learners are still alive.
// Both travel as short text with a strict parser: the bus is authenticated
// (cluster secret, TLS), and a malformed line is refused, never trusted.

#include <charconv>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dice {

/// Topic of rank 0's rendezvous address (the bus retains its last message).
inline constexpr const char learner_group_topic[] = "learner_group";

/// Topic on which survivors of a failed step announce themselves.
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
};

/// A survivor of a failed step of generation `generation`.
struct learner_group_alive {
  /// The generation whose step failed.
  std::uint64_t generation = 0;
  /// The survivor's rank in that generation.
  std::uint32_t rank = 0;
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

/// "dice-lg1 hello GENERATION SIZE HOST PORT".
inline std::string to_wire(const learner_group_hello& x) {
  return "dice-lg1 hello " + std::to_string(x.generation) + " "
    + std::to_string(x.size) + " " + x.host + " " + std::to_string(x.port);
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
  if (w.size() != 6 || w[0] != "dice-lg1" || w[1] != "hello"
      || !detail::parse_word(w[2], x.generation)
      || !detail::parse_word(w[3], x.size) || x.size == 0 || x.size > 65536
      || w[4].empty() || w[4].size() > 253 || !detail::parse_word(w[5], x.port)
      || x.port == 0)
    return std::nullopt;
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

} // namespace dice
