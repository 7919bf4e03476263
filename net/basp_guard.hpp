#pragma once

// What a connection that passed dice's preamble may still send BASP.
//
// The preamble keeps strangers out, but whoever holds the secret (a member
// that is compromised or buggy) speaks BASP to CAF 0.17.6 directly, and two
// of BASP's frames hurt a node without TLS (read in libcaf_io/src/io/basp/
// header.cpp, instance.cpp and stream.cpp at tag 0.17.6):
// - a handshake header with no payload passes CAF's `valid(header)`, and
//   `instance::handle` then dereferences the payload it never got: SIGSEGV;
// - a header's payload_len is trusted: the broker configures an exact read
//   of that many bytes and the stream resizes its buffer to it at once, so
//   two 32-byte headers announcing 1 GiB took a learner from 206 MB to
//   1,214 MB.
// The guard sits in dice's scribes, between the socket and the broker: it
// sees every frame the broker asked for (a 32-byte header, then exactly
// payload_len bytes) before CAF does, and refuses a header CAF would
// mishandle or whose payload is above dice's bound. The connection is then
// closed as if it had failed; nothing of the frame reaches CAF.

#include <cstddef>
#include <cstdint>
#include <string>

namespace dice::net {

/// The bound on one BASP payload unless configured (dice.max-basp-payload):
/// snapshots cross BASP in chunks of 8 MB; context deltas cross whole when
/// there is no data connection.
inline constexpr std::uint32_t default_max_basp_payload = std::uint32_t{256}
  << 20;

/// Follows one connection's BASP frames (header, then payload) and refuses
/// the headers CAF 0.17.6 would crash or over-allocate on.
class basp_guard {
 public:
  /// Refuses payloads above `max_payload` bytes.
  explicit basp_guard(std::uint32_t max_payload = default_max_basp_payload)
    : max_payload_(max_payload) {}

  /// Checks the next `n` bytes the broker is about to consume; empty if they
  /// may pass, else why not (the connection must then be closed).
  std::string check(const void* buf, std::size_t n);

  /// Frames that passed (headers and payloads).
  std::uint64_t frames() const noexcept {
    return frames_;
  }

 private:
  std::uint32_t max_payload_;
  // Bytes of the payload the last header announced; 0: a header is next.
  std::uint32_t payload_due_ = 0;
  std::uint64_t frames_ = 0;
};

} // namespace dice::net
