#pragma once

// dice's preamble: the first bytes on a node's port, exchanged and checked
// by dice before CAF's BASP parser sees a byte (CAF 0.17.6 crashes on one
// hostile BASP header and allocates whatever length a header announces).
// Pure state machines over bytes, no I/O: the listener and the dialer
// drive them over sockets, the fuzzer and the tests over buffers.
//
// Framing, in order (sizes fixed, integers one byte, reserved bytes 0):
//
//   D1 dialer hello    40 B  "DICE" version flags 0 0         nonce_d[32]
//   A1 acceptor hello  72 B  "DICE" version flags channels 0  nonce_a[32]
//                            mac_a[32]
//   D2 dialer proof    36 B  channel 0 0 0  mac_d[32]
//
// flags bit 0: this side has a cluster secret (other bits must be 0).
// channels: bit (c - 1) set for each channel c the acceptor serves.
// mac_a = HMAC-SHA256(secret, "dice-preamble-accept" | D1 | A1[0..40))
// mac_d = HMAC-SHA256(secret, "dice-preamble-dial" | D1 | A1 | D2[0..4))
// Without a secret the MACs are 32 zero bytes. The acceptor proves itself
// first; the dialer sends its proof only to an acceptor that proved it
// knows the secret and serves the channel. Both MACs cover both fresh
// nonces, so neither can be replayed; the dialer's covers the channel, so
// it cannot be changed on the way. After D2 the connection belongs to the
// channel (control: CAF's BASP): the dialer hands its socket over right
// after sending D2, the acceptor once D2 verified (a bad D2 is closed).
// Neither side reads past the preamble, so the channel's first bytes stay
// in the socket for whoever owns it next. 1.5 round trips in all.

#include "caf/error.hpp"

#include <cstddef>
#include <cstdint>
#include <string>

namespace dice::net {

/// Version of the preamble framing.
inline constexpr std::uint8_t preamble_version = 1;

/// The magic that opens D1 and A1.
inline constexpr char preamble_magic[4] = {'D', 'I', 'C', 'E'};

/// Sizes of the four preamble messages.
inline constexpr std::size_t dialer_hello_size = 40;
inline constexpr std::size_t acceptor_hello_size = 72;
inline constexpr std::size_t dialer_proof_size = 36;

/// Length of the nonces (random bytes) each side contributes.
inline constexpr std::size_t preamble_nonce_size = 32;

/// What a connection carries once the preamble is done. One port serves
/// every channel; unknown channels are refused.
enum class channel : std::uint8_t {
  /// CAF's BASP: the routers' messages.
  control = 1,
  /// Bulk bytes between two connected routers (net/data_plane.hpp), bound to
  /// their control session by a MAC (net/data_auth.hpp).
  data = 2,
};

/// True for a channel this version serves.
bool known(channel x) noexcept;

/// The A1 `channels` byte of this version: every channel it serves.
std::uint8_t served_channels() noexcept;

/// Why a preamble failed.
enum class preamble_error : std::uint8_t {
  /// No failure.
  none = 0,
  /// The bytes are not dice's preamble (wrong magic, flags or reserved
  /// bytes): a stranger, another program, or a dice node of protocol v2.
  not_dice,
  /// The other side speaks another preamble version.
  version,
  /// The acceptor has a cluster secret, the dialer none.
  dialer_lacks_secret,
  /// The dialer has a cluster secret, the acceptor none.
  acceptor_lacks_secret,
  /// A MAC did not verify: the other side does not know this secret.
  bad_proof,
  /// The dialer asked for a channel the acceptor does not serve.
  unknown_channel,
};

/// A short description, e.g. "not dice's preamble".
const char* to_string(preamble_error x) noexcept;

/// What the driver does after feeding bytes.
enum class preamble_state : std::uint8_t {
  /// Send `take_output()`, then read `want()` more bytes.
  running,
  /// Send `take_output()`; the connection belongs to `chosen()`.
  done,
  /// Send `take_output()` (best effort: it may tell the other side why),
  /// then close.
  failed,
};

/// The accepting side of the preamble.
class preamble_acceptor {
 public:
  /// `secret` empty: none. `nonce`: `preamble_nonce_size` random bytes.
  preamble_acceptor(std::string secret, std::string nonce);

  /// Bytes to read before the next step (0 unless running). Reading more
  /// would take bytes that belong to the channel.
  std::size_t want() const noexcept;

  /// Consumes `size` bytes (at most `want()`; more is a driver bug and
  /// fails the preamble).
  preamble_state feed(const char* data, std::size_t size);

  /// Bytes to send now; empties the output.
  std::string take_output();

  /// Current state.
  preamble_state state() const noexcept {
    return state_;
  }

  /// Why it failed.
  preamble_error error() const noexcept {
    return error_;
  }

  /// The channel the dialer chose (valid once done).
  channel chosen() const noexcept {
    return channel_;
  }

  /// Both nonces, the dialer's first (valid once done): fresh on both sides,
  /// so a channel can bind its own proofs to this one connection.
  std::string binding() const;

 private:
  preamble_state fail(preamble_error why);
  preamble_state on_hello();
  preamble_state on_proof();

  std::string secret_;
  std::string nonce_;
  std::string dialer_hello_;
  std::string acceptor_hello_;
  std::string buf_;
  std::string out_;
  bool hello_done_ = false;
  preamble_state state_ = preamble_state::running;
  preamble_error error_ = preamble_error::none;
  channel channel_ = channel::control;
};

/// The dialing side of the preamble.
class preamble_dialer {
 public:
  /// `secret` empty: none. `nonce`: `preamble_nonce_size` random bytes.
  /// The output holds D1 at once.
  preamble_dialer(std::string secret, std::string nonce, channel ch);

  /// Bytes to read before the next step (0 unless running).
  std::size_t want() const noexcept;

  /// Consumes `size` bytes (at most `want()`).
  preamble_state feed(const char* data, std::size_t size);

  /// Bytes to send now; empties the output.
  std::string take_output();

  /// Current state.
  preamble_state state() const noexcept {
    return state_;
  }

  /// Why it failed.
  preamble_error error() const noexcept {
    return error_;
  }

  /// Both nonces, the dialer's first (valid once done; see the acceptor's).
  std::string binding() const;

 private:
  preamble_state fail(preamble_error why);
  preamble_state on_hello();

  std::string secret_;
  channel channel_;
  std::string dialer_hello_;
  std::string acceptor_hello_;
  std::string buf_;
  std::string out_;
  preamble_state state_ = preamble_state::running;
  preamble_error error_ = preamble_error::none;
};

/// A `dice::errc` error for a failed preamble, phrased for the dialer's log.
caf::error dialer_failure(preamble_error why);

} // namespace dice::net
