// The context spool's format: file names, headers, record checksums.
#include "dice/security/auth.hpp"

#include "context_spool_impl.hpp"

#include <cstring>
#include <initializer_list>
#include <string_view>

namespace dice::spool_detail {

std::string incarnation_hex(std::uint64_t incarnation) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx",
                static_cast<unsigned long long>(incarnation));
  return buf;
}

namespace {

bool parse_number(const std::string& str, int base, std::uint64_t max,
                  std::uint64_t& out) {
  if (str.empty() || str.size() > 20)
    return false;
  for (auto c : str)
    if (!(base == 16 ? std::isxdigit(static_cast<unsigned char>(c))
                     : std::isdigit(static_cast<unsigned char>(c))))
      return false;
  errno = 0;
  char* end = nullptr;
  auto x = std::strtoull(str.c_str(), &end, base);
  if (errno != 0 || *end != '\0' || x > max)
    return false;
  out = x;
  return true;
}

} // namespace

std::optional<spool_name> parse_name(const std::string& name) {
  if (name.rfind(spool_prefix, 0) != 0)
    return std::nullopt;
  auto rest = name.substr(std::strlen(spool_prefix));
  auto a = rest.find('.');
  auto b = a == std::string::npos ? a : rest.find('.', a + 1);
  if (b == std::string::npos || rest.find('.', b + 1) != std::string::npos)
    return std::nullopt;
  spool_name result;
  std::uint64_t node = 0;
  if (!parse_number(rest.substr(0, a), 10, 0xFFFFFFFFu, node) || b - a - 1 != 16
      || !parse_number(rest.substr(a + 1, 16), 16, ~std::uint64_t{0},
                       result.incarnation)
      || !parse_number(rest.substr(b + 1), 10, ~std::uint64_t{0} >> 1,
                       result.segment))
    return std::nullopt;
  result.node = static_cast<std::uint32_t>(node);
  return result;
}

caf::error write_all(int fd, const char* p, std::size_t n,
                     const std::string& path) {
  if (!dice::write_all(fd, p, n))
    return make_error(errc::storage_failed, sys_error("write " + path));
  return caf::none;
}

namespace {

std::uint64_t mac64(const std::string& key,
                    std::initializer_list<std::string_view> parts) {
  auto mac = hmac_sha256(key, parts);
  std::uint64_t x = 0;
  std::memcpy(&x, mac.data(), sizeof(x));
  return x;
}

} // namespace

std::vector<char> file_header(std::uint32_t node, std::uint64_t incarnation,
                              const std::string& key) {
  std::vector<char> buf{spool_magic, spool_magic + 8};
  put<std::uint32_t>(buf, node);
  put<std::uint32_t>(buf, 0);
  put<std::uint64_t>(buf, incarnation);
  put<std::uint64_t>(
    buf,
    key.empty() ? checksum64(buf.data(), buf.size())
                : mac64(key, {"dice-spool-header", {buf.data(), buf.size()}}));
  return buf;
}

std::uint64_t record_checksum(const std::string& key, const char* head,
                              const char* payload, std::size_t n) {
  if (key.empty())
    return checksum64(payload, n, checksum64(head, 16));
  return mac64(key, {"dice-spool-record", {head, 16}, {payload, n}});
}

} // namespace dice::spool_detail
