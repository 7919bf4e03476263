#include "net/basp_guard.hpp"

#include "caf/io/basp/header.hpp"
#include "caf/io/basp/message_type.hpp"

namespace dice::net {

namespace {

using caf::io::basp::message_type;

std::uint32_t be32(const unsigned char* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16)
    | (std::uint32_t{p[2]} << 8) | std::uint32_t{p[3]};
}

std::uint64_t be64(const unsigned char* p) {
  return (std::uint64_t{be32(p)} << 32) | be32(p + 4);
}

} // namespace

std::string basp_guard::check(const void* buf, std::size_t n) {
  auto p = static_cast<const unsigned char*>(buf);
  if (payload_due_ > 0) {
    // BASP reads a payload with receive_policy::exactly(payload_len).
    if (n != payload_due_)
      return "a payload of " + std::to_string(n) + " bytes where the header "
        + "announced " + std::to_string(payload_due_);
    payload_due_ = 0;
    ++frames_;
    return {};
  }
  if (n != caf::io::basp::header_size)
    return "a header of " + std::to_string(n) + " bytes";
  // The serialized header (big-endian): operation, two padding bytes, flags,
  // payload_len (4), operation_data (8), source_actor (8), dest_actor (8).
  auto op = p[0];
  auto payload_len = be32(p + 4);
  auto operation_data = be64(p + 8);
  auto source = be64(p + 16);
  auto dest = be64(p + 24);
  switch (static_cast<message_type>(op)) {
    case message_type::server_handshake:
    case message_type::client_handshake:
      // CAF's valid() lets these through without a payload, and handling
      // them then reads the missing payload.
      if (payload_len == 0)
        return "a handshake without a payload";
      break;
    case message_type::direct_message:
    case message_type::routed_message:
      if (dest == 0 || payload_len == 0)
        return "a message without a receiver or payload";
      break;
    case message_type::monitor_message:
    case message_type::down_message:
      if (payload_len == 0 || operation_data != 0)
        return "a malformed monitor or down message";
      break;
    case message_type::heartbeat:
      if (payload_len != 0 || operation_data != 0 || source != 0 || dest != 0)
        return "a malformed heartbeat";
      break;
    default: return "unknown operation " + std::to_string(op);
  }
  if (payload_len > max_payload_)
    return "a payload of " + std::to_string(payload_len)
      + " bytes announced, more than the " + std::to_string(max_payload_)
      + " allowed (dice.max-basp-payload)";
  payload_due_ = payload_len;
  if (payload_len == 0)
    ++frames_;
  return {};
}

} // namespace dice::net
