#include "dice/runtime/stop_signals.hpp"

#include "dice/logging/log.hpp"
#include "dice/messages/finish.hpp"

#include "caf/send.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <list>
#include <mutex>
#include <string>
#include <thread>

namespace dice {

namespace {

// Written by the handler: lock-free atomics and a pipe only.
std::atomic<int> first_signal{0};
std::atomic<int> signals_seen{0};
int pipe_write = -1;

void on_signal(int sig) {
  if (signals_seen.fetch_add(1) == 0) {
    first_signal.store(sig);
    char c = static_cast<char>(sig);
    auto saved = errno;
    [[maybe_unused]] auto n = ::write(pipe_write, &c, 1);
    errno = saved;
    return;
  }
  // The second signal: what the process did before dice handled it.
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

struct registry {
  std::mutex mtx;
  std::list<std::function<void(int)>> callbacks;
  bool fired = false;

  void fire(int sig) {
    std::list<std::function<void(int)>> copy;
    {
      std::lock_guard<std::mutex> guard{mtx};
      fired = true;
      copy = callbacks;
    }
    for (auto& fn : copy)
      fn(sig);
  }
};

registry& the_registry() {
  static registry r;
  return r;
}

void install_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) {
      log::error(
        0, std::string{"cannot watch SIGINT/SIGTERM: "} + std::strerror(errno));
      return;
    }
    pipe_write = fds[1];
    // The watcher lives as long as the process; it blocks in read().
    std::thread{[fd = fds[0]] {
      char c = 0;
      for (;;) {
        auto n = ::read(fd, &c, 1);
        if (n == 1)
          break;
        if (n < 0 && errno == EINTR)
          continue;
        return;
      }
      // Each run logs it under its own node id (finish_on_stop_signal);
      // this thread does not know which nodes the process runs.
      the_registry().fire(static_cast<unsigned char>(c));
    }}.detach();
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    ::sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    ::sigaction(SIGINT, &sa, nullptr);
    ::sigaction(SIGTERM, &sa, nullptr);
  });
}

} // namespace

std::shared_ptr<void> on_stop_signal(std::function<void(int)> fn) {
  install_once();
  auto& r = the_registry();
  std::list<std::function<void(int)>>::iterator it;
  bool fired = false;
  {
    std::lock_guard<std::mutex> guard{r.mtx};
    fired = r.fired;
    it = r.callbacks.insert(r.callbacks.end(), fn);
  }
  // A signal that came before this run registered still stops it.
  if (fired)
    fn(first_signal.load());
  return std::shared_ptr<void>(nullptr, [it](void*) {
    auto& reg = the_registry();
    std::lock_guard<std::mutex> guard{reg.mtx};
    reg.callbacks.erase(it);
  });
}

std::shared_ptr<void> finish_on_stop_signal(const caf::actor& to,
                                            std::uint32_t node) {
  return on_stop_signal([to, node](int sig) {
    log::info(node,
              std::string{"received SIG"} + ::sigabbrev_np(sig)
                + ": stopping the run (a second signal ends the "
                  "process at once)");
    caf::anon_send(
      to, finish{node, std::string{"SIG"} + ::sigabbrev_np(sig), false});
  });
}

int stop_signal_received() noexcept {
  return first_signal.load();
}

} // namespace dice
