#pragma once

#include "caf/error.hpp"
#include "caf/make_message.hpp"

#include <cstdint>
#include <string>

namespace dice {

/// Errors dice reports as values (`caf::error` with category "dice").
enum class errc : std::uint8_t {
  /// Not an error.
  none = 0,
  /// Bytes could not be decoded: truncated, corrupt or inconsistent.
  malformed_input,
  /// A size exceeds a configured or hard limit.
  too_large,
  /// A snapshot does not fit the model: names, shapes or dtypes differ.
  model_mismatch,
  /// A wait ran past its deadline.
  timeout,
  /// The cluster finished before the operation could complete.
  finished,
  /// A file or shared-memory segment is gone (deleted or expired).
  storage_missing,
  /// A storage operation failed (I/O error, permissions, ...).
  storage_failed,
  /// A peer spoke another protocol version or failed the handshake.
  handshake_failed,
  /// A configuration value is invalid.
  invalid_config,
  /// A message arrived on a topic nobody handles.
  unknown_topic,
  /// An operation was refused because of the node's role.
  wrong_role,
  /// A user callback threw an exception; dice converted it.
  user_exception,
  /// A peer could not be reached.
  unreachable,
  /// The peer failed authentication.
  unauthorized,
  /// Not now: the peer still holds a connection this one would replace
  /// (e.g. a restarted node whose old connection is not yet seen dead);
  /// try again after a backoff.
  retry_later,
  /// An environment failed: its reset or step threw, or it was used out of
  /// order (stepped before a reset, or after the vector stopped).
  env_failed,
  /// An action is outside the action space, or of the wrong kind for it.
  invalid_action,
};

/// The enumerator's name, e.g. "model_mismatch".
std::string to_string(errc x);

/// Builds an error in dice's category with a human-readable context.
caf::error make_error(errc code, std::string what);

/// Builds an error in dice's category without context.
caf::error make_error(errc code);

/// True if `err` belongs to dice's category and has code `code`.
bool is(const caf::error& err, errc code);

/// A readable one-line rendering of any `caf::error`.
std::string render(const caf::error& err);

} // namespace dice

CAF_ERROR_CODE_ENUM(dice::errc, "dice")
