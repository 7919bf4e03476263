#include "net/data_wire.hpp"

#include <algorithm>
#include <cstring>

namespace dice::net {

namespace {

void put32(char* out, std::uint32_t x) {
  for (int i = 3; i >= 0; --i, x >>= 8)
    out[i] = static_cast<char>(x & 0xff);
}

void put64(char* out, std::uint64_t x) {
  for (int i = 7; i >= 0; --i, x >>= 8)
    out[i] = static_cast<char>(x & 0xff);
}

std::uint32_t get32(const char* in) {
  std::uint32_t x = 0;
  for (int i = 0; i < 4; ++i)
    x = (x << 8) | static_cast<std::uint8_t>(in[i]);
  return x;
}

std::uint64_t get64(const char* in) {
  std::uint64_t x = 0;
  for (int i = 0; i < 8; ++i)
    x = (x << 8) | static_cast<std::uint8_t>(in[i]);
  return x;
}

} // namespace

std::string encode_bind(const data_bind& x) {
  std::string out(data_bind_size, '\0');
  std::memcpy(out.data(), "DBND", 4);
  out[4] = static_cast<char>(x.direction);
  put32(out.data() + 8, x.node);
  std::memcpy(out.data() + 12, x.mac.data(),
              std::min(x.mac.size(), data_mac_size));
  return out;
}

std::optional<data_bind> decode_bind(const char* data, std::size_t size) {
  if (size != data_bind_size || std::memcmp(data, "DBND", 4) != 0
      || data[5] != 0 || data[6] != 0 || data[7] != 0)
    return std::nullopt;
  auto dir = static_cast<std::uint8_t>(data[4]);
  if (dir != data_dialer_writes && dir != data_acceptor_writes)
    return std::nullopt;
  data_bind x;
  x.direction = dir;
  x.node = get32(data + 8);
  x.mac.assign(data + 12, data_mac_size);
  return x;
}

std::string encode_ack(const std::string& mac) {
  std::string out(data_ack_size, '\0');
  std::memcpy(out.data(), "DACK", 4);
  std::memcpy(out.data() + 4, mac.data(), std::min(mac.size(), data_mac_size));
  return out;
}

std::optional<std::string> decode_ack(const char* data, std::size_t size) {
  if (size != data_ack_size || std::memcmp(data, "DACK", 4) != 0)
    return std::nullopt;
  return std::string{data + 4, data_mac_size};
}

std::array<char, data_header_size> encode_header(const data_header& x) {
  std::array<char, data_header_size> out{};
  std::memcpy(out.data(), "DXFR", 4);
  put32(out.data() + 4, x.tag);
  put64(out.data() + 8, x.id);
  put64(out.data() + 16, x.size);
  return out;
}

std::array<char, data_trailer_size> encode_trailer(std::uint64_t checksum) {
  std::array<char, data_trailer_size> out{};
  put64(out.data(), checksum);
  return out;
}

std::uint64_t decode_trailer(const char* data) {
  return get64(data);
}

std::optional<data_header> decode_header(const char* data, std::size_t size) {
  if (size != data_header_size || std::memcmp(data, "DXFR", 4) != 0)
    return std::nullopt;
  data_header x;
  x.tag = get32(data + 4);
  x.id = get64(data + 8);
  x.size = get64(data + 16);
  if (get64(data + 24) != 0)
    return std::nullopt; // reserved
  return x;
}

data_frame frame_kind(const char* data) {
  if (std::memcmp(data, "DXFR", 4) == 0)
    return data_frame::transfer;
  if (std::memcmp(data, "DPRB", 4) == 0)
    return data_frame::probe;
  if (std::memcmp(data, "DPOK", 4) == 0)
    return data_frame::probe_ok;
  if (std::memcmp(data, "DREF", 4) == 0)
    return data_frame::reference;
  if (std::memcmp(data, "DHDR", 4) == 0)
    return data_frame::header;
  if (std::memcmp(data, "DREL", 4) == 0)
    return data_frame::release;
  return data_frame::unknown;
}

std::array<char, data_header_size> encode_probe(const data_probe& x) {
  std::array<char, data_header_size> out{};
  std::memcpy(out.data(), "DPRB", 4);
  put32(out.data() + 8, x.pid);
  put32(out.data() + 12, x.fd);
  std::memcpy(out.data() + 16, x.token.data(),
              std::min<std::size_t>(16, x.token.size()));
  return out;
}

std::optional<data_probe> decode_probe(const char* data) {
  if (std::memcmp(data, "DPRB", 4) != 0 || get32(data + 4) != 0)
    return std::nullopt;
  data_probe x;
  x.pid = get32(data + 8);
  x.fd = get32(data + 12);
  x.token.assign(data + 16, 16);
  return x;
}

std::array<char, data_header_size> encode_probe_ok() {
  std::array<char, data_header_size> out{};
  std::memcpy(out.data(), "DPOK", 4);
  return out;
}

std::array<char, data_header_size> encode_ref(const data_ref& x) {
  std::array<char, data_header_size> out{};
  std::memcpy(out.data(), "DREF", 4);
  put32(out.data() + 4, x.fd);
  put64(out.data() + 8, x.id);
  put64(out.data() + 16, x.size);
  put64(out.data() + 24, x.tag);
  return out;
}

std::optional<data_ref> decode_ref(const char* data) {
  if (std::memcmp(data, "DREF", 4) != 0)
    return std::nullopt;
  data_ref x;
  x.fd = get32(data + 4);
  x.id = get64(data + 8);
  x.size = get64(data + 16);
  x.tag = get64(data + 24);
  return x;
}

std::array<char, data_header_size> encode_release(std::uint64_t id) {
  std::array<char, data_header_size> out{};
  std::memcpy(out.data(), "DREL", 4);
  put64(out.data() + 8, id);
  return out;
}

std::optional<std::uint64_t> decode_release(const char* data) {
  if (std::memcmp(data, "DREL", 4) != 0 || get32(data + 4) != 0)
    return std::nullopt;
  return get64(data + 8);
}

std::array<char, data_header_size> encode_meta_frame(const data_meta_frame& x) {
  std::array<char, data_header_size> out{};
  std::memcpy(out.data(), "DHDR", 4);
  put32(out.data() + 4, x.size);
  put64(out.data() + 8, x.order);
  put64(out.data() + 16, x.checksum);
  return out;
}

std::optional<data_meta_frame> decode_meta_frame(const char* data) {
  if (std::memcmp(data, "DHDR", 4) != 0 || get64(data + 24) != 0)
    return std::nullopt;
  data_meta_frame x;
  x.size = get32(data + 4);
  x.order = get64(data + 8);
  x.checksum = get64(data + 16);
  return x;
}

} // namespace dice::net
