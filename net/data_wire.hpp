#pragma once

// Frames of a data connection after the preamble (net/data_plane.hpp).
// Integers big-endian, reserved bytes 0.
//
//   bind      44 B  "DBND" direction 0 0 0  node[4]  mac_d[32]    dialer
//   ack       36 B  "DACK" mac_a[32]                               acceptor
//   transfer  32 B  "DXFR" tag[4]  id[8]  size[8]  0[8]            writer
//             then `size` bytes, then checksum[8] of them (a trailer:
//             the writer hashes each piece as it writes it, v12)
//   probe     32 B  "DPRB" 0 0 0 0  pid[4]  fd[4]  token[16]     writer
//   probe ok  32 B  "DPOK" 0...                                   writer
//   reference 32 B  "DREF" fd[4]  id[8]  size[8]  tag[8]          writer
//   release   32 B  "DREL" 0 0 0 0  id[8]  0...                   writer
//   header    32 B  "DHDR" size[4]  order[8]  checksum[8]  0[8]  writer
//             then `size` bytes: the snapshot header (net/data_meta.hpp)
//             of the transfer or reference that follows at once (v14)
//
// Same host (net/data_shm.hpp): each writer opens with a probe (a memfd of
// its process holding a token); a reader that can read the token through
// /proc/PID/fd/N answers "probe ok" on its own writer, and from then on the
// other side sends references to sealed memfd segments instead of bodies;
// each reference is answered with a release once read.
//
// A header frame carries what the BASP reference carries (topic, sender,
// the snapshot without its bytes) and `order`: how many messages the
// writer's router had sent to the reader's over BASP before this snapshot's
// reference. The reader's router routes the snapshot when its bytes arrive
// if it has handled that many from the peer (nothing sent before it is
// still on its way); else the reference places it, as before v14.
//
// A transfer's tag is 0, or a relay round (actors/router_relay.cpp): the
// receiver claims tagged bytes by (sender, tag) instead of by id.
//
// direction 0: the dialer writes transfers, the acceptor reads them;
// direction 1: the other way round. mac_d and mac_a prove the control
// session (net/data_auth.hpp). A bad bind is answered by closing (no ack,
// no byte at all); a bad ack makes the dialer close.

#include <array>
#include <cstdint>
#include <optional>
#include <string>

namespace dice::net {

/// Length of the MACs in the bind and the ack.
inline constexpr std::size_t data_mac_size = 32;

/// Sizes of the frames.
inline constexpr std::size_t data_bind_size = 44;
inline constexpr std::size_t data_ack_size = 36;
inline constexpr std::size_t data_header_size = 32;
inline constexpr std::size_t data_trailer_size = 8;

/// Direction byte of a bind: who writes transfers on the connection.
inline constexpr std::uint8_t data_dialer_writes = 0;
inline constexpr std::uint8_t data_acceptor_writes = 1;

/// A decoded bind frame.
struct data_bind {
  /// Who writes (data_dialer_writes or data_acceptor_writes).
  std::uint8_t direction = 0;
  /// The dialer's node id.
  std::uint32_t node = 0;
  /// The dialer's proof (net/data_auth.hpp).
  std::string mac;
};

/// Encodes a bind frame (`mac` must be `data_mac_size` bytes).
std::string encode_bind(const data_bind& x);

/// Decodes a bind frame; nullopt if malformed.
std::optional<data_bind> decode_bind(const char* data, std::size_t size);

/// The acceptor's ack carrying its proof `mac` (`data_mac_size` bytes).
std::string encode_ack(const std::string& mac);

/// The proof in an ack; nullopt if malformed.
std::optional<std::string> decode_ack(const char* data, std::size_t size);

/// A decoded transfer header.
struct data_header {
  /// Transfer id (increasing per sending node).
  std::uint64_t id = 0;
  /// Bytes that follow (then the trailer).
  std::uint64_t size = 0;
  /// 0, or the relay round the bytes belong to.
  std::uint32_t tag = 0;
};

/// Encodes a transfer header.
std::array<char, data_header_size> encode_header(const data_header& x);

/// Decodes a transfer header; nullopt if malformed.
std::optional<data_header> decode_header(const char* data, std::size_t size);

/// The trailer after a transfer's bytes: their checksum64.
std::array<char, data_trailer_size> encode_trailer(std::uint64_t checksum);

/// The checksum in a trailer (`data_trailer_size` bytes).
std::uint64_t decode_trailer(const char* data);

/// What a 32-byte frame is, by its magic.
enum class data_frame : std::uint8_t {
  transfer,
  probe,
  probe_ok,
  reference,
  release,
  header,
  unknown,
};

/// The kind of the frame at `data` (`data_header_size` bytes).
data_frame frame_kind(const char* data);

/// A same-host probe.
struct data_probe {
  std::uint32_t pid = 0;
  std::uint32_t fd = 0;
  /// 16 bytes.
  std::string token;
};

/// A reference to a sealed segment of the writer's process.
struct data_ref {
  std::uint32_t fd = 0;
  std::uint64_t id = 0;
  std::uint64_t size = 0;
  std::uint64_t tag = 0;
};

/// Encoders and decoders of the same-host frames (decoders: nullopt if
/// malformed).
std::array<char, data_header_size> encode_probe(const data_probe& x);
std::optional<data_probe> decode_probe(const char* data);
std::array<char, data_header_size> encode_probe_ok();
std::array<char, data_header_size> encode_ref(const data_ref& x);
std::optional<data_ref> decode_ref(const char* data);
std::array<char, data_header_size> encode_release(std::uint64_t id);
std::optional<std::uint64_t> decode_release(const char* data);

/// A header frame: the snapshot header's size, its checksum64 and the
/// sender's BASP count (see above).
struct data_meta_frame {
  std::uint32_t size = 0;
  std::uint64_t order = 0;
  std::uint64_t checksum = 0;
};

/// Encoders and decoders of the header frame (nullopt if malformed).
std::array<char, data_header_size> encode_meta_frame(const data_meta_frame& x);
std::optional<data_meta_frame> decode_meta_frame(const char* data);

} // namespace dice::net
