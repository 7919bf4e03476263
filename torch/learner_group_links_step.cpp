// exchange_links::exchange: one step over the links, through shared memory
// to peers on this host (learner_group_shm.hpp) and over the sockets to the
// others (see learner_group_links.hpp for why).

#include "dice/core/errc.hpp"

#include "learner_group_io.hpp"
#include "learner_group_links.hpp"
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <climits>

namespace dice::detail {

using link_io::remaining_ms;

namespace {

using clock = std::chrono::steady_clock;

// After the last progress, the caller spins this long before it sleeps in
// poll(): a peer in step sends within microseconds, and waking a sleeping
// thread costs more than that on this VM (docs/learner_group.md).
constexpr auto spin = std::chrono::microseconds{50};

struct message_header {
  std::uint64_t step;
  std::uint64_t bytes;
};

} // namespace

caf::error exchange_links::exchange(const std::vector<iovec>& out,
                                    std::size_t bytes,
                                    const std::vector<char*>& in,
                                    std::chrono::milliseconds timeout,
                                    const std::string& where) {
  auto step = step_++;
  // Peers on this host: written first (it never blocks), read last.
  auto by_memory = [&](int p) {
    return shm_[static_cast<std::size_t>(p)] != nullptr
      && bytes <= shm_link::capacity;
  };
  auto size = static_cast<int>(fds_.size());
  for (int p = 0; p < size; ++p)
    if (p != rank_ && by_memory(p)
        && !shm_[static_cast<std::size_t>(p)]->write(
          step, out, bytes, fds_[static_cast<std::size_t>(p)]))
      return make_error(errc::unreachable,
                        where + ": gradient exchange failed: rank "
                          + std::to_string(p) + " closed the link");
  if (auto err = exchange_sockets(step, out, bytes, in, timeout, where,
                                  by_memory))
    return err;
  for (int p = 0; p < size; ++p)
    if (p != rank_ && by_memory(p))
      if (auto err = shm_[static_cast<std::size_t>(p)]->read(
            step, in[static_cast<std::size_t>(p)], bytes,
            fds_[static_cast<std::size_t>(p)], spin, timeout, shut_,
            where + ": gradient exchange: rank " + std::to_string(p)))
        return err;
  return caf::none;
}

template <class ByMemory>
caf::error exchange_links::exchange_sockets(
  std::uint64_t step, const std::vector<iovec>& out, std::size_t bytes,
  const std::vector<char*>& in, std::chrono::milliseconds timeout,
  const std::string& where, ByMemory by_memory) {
  message_header header{step, bytes};
  auto total = sizeof(header) + bytes;
  struct progress {
    int rank;
    std::size_t sent = 0;
    std::size_t got = 0;
    message_header header{};
  };
  std::vector<progress> peers;
  // Rank order after this one, so that not every rank writes to 0 first.
  auto size = static_cast<int>(fds_.size());
  for (int j = 1; j < size; ++j)
    if (!by_memory((rank_ + j) % size))
      peers.push_back(progress{(rank_ + j) % size});
  std::vector<iovec> iov;
  iov.reserve(out.size() + 1);
  auto broken = [&](int p, const char* what) {
    return make_error(errc::unreachable,
                      where + ": gradient exchange failed: rank "
                        + std::to_string(p) + " " + what);
  };
  auto last_progress = clock::now();
  std::size_t done = 0;
  std::vector<pollfd> waits;
  while (done < peers.size()) {
    bool moved = false;
    done = 0;
    for (auto& pr : peers) {
      auto fd = fds_[static_cast<std::size_t>(pr.rank)];
      if (pr.sent < total) {
        // The header, then `out`, from byte `sent` on.
        iov.clear();
        iov.push_back(iovec{&header, sizeof(header)});
        iov.insert(iov.end(), out.begin(), out.end());
        auto skip = pr.sent;
        std::size_t first = 0;
        while (skip >= iov[first].iov_len)
          skip -= iov[first++].iov_len;
        iov[first].iov_base = static_cast<char*>(iov[first].iov_base) + skip;
        iov[first].iov_len -= skip;
        msghdr msg{};
        msg.msg_iov = iov.data() + first;
        msg.msg_iovlen = std::min<std::size_t>(iov.size() - first, IOV_MAX);
        auto k = ::sendmsg(fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (k > 0) {
          pr.sent += static_cast<std::size_t>(k);
          moved = true;
        } else if (k < 0 && errno != EAGAIN && errno != EINTR) {
          return broken(pr.rank, "closed the link");
        }
      }
      if (pr.got < total) {
        auto hdr = sizeof(pr.header);
        auto dst = pr.got < hdr
          ? reinterpret_cast<char*>(&pr.header) + pr.got
          : in[static_cast<std::size_t>(pr.rank)] + (pr.got - hdr);
        auto want = pr.got < hdr ? hdr - pr.got : total - pr.got;
        auto k = ::recv(fd, dst, want, MSG_DONTWAIT);
        if (k == 0)
          return broken(pr.rank, "closed the link");
        if (k > 0) {
          pr.got += static_cast<std::size_t>(k);
          moved = true;
          if (pr.got == hdr
              && (pr.header.step != step || pr.header.bytes != bytes))
            return make_error(
              errc::model_mismatch,
              where + ": gradient exchange: rank " + std::to_string(pr.rank)
                + " sent step " + std::to_string(pr.header.step) + " of "
                + std::to_string(pr.header.bytes) + " bytes, expected step "
                + std::to_string(step) + " of " + std::to_string(bytes));
        } else if (errno != EAGAIN && errno != EINTR) {
          return broken(pr.rank, "closed the link");
        }
      }
      if (pr.sent == total && pr.got == total)
        ++done;
    }
    if (done == peers.size())
      break;
    auto now = clock::now();
    if (moved) {
      last_progress = now;
      continue;
    }
    if (shut_)
      return broken(peers.front().rank, "was shut down");
    if (now - last_progress < spin)
      continue;
    waits.clear();
    for (auto& pr : peers) {
      short ev = (pr.sent < total ? POLLOUT : 0)
        | (pr.got < total ? POLLIN : 0);
      if (ev != 0)
        waits.push_back(pollfd{fds_[static_cast<std::size_t>(pr.rank)], ev, 0});
    }
    auto left = last_progress + timeout;
    auto rc = ::poll(waits.data(), waits.size(), remaining_ms(left));
    if (rc == 0 && clock::now() >= left)
      return make_error(errc::timeout,
                        where + ": gradient exchange: no progress in "
                          + std::to_string(timeout.count()) + " ms");
  }
  return caf::none;
}

} // namespace dice::detail
