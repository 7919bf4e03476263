#include "dice/process/fork_server.hpp"

#include "process/pipe.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace dice::process {

namespace {

// A request: NUL-terminated strings (death signal, number of environment
// entries, the entries, then argv) and 2 or 3 fds (stdout, stderr, the fd
// that becomes 3). The answer: the node's pid, or -errno.
constexpr std::size_t max_request = 1 << 16;

struct request {
  int death_signal = 0;
  std::vector<std::string> env;
  std::vector<std::string> argv;
  // What the launcher sends: its fds, still its own (sendmsg copies them).
  std::vector<int> fds;
};

bool send_request(int sock, const request& req) {
  std::string body = std::to_string(req.death_signal) + '\0'
    + std::to_string(req.env.size()) + '\0';
  for (auto* list : {&req.env, &req.argv})
    for (auto& s : *list)
      body += s + '\0';
  if (body.size() > max_request)
    return false;
  iovec iov{body.data(), body.size()};
  char cbuf[CMSG_SPACE(3 * sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = cbuf;
  msg.msg_controllen = CMSG_SPACE(req.fds.size() * sizeof(int));
  auto* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(req.fds.size() * sizeof(int));
  std::memcpy(CMSG_DATA(c), req.fds.data(), req.fds.size() * sizeof(int));
  return ::sendmsg(sock, &msg, MSG_NOSIGNAL)
    == static_cast<ssize_t>(body.size());
}

// False when the launcher is gone (or sent garbage: the server stops). The
// fds that came with it are the server's copies, owned in `fds`.
bool receive_request(int sock, request& req, std::vector<unique_fd>& fds) {
  std::vector<char> body(max_request);
  iovec iov{body.data(), body.size()};
  char cbuf[CMSG_SPACE(3 * sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = cbuf;
  msg.msg_controllen = sizeof(cbuf);
  ssize_t n;
  do
    n = ::recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
  while (n < 0 && errno == EINTR);
  if (n <= 0)
    return false;
  for (auto* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c))
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
      auto k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      std::vector<int> raw(k);
      std::memcpy(raw.data(), CMSG_DATA(c), k * sizeof(int));
      for (auto fd : raw)
        fds.emplace_back(fd);
    }
  std::vector<std::string> parts;
  std::size_t start = 0;
  for (std::size_t i = 0; i < static_cast<std::size_t>(n); ++i)
    if (body[i] == '\0') {
      parts.emplace_back(body.data() + start, i - start);
      start = i + 1;
    }
  if (parts.size() < 3 || fds.size() < 2 || fds.size() > 3)
    return false;
  req.death_signal = std::atoi(parts[0].c_str());
  auto n_env = static_cast<std::size_t>(std::atol(parts[1].c_str()));
  if (parts.size() < 3 + n_env)
    return false;
  req.env.assign(parts.begin() + 2, parts.begin() + 2 + n_env);
  req.argv.assign(parts.begin() + 2 + n_env, parts.end());
  return true;
}

// In the forked node: waits until the launcher is its parent (the middle
// process is gone), sets the death signal, and takes over the fds.
void become_node(const request& req, std::vector<unique_fd>& fds, pid_t middle,
                 pid_t launcher) {
  // The middle process exits right after the fork: once its pidfd reports
  // that, the kernel has already handed us to the subreaper.
  unique_fd pfd{static_cast<int>(::syscall(SYS_pidfd_open, middle, 0))};
  if (pfd) {
    pollfd p{pfd.get(), POLLIN, 0};
    while (::poll(&p, 1, 10000) < 0 && errno == EINTR) {
    }
    pfd.reset();
  }
  if (req.death_signal != 0)
    ::prctl(PR_SET_PDEATHSIG, req.death_signal);
  if (::getppid() != launcher)
    _exit(127); // the launcher is gone, or is not our subreaper
  ::dup2(fds[0].get(), STDOUT_FILENO);
  ::dup2(fds[1].get(), STDERR_FILENO);
  // fd 3 was the server's socket: the passed fd replaces it, or it goes.
  // Closed by number: the server never owned it as a unique_fd (it lives
  // as long as the server), and the node must not inherit it.
  if (fds.size() == 3)
    ::dup2(fds[2].get(), 3);
  else
    ::close(3);
  // The received copies go; one that already is fd 0-3 is the node's now.
  for (auto& fd : fds)
    if (fd.get() > 3)
      fd.reset();
    else
      (void)fd.release();
  for (auto& e : req.env) {
    auto eq = e.find('=');
    if (eq != std::string::npos)
      ::setenv(e.substr(0, eq).c_str(), e.c_str() + eq + 1, 1);
  }
}

} // namespace

void serve_forks_if_asked(int& argc, char**& argv) {
  auto v = std::getenv(fork_server_env);
  if (v == nullptr)
    return;
  int sock = std::atoi(v);
  ::unsetenv(fork_server_env);
  pid_t launcher = ::getppid();
  char ready = 'R';
  if (::send(sock, &ready, 1, MSG_NOSIGNAL) != 1)
    _exit(1);
  for (;;) {
    request req;
    std::vector<unique_fd> fds;
    if (!receive_request(sock, req, fds))
      _exit(0);
    owned_pipe report;
    std::int32_t answer = 0;
    if (!open_pipe(report)) {
      answer = -errno;
    } else if (auto middle = ::fork(); middle == 0) {
      auto self = ::getpid();
      auto node = ::fork();
      if (node == 0) {
        report.read.reset();
        report.write.reset();
        ::setpgid(0, 0);
        become_node(req, fds, self, launcher);
        static std::vector<std::string> args;
        static std::vector<char*> ptrs;
        args = req.argv;
        for (auto& a : args)
          ptrs.push_back(a.data());
        ptrs.push_back(nullptr);
        argc = static_cast<int>(args.size());
        argv = ptrs.data();
        return;
      }
      // Its own group before the launcher learns the pid (both sides set
      // it: no race with a signal the launcher sends right after).
      if (node > 0)
        ::setpgid(node, node);
      std::int32_t x = node > 0 ? node : -errno;
      [[maybe_unused]] auto w = ::write(report.write.get(), &x, sizeof(x));
      _exit(0);
    } else if (middle < 0) {
      answer = -errno;
      report.read.reset();
      report.write.reset();
    } else {
      report.write.reset();
      if (::read(report.read.get(), &answer, sizeof(answer)) != sizeof(answer))
        answer = -ECHILD;
      report.read.reset();
      ::waitpid(middle, nullptr, 0);
    }
    // The node has its copies: the server's go before the launcher learns
    // the answer.
    fds.clear();
    if (::send(sock, &answer, sizeof(answer), MSG_NOSIGNAL) != sizeof(answer))
      _exit(0);
  }
}

std::optional<fork_client>
fork_client::start(const std::string& program,
                   std::chrono::milliseconds timeout) {
  int sv_raw[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv_raw) != 0)
    return std::nullopt;
  unique_fd ours{sv_raw[0]};
  unique_fd theirs{sv_raw[1]};
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  spawn_options opts;
  opts.argv = {program};
  opts.env = {std::string{fork_server_env} + "=3"};
  opts.output = capture::none;
  opts.death_signal = SIGTERM;
  opts.new_process_group = true;
  opts.pass_fd = theirs.get();
  auto c = spawn(opts);
  theirs.reset();
  fork_client result;
  result.fd_ = std::move(ours);
  result.pid_ = c.pid;
  if (c.pid < 0) {
    result.stop();
    return std::nullopt;
  }
  pollfd p{result.fd_.get(), POLLIN, 0};
  char ready = 0;
  int r;
  while ((r = ::poll(&p, 1, static_cast<int>(timeout.count()))) < 0
         && errno == EINTR) {
  }
  if (r != 1 || ::recv(result.fd_.get(), &ready, 1, 0) != 1 || ready != 'R') {
    ::kill(c.pid, SIGKILL);
    result.stop();
    return std::nullopt;
  }
  return result;
}

child fork_client::fork(const spawn_options& opts) {
  child result;
  // The pipe ends still owned here close on return: all of them on
  // failure, the write ends on success (the node has its copies).
  owned_pipe out;
  owned_pipe err;
  auto fail = [&](int code) {
    result = child{};
    result.error = code;
    return std::move(result);
  };
  if (!fd_ || opts.argv.empty())
    return fail(EINVAL);
  if (!open_pipe(out) || !open_pipe(err))
    return fail(errno);
  request req;
  req.death_signal = opts.death_signal;
  req.env = opts.env;
  req.argv = opts.argv;
  req.fds = {out.write.get(), err.write.get()};
  if (opts.pass_fd >= 0)
    req.fds.push_back(opts.pass_fd);
  if (!send_request(fd_.get(), req))
    return fail(EPIPE);
  std::int32_t answer = 0;
  pollfd p{fd_.get(), POLLIN, 0};
  int r;
  while ((r = ::poll(&p, 1, 10000)) < 0 && errno == EINTR) {
  }
  if (r != 1 || ::recv(fd_.get(), &answer, sizeof(answer), 0) != sizeof(answer))
    return fail(EPIPE);
  if (answer <= 0)
    return fail(-answer);
  result.pid = answer;
  result.out = std::move(out.read);
  result.err = std::move(err.read);
  return result;
}

void fork_client::stop() {
  fd_.reset(); // the server sees EOF and exits
  if (pid_ > 0) {
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
}

} // namespace dice::process
