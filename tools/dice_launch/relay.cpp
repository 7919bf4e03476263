// dice-launch's output relay: each node's lines with a "[node ID] " prefix,
// its port announcement and the end of the run read on the way.
#include "launch.hpp"

namespace dice_launch {

namespace {

void write_all(int fd, const std::string& str) {
  std::size_t done = 0;
  while (done < str.size()) {
    auto n = ::write(fd, str.data() + done, str.size() - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return;
    done += static_cast<std::size_t>(n);
  }
}

// Prints complete lines of `buf` with the node prefix; scans stdout lines
// for the port announcement.
void flush_lines(child& c, std::string& buf, int fd, bool final) {
  std::size_t pos = 0;
  for (;;) {
    auto nl = buf.find('\n', pos);
    if (nl == std::string::npos)
      break;
    auto line = buf.substr(pos, nl - pos);
    pos = nl + 1;
    if (!finish_seen
        && line.find("] run finished by node ") != std::string::npos)
      finish_seen = true;
    if (fd == STDOUT_FILENO && c.port == 0) {
      auto tag = "dice-node " + std::to_string(c.id) + " listening on port ";
      auto at = line.find(tag);
      if (at != std::string::npos)
        c.port = static_cast<std::uint16_t>(
          std::atoi(line.c_str() + at + tag.size()));
    }
    write_all(fd, "[node " + std::to_string(c.id) + "] " + line + "\n");
  }
  buf.erase(0, pos);
  if (final && !buf.empty()) {
    write_all(fd, "[node " + std::to_string(c.id) + "] " + buf + "\n");
    buf.clear();
  }
}

} // namespace

// Reads what is available from every child for at most `timeout_ms`.
void pump(std::vector<child>& children, int timeout_ms) {
  std::vector<pollfd> fds;
  std::vector<std::pair<std::size_t, bool>> who;
  for (std::size_t i = 0; i < children.size(); ++i) {
    auto& c = children[i];
    if (c.out_fd) {
      fds.push_back(pollfd{c.out_fd.get(), POLLIN, 0});
      who.emplace_back(i, true);
    }
    if (c.err_fd) {
      fds.push_back(pollfd{c.err_fd.get(), POLLIN, 0});
      who.emplace_back(i, false);
    }
  }
  if (fds.empty()) {
    ::poll(nullptr, 0, timeout_ms);
    return;
  }
  if (::poll(fds.data(), fds.size(), timeout_ms) <= 0)
    return;
  char buf[65536];
  for (std::size_t k = 0; k < fds.size(); ++k) {
    if (fds[k].revents == 0)
      continue;
    auto& c = children[who[k].first];
    auto is_out = who[k].second;
    auto& fd = is_out ? c.out_fd : c.err_fd;
    auto& acc = is_out ? c.out_buf : c.err_buf;
    auto n = ::read(fd.get(), buf, sizeof(buf));
    if (n > 0) {
      acc.append(buf, static_cast<std::size_t>(n));
      flush_lines(c, acc, is_out ? STDOUT_FILENO : STDERR_FILENO, false);
    } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
      flush_lines(c, acc, is_out ? STDOUT_FILENO : STDERR_FILENO, true);
      fd.reset();
    }
  }
}

// Reads what is left in a dead node's pipes (non-blocking) and closes them.
void drain(child& c) {
  char buf[65536];
  for (auto* fd : {&c.out_fd, &c.err_fd}) {
    if (!*fd)
      continue;
    auto is_out = fd == &c.out_fd;
    auto& acc = is_out ? c.out_buf : c.err_buf;
    ::fcntl(fd->get(), F_SETFL, ::fcntl(fd->get(), F_GETFL) | O_NONBLOCK);
    for (;;) {
      auto n = ::read(fd->get(), buf, sizeof(buf));
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        break;
      acc.append(buf, static_cast<std::size_t>(n));
    }
    flush_lines(c, acc, is_out ? STDOUT_FILENO : STDERR_FILENO, true);
    fd->reset();
  }
}

} // namespace dice_launch
