#pragma once

// Whole-buffer reads and writes on a file descriptor: the loop around short
// transfers and EINTR that storage, the spool and shared memory all need.

#include <sys/types.h>

#include <cstddef>
#include <string>

namespace dice {

/// Writes all `n` bytes at the file position; false on error (errno set).
bool write_all(int fd, const void* data, std::size_t n);

/// Writes all `n` bytes at offset `at`; false on error (errno set).
bool pwrite_all(int fd, const void* data, std::size_t n, off_t at);

/// Reads exactly `n` bytes at offset `at`; false at end of file or on error.
bool pread_all(int fd, void* data, std::size_t n, off_t at);

/// "`what`: <strerror(errno)>", for the error a failed call above leaves.
std::string sys_error(const std::string& what);

} // namespace dice
