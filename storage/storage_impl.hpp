// Internal to storage: what the format (storage.cpp), the file store
// (storage_file.cpp) and the shared-memory store (storage_shm.cpp) share.
#pragma once

#include "dice/core/errc.hpp"
#include "dice/messages/snapshot_chunk.hpp"
#include "dice/security/trust.hpp"
#include "dice/storage/fd_io.hpp"
#include "dice/storage/storage.hpp"

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
caf::error open_storage(const storage_ref& ref, int& fd, std::size_t& size);
caf::error read_at(const storage_ref& ref, int fd, std::size_t pos,
                   std::uint8_t* out, std::size_t n, checksum64_stream* sum);
bool recycle_shm(const storage_ref& ref);
caf::expected<storage_ref> store_shm(const storage_options& opts,
                                     const std::vector<byte_span>& parts,
                                     std::size_t total);

} // namespace dice::storage_detail
