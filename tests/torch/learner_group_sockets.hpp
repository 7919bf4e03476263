#pragma once

// The TCP sockets a process listens on, read from /proc (its fds and its
// network namespace's tcp tables), for the learner-group tests that check
// what a forming group exposes.

#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

namespace dice::test {

/// One listening socket.
struct listener {
  /// "127.0.0.1", "0.0.0.0", "::", "::1" or the raw hex of another v6.
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

/// An address of /proc/net/tcp{,6} in words.
inline std::string proc_address(const std::string& hex) {
  if (hex.size() == 8) {
    auto x = static_cast<std::uint32_t>(std::stoul(hex, nullptr, 16));
    // Stored in host (little-endian) order.
    return std::to_string(x & 0xFF) + "." + std::to_string((x >> 8) & 0xFF)
      + "." + std::to_string((x >> 16) & 0xFF) + "."
      + std::to_string((x >> 24) & 0xFF);
  }
  if (hex == std::string(32, '0'))
    return "::";
  if (hex == "00000000000000000000000001000000")
    return "::1";
  if (hex.substr(0, 24) == "0000000000000000FFFF0000")
    return proc_address(hex.substr(24)); // v4-mapped
  return hex;
}

/// The TCP sockets `pid` listens on now.
inline std::vector<listener> listeners_of(const std::string& pid) {
  std::vector<listener> all;
  for (auto table : {"/net/tcp", "/net/tcp6"}) {
    std::ifstream f{"/proc/" + pid + table};
    std::string line;
    std::getline(f, line); // header
    while (std::getline(f, line)) {
      std::istringstream in{line};
      std::string sl, local, remote, st, queues, timer, retr, uid, timeout;
      std::uint64_t inode = 0;
      in >> sl >> local >> remote >> st >> queues >> timer >> retr >> uid
        >> timeout >> inode;
      if (st != "0A") // TCP_LISTEN
        continue;
      auto colon = local.find(':');
      listener x;
      x.address = proc_address(local.substr(0, colon));
      x.port = static_cast<std::uint16_t>(
        std::stoul(local.substr(colon + 1), nullptr, 16));
      x.inode = inode;
      all.push_back(x);
    }
  }
  // The tables list the whole network namespace: keep this process's.
  auto mine = socket_inodes(pid);
  std::vector<listener> result;
  for (auto& x : all)
    if (mine.count(x.inode) > 0)
      result.push_back(x);
  return result;
}

} // namespace dice::test
