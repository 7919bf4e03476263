#pragma once

#include "caf/expected.hpp"
#include "caf/meta/type_name.hpp"

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace dice {

/// What a node does in the cluster; DI-engine's `task.role`.
enum class role : std::uint8_t {
  learner = 1,
  collector = 2,
  evaluator = 4,
  fetcher = 8,
};

/// Every role, in DI-engine's enum order.
constexpr std::array<role, 4> all_roles{role::learner, role::collector,
                                        role::evaluator, role::fetcher};

/// The lower-case name of a role ("learner", ...), stable across versions.
const char* to_string(role x) noexcept;

/// Parses "learner", "collector", "evaluator" or "fetcher".
caf::expected<role> parse_role(std::string_view str);

/// A set of roles; a node may hold several.
class role_set {
 public:
  constexpr role_set() noexcept = default;

  constexpr role_set(std::initializer_list<role> xs) noexcept {
    for (auto x : xs)
      bits_ |= static_cast<std::uint8_t>(x);
  }

  /// DI-engine's `has_role`: true if `x` is in the set.
  constexpr bool has(role x) const noexcept {
    return (bits_ & static_cast<std::uint8_t>(x)) != 0;
  }

  /// Adds a role.
  constexpr role_set& add(role x) noexcept {
    bits_ |= static_cast<std::uint8_t>(x);
    return *this;
  }

  /// True when no role is set.
  constexpr bool empty() const noexcept {
    return bits_ == 0;
  }

  /// Number of roles in the set.
  int size() const noexcept;

  /// The raw bit mask, for the wire.
  constexpr std::uint8_t bits() const noexcept {
    return bits_;
  }

  /// Builds a set from a wire bit mask; unknown bits are dropped.
  static constexpr role_set from_bits(std::uint8_t bits) noexcept {
    role_set result;
    result.bits_ = bits & 0x0F;
    return result;
  }

  friend constexpr bool operator==(role_set x, role_set y) noexcept {
    return x.bits_ == y.bits_;
  }

  friend constexpr bool operator!=(role_set x, role_set y) noexcept {
    return x.bits_ != y.bits_;
  }

  template <class Inspector>
  friend typename Inspector::result_type inspect(Inspector& f, role_set& x) {
    return f(caf::meta::type_name("dice::role_set"), x.bits_);
  }

 private:
  std::uint8_t bits_ = 0;
};

/// Comma-separated names, e.g. "learner,collector"; "none" when empty.
std::string to_string(role_set xs);

/// Parses a comma-separated list of role names.
caf::expected<role_set> parse_role_set(std::string_view str);

} // namespace dice
