// Internal to the context spool: the on-disk format (file header, records,
// names) that its writer (context_spool.cpp) and its replay
// (context_spool_replay.cpp) share.
#pragma once

#include "dice/core/errc.hpp"
#include "dice/logging/log.hpp"
#include "dice/messages/detail/snapshot_chunk.hpp"
#include "storage/context_spool.hpp"
#include "storage/fd_io.hpp"

#include "caf/binary_deserializer.hpp"
#include "caf/binary_serializer.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <system_error>
#include <utility>

namespace dice::spool_detail {

inline constexpr char spool_magic[8] = {'D', 'I', 'C', 'E', 'S', 'P', 'L', '1'};
inline constexpr const char* spool_prefix = "dice-spool.";

// magic(8) | node(4) | zero(4) | incarnation(8) | checksum of the 24 bytes
// before.
inline constexpr std::size_t header_size = 32;
// kind(4) | zero(4) | length(8) | checksum(8), then `length` payload bytes.
inline constexpr std::size_t record_head = 24;

inline constexpr std::uint32_t kind_delta = 1;
inline constexpr std::uint32_t kind_settled = 2;

template <class T>
inline void put(std::vector<char>& buf, T x) {
  char tmp[sizeof(T)];
  std::memcpy(tmp, &x, sizeof(T));
  buf.insert(buf.end(), tmp, tmp + sizeof(T));
}

template <class T>
inline T get(const char* p) {
  T x;
  std::memcpy(&x, p, sizeof(T));
  return x;
}

// "dice-spool.<node>.<16 hex incarnation>.<segment>"
struct spool_name {
  std::uint32_t node = 0;
  std::uint64_t incarnation = 0;
  std::uint64_t segment = 0;
};

using dice::sys_error;
std::string incarnation_hex(std::uint64_t incarnation);
std::optional<spool_name> parse_name(const std::string& name);
caf::error write_all(int fd, const char* p, std::size_t n,
                     const std::string& path);
std::vector<char> file_header(std::uint32_t node, std::uint64_t incarnation,
                              const std::string& key);
// The record's checksum covers its kind and length too: a torn or
// overwritten head is caught like a torn payload. Under a key it is a MAC
// (the first 8 bytes of an HMAC-SHA256), so a forged record is caught too.
std::uint64_t record_checksum(const std::string& key, const char* head,
                              const char* payload, std::size_t n);

} // namespace dice::spool_detail
