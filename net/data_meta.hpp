#pragma once

// A data-plane snapshot's header (topic, sender, the snapshot without its
// bytes), sent on the data connection just before the bytes (a "DHDR"
// frame, net/data_wire.hpp), so the receiving router can route the snapshot
// when its bytes arrive instead of waiting for the BASP reference
// (actors/router_data.cpp says when it may).
//
// Own codec, not CAF's: a reader thread decodes it from a peer, and CAF
// 0.17's binary_deserializer sizes a string from the count it reads
// (`resize(count)`) before it checks the bytes left. Here every length and
// count is checked against the bytes left first, so a decode takes memory
// in proportion to its input. Integers big-endian:
//
//   topic_len[4] topic  sender[4]  snapshot.sender[4]  incarnation[8]
//   version[8]  send_time_ns[8]  entries[4]  then per entry:
//   name_len[4] name  dtype[1]  ndim[4]  dims[8 x ndim]  offset[8]  nbytes[8]

#include "dice/messages/model_snapshot.hpp"

#include "caf/expected.hpp"

#include <cstdint>
#include <string>

namespace dice::net {

/// The most bytes a snapshot header may take on the wire.
inline constexpr std::size_t max_data_meta_bytes = std::size_t{4} << 20;

/// A decoded header: the snapshot's `data` is empty.
struct data_meta {
  std::string topic;
  std::uint32_t sender = 0;
  model_snapshot header;
};

/// Encodes `x`'s topic, sender and snapshot (its bytes left out).
std::string encode_meta(const std::string& topic, std::uint32_t sender,
                        const model_snapshot& x);

/// Decodes a header; a malformed one (cut short, a length past the end,
/// bytes left over, an unknown dtype) is an error.
caf::expected<data_meta> decode_meta(const char* data, std::size_t size);

} // namespace dice::net
