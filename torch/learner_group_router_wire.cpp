// The texts of the router-carried rendezvous (learner_group_router_store.hpp):
// their wire forms and strict parsers.

#include "dice/messages/detail/learner_group_hello.hpp"

#include "learner_group_router_store.hpp"

#include <algorithm>

namespace dice::detail {

namespace {

bool key_ok(std::string_view key) {
  // c10d's and gloo's keys are paths of names and numbers; nothing else
  // (no spaces, which would shift the words) is accepted.
  return !key.empty() && key.size() <= max_store_key
    && std::all_of(key.begin(), key.end(), [](char c) {
         return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
           || (c >= '0' && c <= '9') || c == '/' || c == '_' || c == '-'
           || c == '.' || c == ':';
       });
}

// An empty value is "-": every word of a message is non-empty.
std::string to_hex(const std::vector<std::uint8_t>& xs) {
  static constexpr char digits[] = "0123456789abcdef";
  if (xs.empty())
    return "-";
  std::string result;
  result.reserve(2 * xs.size());
  for (auto x : xs) {
    result += digits[x >> 4];
    result += digits[x & 0xF];
  }
  return result;
}

int from_hex_digit(char c) {
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  return -1; // upper case refused: one spelling per value
}

bool parse_hex(std::string_view str, std::vector<std::uint8_t>& out) {
  out.clear();
  if (str == "-")
    return true;
  if (str.empty() || str.size() % 2 != 0 || str.size() > 2 * max_store_value)
    return false;
  out.reserve(str.size() / 2);
  for (std::size_t i = 0; i < str.size(); i += 2) {
    auto hi = from_hex_digit(str[i]);
    auto lo = from_hex_digit(str[i + 1]);
    if (hi < 0 || lo < 0)
      return false;
    out.push_back(static_cast<std::uint8_t>(hi << 4 | lo));
  }
  return true;
}

std::string head(std::string_view kind, std::uint64_t gen, std::uint32_t node,
                 std::uint64_t id) {
  return "dice-lg1 " + std::string{kind} + " " + std::to_string(gen) + " "
    + std::to_string(node) + " " + std::to_string(id) + " ";
}

// split_words drops a trailing space: one spelling per message, so refuse it.
bool words_ok(std::string_view str, std::size_t max) {
  return !str.empty() && str.size() <= max && str.back() != ' ';
}

} // namespace

std::string to_wire(const store_request& x) {
  auto result = head("store", x.generation, x.from, x.id);
  switch (x.op) {
    case store_request::op_type::set:
      return result + "set " + x.key + " " + to_hex(x.value);
    case store_request::op_type::get:
      return result + "get " + x.key + " " + std::to_string(x.arg);
    default: return result + "add " + x.key + " " + std::to_string(x.arg);
  }
}

std::string to_wire(const store_reply& x) {
  auto result = head("stored", x.generation, x.to, x.id);
  switch (x.kind) {
    case store_reply::kind_type::ok: return result + "ok";
    case store_reply::kind_type::value:
      return result + "value " + to_hex(x.value);
    case store_reply::kind_type::none: return result + "none";
    case store_reply::kind_type::sum:
      return result + "sum " + std::to_string(x.sum);
    default: return result + "refused";
  }
}

std::optional<store_request> parse_store_request(std::string_view str) {
  if (!words_ok(str, 2 * max_store_value + max_store_key + 100))
    return std::nullopt;
  auto w = split_words(str);
  store_request x;
  if (w.size() != 8 || w[0] != "dice-lg1" || w[1] != "store"
      || !parse_word(w[2], x.generation) || !parse_word(w[3], x.from)
      || !parse_word(w[4], x.id) || !key_ok(w[6]))
    return std::nullopt;
  x.key = std::string{w[6]};
  if (w[5] == "set") {
    x.op = store_request::op_type::set;
    if (!parse_hex(w[7], x.value))
      return std::nullopt;
  } else if (w[5] == "get") {
    x.op = store_request::op_type::get;
    if (w[7] != "0" && w[7] != "1")
      return std::nullopt;
    x.arg = w[7] == "1";
  } else if (w[5] == "add") {
    x.op = store_request::op_type::add;
    if (!parse_word(w[7], x.arg))
      return std::nullopt;
  } else {
    return std::nullopt;
  }
  return x;
}

std::optional<store_reply> parse_store_reply(std::string_view str) {
  if (!words_ok(str, 2 * max_store_value + 100))
    return std::nullopt;
  auto w = split_words(str);
  store_reply x;
  if (w.size() < 6 || w[0] != "dice-lg1" || w[1] != "stored"
      || !parse_word(w[2], x.generation) || !parse_word(w[3], x.to)
      || !parse_word(w[4], x.id))
    return std::nullopt;
  using k = store_reply::kind_type;
  if (w.size() == 6 && w[5] == "ok")
    x.kind = k::ok;
  else if (w.size() == 6 && w[5] == "none")
    x.kind = k::none;
  else if (w.size() == 6 && w[5] == "refused")
    x.kind = k::refused;
  else if (w.size() == 7 && w[5] == "value" && parse_hex(w[6], x.value))
    x.kind = k::value;
  else if (w.size() == 7 && w[5] == "sum" && parse_word(w[6], x.sum))
    x.kind = k::sum;
  else
    return std::nullopt;
  return x;
}

std::string to_wire(const rendezvous_hello& x) {
  auto result = "dice-lg1 rendezvous " + std::to_string(x.generation) + " "
    + std::to_string(x.size);
  if (x.joiner)
    result += " " + std::to_string(*x.joiner) + " "
      + std::to_string(x.joiner_nonce);
  return result;
}

std::optional<rendezvous_hello> parse_rendezvous_hello(std::string_view str) {
  if (!words_ok(str, 200))
    return std::nullopt;
  auto w = split_words(str);
  rendezvous_hello x;
  if ((w.size() != 4 && w.size() != 6) || w[0] != "dice-lg1"
      || w[1] != "rendezvous" || !parse_word(w[2], x.generation)
      || !parse_word(w[3], x.size) || x.size == 0 || x.size > 65536)
    return std::nullopt;
  if (w.size() == 6) {
    std::uint32_t node = 0;
    if (x.size < 2 || !parse_word(w[4], node)
        || !parse_word(w[5], x.joiner_nonce))
      return std::nullopt;
    x.joiner = node;
  }
  return x;
}

} // namespace dice::detail
