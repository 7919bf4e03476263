#pragma once

// Deadline-bound I/O on the exchange links' nonblocking sockets, shared by
// the links (learner_group_links.cpp, which defines them) and the
// shared-memory offers that travel over them (learner_group_shm.cpp).

#include <chrono>
#include <cstddef>

namespace dice::detail::link_io {

/// Milliseconds left until `deadline` (0 once past), for poll().
int remaining_ms(std::chrono::steady_clock::time_point deadline);

/// Waits until `fd` is ready for `events` or `deadline` passes.
bool wait_for(int fd, short events,
              std::chrono::steady_clock::time_point deadline);

/// Reads or writes exactly `n` bytes of a nonblocking socket by `deadline`.
bool io_all(int fd, void* p, std::size_t n, bool write,
            std::chrono::steady_clock::time_point deadline);

} // namespace dice::detail::link_io
