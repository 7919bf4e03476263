#include "net/listener.hpp"

#include "dice/core/errc.hpp"
#include "dice/logging/log.hpp"
#include "dice/security/auth.hpp"
#include "dice/security/trust.hpp"
#include "net/socket.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <vector>

namespace dice::net {

namespace {

using clock_type = std::chrono::steady_clock;

// One log line per reason for the first refusal and every 1024th after it:
// a stranger hammering the port must not flood the log.
void note_refusal(std::uint32_t node, trust_event ev, const std::string& what) {
  count(ev);
  if (counter(ev) % 1024 == 1)
    log::warning(node, what);
}

// At most this many accepts between two polls of the pending connections,
// so that a burst of strangers cannot evict a dialer whose hello is already
// in its socket before the listener read it.
constexpr int accept_batch = 16;

} // namespace

/// A connection in the preamble.
struct listener::pending_conn {
  unique_fd fd;
  std::string peer;
  clock_type::time_point deadline;
  preamble_acceptor hs;
  std::string out;
  /// Preamble bytes read so far.
  std::size_t received = 0;
  /// When its whole hello (D1) had arrived (epoch: not yet).
  clock_type::time_point hello_at{};
};

namespace {

// `fd` if it is a listening stream socket, made non-blocking and closed on
// exec (the node's own children must not inherit it); owned from then on.
// Refused, it stays the caller's.
caf::expected<unique_fd> adopt_listening(int fd) {
  int accepting = 0;
  int type = 0;
  socklen_t len = sizeof(int);
  socklen_t len2 = sizeof(int);
  if (::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &accepting, &len) != 0
      || ::getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len2) != 0
      || accepting != 1 || type != SOCK_STREAM)
    return make_error(errc::invalid_config,
                      "fd " + std::to_string(fd)
                        + " is not a listening stream socket");
  auto flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0
      || ::fcntl(fd, F_SETFD, FD_CLOEXEC) != 0)
    return make_error(errc::invalid_config,
                      "cannot set up fd " + std::to_string(fd) + ": "
                        + std::strerror(errno));
  return unique_fd{fd};
}

} // namespace

caf::expected<std::unique_ptr<listener>> listener::open(listener_config cfg,
                                                        handover_fn fn) {
  auto fd = cfg.fd >= 0 ? adopt_listening(cfg.fd)
                        : listen_tcp(cfg.host, cfg.port);
  if (!fd)
    return fd.error();
  auto local = local_endpoint(fd->get());
  std::unique_ptr<listener> result{
    new listener(std::move(cfg), std::move(fn), std::move(*fd))};
  int wake[2];
  if (::pipe2(wake, O_CLOEXEC | O_NONBLOCK) != 0)
    return make_error(errc::unreachable,
                      "cannot create a pipe: "
                        + std::string{std::strerror(errno)});
  result->wake_read_.reset(wake[0]);
  result->wake_write_.reset(wake[1]);
  result->port_ = local.port;
  result->loopback_ = local.loopback;
  result->address_ = local.address;
  return result;
}

listener::listener(listener_config cfg, handover_fn fn, unique_fd fd)
  : cfg_(std::move(cfg)), fn_(std::move(fn)), fd_(std::move(fd)) {
  // nop
}

listener::~listener() {
  stop(); // the sockets close with their members, once the thread is gone
}

void listener::start() {
  if (!thread_.joinable())
    thread_ = std::thread{[this] {
      run();
    }};
}

void listener::stop() {
  std::lock_guard<std::mutex> guard{stop_mtx_};
  stop_ = true;
  if (wake_write_) {
    char c = 0;
    [[maybe_unused]] auto n = ::write(wake_write_.get(), &c, 1);
  }
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id())
    thread_.join();
}

bool listener::advance(pending_conn& c) {
  if (!c.out.empty()) {
    if (!send_some(c.fd.get(), c.out))
      return false;
  } else {
    char buf[128];
    auto want = std::min(c.hs.want(), sizeof(buf));
    auto n = ::recv(c.fd.get(), buf, want, 0);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
      log::debug(cfg_.node, "connection from {} closed during the preamble",
                 c.peer);
      return false;
    }
    if (n < 0)
      return true;
    c.hs.feed(buf, static_cast<std::size_t>(n));
    c.received += static_cast<std::size_t>(n);
    if (c.received == dialer_hello_size)
      c.hello_at = clock_type::now();
    c.out += c.hs.take_output();
    if (!c.out.empty() && !send_some(c.fd.get(), c.out))
      return false;
  }
  auto st = c.hs.state();
  if (st == preamble_state::failed) {
    auto why = c.hs.error();
    auto ev = why == preamble_error::bad_proof
        || why == preamble_error::dialer_lacks_secret
      ? trust_event::auth_refused
      : trust_event::preamble_rejected;
    note_refusal(cfg_.node, ev,
                 "refused a connection from " + c.peer + ": " + to_string(why));
    // The reply (the reason) is best effort; close at once.
    return false;
  }
  if (st == preamble_state::done && c.out.empty()) {
    log::debug(cfg_.node, "connection from {} passed the preamble", c.peer);
    fn_(std::move(c.fd), c.hs.chosen(), c.peer, c.hs.binding());
    return false;
  }
  return true;
}

std::size_t listener::victim(const std::deque<pending_conn>& conns) {
  // A genuine dialer sends its whole 40-byte hello in one segment as soon
  // as it is connected, and its proof one round trip after our hello: a
  // connection without a whole hello is worth least (silent, or trickling
  // it as a slowloris does), and of those the oldest has had the longest
  // time to send it. Only if every one sent its hello does the one that
  // has owed its proof the longest go. Once its hello is read, a dialer
  // is thus evicted only by strangers that send whole hellos faster than
  // it answers one round trip, no longer by any that merely connect.
  std::size_t best = 0;
  auto best_hello = clock_type::time_point::max();
  for (std::size_t i = 0; i < conns.size(); ++i) {
    auto& c = conns[i];
    if (c.hello_at == clock_type::time_point{})
      return i; // conns are oldest first
    if (c.hello_at < best_hello) {
      best = i;
      best_hello = c.hello_at;
    }
  }
  return best;
}

void listener::run() {
  // Named for top -H and for the fairness test's CPU figure.
  ::pthread_setname_np(::pthread_self(), "dice-listener");
  // This thread's random generator seeds itself on first use, and the
  // process's first HMAC loads OpenSSL's provider (about 1 ms): both now,
  // not while the first dialer waits for our hello.
  random_nonce(preamble_nonce_size);
  hmac_sha256(cfg_.secret.empty() ? std::string{"dice"} : cfg_.secret, "warm");
  std::deque<pending_conn> conns; // oldest first
  // Erasing a connection closes its socket (unless it was handed over).
  auto close_conn = [&](std::size_t i) {
    conns.erase(conns.begin() + static_cast<std::ptrdiff_t>(i));
  };
  auto timeout = std::chrono::duration_cast<clock_type::duration>(
    cfg_.handshake_timeout);
  std::vector<pollfd> fds;
  // Out of file descriptors the listening socket stays readable: accepting
  // pauses briefly instead of spinning.
  auto accept_paused_until = clock_type::time_point{};
  while (!stop_) {
    pending_ = conns.size();
    fds.clear();
    fds.push_back(pollfd{wake_read_.get(), POLLIN, 0});
    auto paused = clock_type::now() < accept_paused_until;
    fds.push_back(
      pollfd{fd_.get(), static_cast<short>(paused ? 0 : POLLIN), 0});
    for (auto& c : conns)
      fds.push_back(pollfd{
        c.fd.get(), static_cast<short>(c.out.empty() ? POLLIN : POLLOUT), 0});
    int wait_ms = -1;
    if (!conns.empty()) {
      auto first = std::min_element(conns.begin(), conns.end(),
                                    [](auto& x, auto& y) {
                                      return x.deadline < y.deadline;
                                    });
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        first->deadline - clock_type::now());
      // Round up, so a wake-up never comes before the deadline.
      wait_ms = static_cast<int>(std::max<long long>(0, left.count() + 1));
    }
    if (paused) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                    accept_paused_until - clock_type::now())
                    .count()
        + 1;
      wait_ms = wait_ms < 0 ? static_cast<int>(left)
                            : std::min(wait_ms, static_cast<int>(left));
    }
    if (::poll(fds.data(), fds.size(), wait_ms) < 0 && errno != EINTR)
      break;
    if (stop_)
      break;
    if (fds[0].revents != 0) {
      char buf[64];
      while (::read(wake_read_.get(), buf, sizeof(buf)) > 0)
        ; // drain
    }
    // Work on the connections polled above (accepted ones come after).
    auto now = clock_type::now();
    std::vector<std::size_t> gone;
    for (std::size_t i = 0; i < conns.size(); ++i) {
      auto& c = conns[i];
      if (c.deadline <= now) {
        note_refusal(cfg_.node, trust_event::preamble_timeout,
                     "closed a connection from " + c.peer
                       + ": no dice preamble within the time limit");
        gone.push_back(i);
      } else if (fds[i + 2].revents != 0 && !advance(c)) {
        gone.push_back(i);
      }
    }
    for (auto i = gone.rbegin(); i != gone.rend(); ++i)
      close_conn(*i);
    if (fds[1].revents == 0)
      continue;
    for (int batch = 0; batch < accept_batch; ++batch) {
      auto x = accept_nonblocking(fd_.get());
      if (!x) {
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS
            || errno == ENOMEM) {
          log::warning(cfg_.node,
                       std::string{"cannot accept: "} + std::strerror(errno)
                         + "; pausing for 100 ms");
          accept_paused_until = clock_type::now()
            + std::chrono::milliseconds{100};
        }
        break;
      }
      if (cfg_.max_pending > 0 && conns.size() >= cfg_.max_pending) {
        auto i = victim(conns);
        // What the victim sent since the last poll is still unread: a
        // dialer whose hello or proof just arrived would be cut for bytes
        // it sent in time. Read it first (a few times, the cost bounded);
        // one that moved on is spared, one that finished frees its slot.
        for (int look = 0; look < 4; ++look) {
          auto had = conns[i].received;
          if (!advance(conns[i]))
            close_conn(i);
          else if (conns[i].received == had)
            break;
          if (conns.size() < cfg_.max_pending)
            break;
          i = victim(conns);
        }
      }
      if (cfg_.max_pending > 0 && conns.size() >= cfg_.max_pending) {
        auto i = victim(conns);
        note_refusal(cfg_.node, trust_event::pending_evicted,
                     "too many connections in the preamble ("
                       + std::to_string(conns.size()) + "): closed "
                       + (conns[i].hello_at == clock_type::time_point{}
                            ? "the oldest without a hello"
                            : "the one owing its proof the longest")
                       + ", from " + conns[i].peer);
        close_conn(i);
      }
      conns.push_back(pending_conn{
        std::move(x->fd),
        std::move(x->peer),
        clock_type::now() + timeout,
        preamble_acceptor{cfg_.secret, random_nonce(preamble_nonce_size)},
        {}});
      // The dialer sends its hello right after connecting: it is often
      // here already, which saves a round through poll.
      if (!advance(conns.back()))
        close_conn(conns.size() - 1);
    }
  }
  conns.clear(); // closes the connections still in the preamble
  pending_ = 0;
}

} // namespace dice::net
