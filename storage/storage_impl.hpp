// Internal to storage: what the format (storage.cpp), the file store
// (storage_file.cpp) and the shared-memory store (storage_shm.cpp) share.
#pragma once

#include "dice/core/errc.hpp"
#include "dice/messages/detail/snapshot_chunk.hpp"
#include "dice/process/unique_fd.hpp"
#include "dice/security/auth.hpp"
#include "dice/security/trust.hpp"
#include "dice/storage/storage.hpp"
#include "storage/fd_io.hpp"

#include "caf/binary_deserializer.hpp"
#include "caf/binary_serializer.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <random>

namespace dice::storage_detail {

using dice::sys_error;
const std::string& own_tag();
std::string unique_name(const storage_options& opts, const char* suffix);
// Bytes written or read per system call on the storage paths: hashed just
// before (or after) the copy, so the checksum reads them from cache.
inline constexpr std::size_t io_block = 256 * 1024;

caf::error write_parts(int fd, const std::vector<byte_span>& parts,
                       std::uint64_t& checksum);
std::uint64_t checksum_of(const std::vector<byte_span>& parts);
caf::error bad(const storage_ref& ref, const std::string& why);
caf::error open_storage(const storage_ref& ref, unique_fd& fd,
                        std::size_t& size, struct stat* st = nullptr);
caf::error read_at(const storage_ref& ref, int fd, std::size_t pos,
                   std::uint8_t* out, std::size_t n, checksum64_stream* sum);

// Shared-memory items of at least this size are copied through mappings
// (smaller ones with pwrite/pread: a mapping costs more than it saves).
inline constexpr std::size_t map_min = 256 * 1024;
// Copies n bytes and feeds `sum` (if any) the copy (`dst`), so what is
// verified is what is returned. False if the mapping was truncated under
// the copy (SIGBUS).
bool copy_guarded(std::uint8_t* dst, const std::uint8_t* src, std::size_t n,
                  checksum64_stream* sum);
// Copies n bytes and sets `digest` to checksum64(dst, n, seed) in the same
// pass (copy_hash); false if the mapping was truncated under the copy.
bool copy_hash_guarded(std::uint8_t* dst, const std::uint8_t* src,
                       std::size_t n, std::uint64_t seed,
                       std::uint64_t& digest);
// A read-only view of a shared-memory segment: `handle` keeps it mapped.
struct item_view {
  std::shared_ptr<const void> handle;
  const std::uint8_t* addr = nullptr;
};
// A view of the segment open as `fd` (`st` its fstat), kept for later loads
// of the same segment; empty for small items or when it cannot be mapped.
item_view map_view(int fd, const struct stat& st);
// Reads n bytes at `pos` through `view` if there is one (copy, then hash
// the copy), else with pread.
caf::error read_part(const storage_ref& ref, int fd, const item_view& view,
                     std::size_t pos, std::uint8_t* out, std::size_t n,
                     checksum64_stream* sum);
// read_part of a whole hashed part: `digest` is checksum64(out, n, seed),
// computed while copying from a view.
caf::error read_part_hashed(const storage_ref& ref, int fd,
                            const item_view& view, std::size_t pos,
                            std::uint8_t* out, std::size_t n,
                            std::uint64_t seed, std::uint64_t& digest);
bool recycle_shm(const storage_ref& ref);
caf::expected<storage_ref> store_shm(const storage_options& opts,
                                     const std::vector<byte_span>& parts,
                                     std::size_t total);

} // namespace dice::storage_detail
