#pragma once

// The TCP sockets a process listens on (the kernel's list of listeners,
// matched with the process's fds in /proc), for the learner-group tests that
// check what a forming group exposes.

#include <arpa/inet.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <set>
#include <string>
#include <tuple>
#include <vector>

namespace dice::test {

/// One listening socket.
struct listener {
  /// "127.0.0.1", "0.0.0.0", "::", "::1", ... (v4-mapped v6 as v4).
  std::string address;
  std::uint16_t port = 0;
  std::uint64_t inode = 0;

  bool wildcard() const {
    return address == "0.0.0.0" || address == "::";
  }

  std::string text() const {
    return address + ":" + std::to_string(port);
  }

  bool operator<(const listener& x) const {
    return std::tie(inode, address, port)
      < std::tie(x.inode, x.address, x.port);
  }
};

/// Socket inodes among `pid`'s open fds ("self" for this process).
inline std::set<std::uint64_t> socket_inodes(const std::string& pid) {
  std::set<std::uint64_t> result;
  std::error_code ec;
  for (auto& e :
       std::filesystem::directory_iterator{"/proc/" + pid + "/fd", ec}) {
    auto target = std::filesystem::read_symlink(e.path(), ec);
    auto s = target.string();
    if (ec || s.rfind("socket:[", 0) != 0)
      continue;
    result.insert(std::stoull(s.substr(8, s.size() - 9)));
  }
  return result;
}

/// Every TCP socket listening in this network namespace now (any
/// process's), asked from the kernel with sock_diag as `ss -ltn` does:
/// /proc/net/tcp lists every socket (tens of thousands in TIME_WAIT on a
/// busy test machine, 40 ms a read), too slow to see a short-lived one.
inline std::vector<listener> listening_sockets() {
  std::vector<listener> result;
  for (int family : {AF_INET, AF_INET6}) {
    int fd = ::socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
    if (fd < 0)
      return result;
    struct {
      nlmsghdr nlh;
      inet_diag_req_v2 req;
    } msg{};
    msg.nlh.nlmsg_len = sizeof(msg);
    msg.nlh.nlmsg_type = SOCK_DIAG_BY_FAMILY;
    msg.nlh.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
    msg.req.sdiag_family = static_cast<std::uint8_t>(family);
    msg.req.sdiag_protocol = IPPROTO_TCP;
    msg.req.idiag_states = 1u << 10; // TCP_LISTEN
    if (::send(fd, &msg, sizeof(msg), 0) < 0) {
      ::close(fd);
      return result;
    }
    alignas(nlmsghdr) char buf[32768];
    bool done = false;
    while (!done) {
      auto n = ::recv(fd, buf, sizeof(buf), 0);
      if (n <= 0)
        break;
      auto len = static_cast<unsigned>(n);
      for (auto* h = reinterpret_cast<nlmsghdr*>(buf); NLMSG_OK(h, len);
           h = NLMSG_NEXT(h, len)) {
        if (h->nlmsg_type == NLMSG_DONE || h->nlmsg_type == NLMSG_ERROR) {
          done = true;
          break;
        }
        auto* d = static_cast<inet_diag_msg*>(NLMSG_DATA(h));
        listener x;
        x.port = ntohs(d->id.idiag_sport);
        x.inode = d->idiag_inode;
        char text[INET6_ADDRSTRLEN] = {};
        ::inet_ntop(family, d->id.idiag_src, text, sizeof(text));
        x.address = text;
        if (x.address.rfind("::ffff:", 0) == 0)
          x.address = x.address.substr(7); // v4-mapped
        result.push_back(x);
      }
    }
    ::close(fd);
  }
  return result;
}

/// The TCP sockets `pid` listens on now.
inline std::vector<listener> listeners_of(const std::string& pid) {
  auto all = listening_sockets();
  // The tables list the whole network namespace: keep this process's.
  auto mine = socket_inodes(pid);
  std::vector<listener> result;
  for (auto& x : all)
    if (mine.count(x.inode) > 0)
      result.push_back(x);
  return result;
}

} // namespace dice::test
