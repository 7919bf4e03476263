#pragma once

// Test hosts: two network namespaces joined by a veth pair, so a test runs
// dice's nodes as on two machines (root only; tests skip with the reason
// otherwise).

#include "support/child_process.hpp"
#include <unistd.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace dice::test {

/// Runs a shell command; returns its output, or nullopt if it failed or
/// took longer than 30 s.
inline std::optional<std::string> shell(const std::string& cmd) {
  dice::test::child_process p{{"/bin/sh", "-c", cmd}};
  auto rc = p.wait_exit(std::chrono::seconds{30});
  if (!rc || *rc != 0)
    return std::nullopt;
  return p.text();
}

/// Two network namespaces joined by a veth pair, 198.18.0.1/24 in the first
/// and 198.18.0.2/24 in the second (RFC 2544 benchmark space, assigned only
/// inside them, so no traffic leaves them). Deleted on destruction.
class netns_pair {
 public:
  netns_pair() {
    if (::geteuid() != 0) {
      why_ = "not root: cannot create network namespaces";
      return;
    }
    if (!shell("command -v ip")) {
      why_ = "iproute2 ('ip') is not installed";
      return;
    }
    auto id = std::to_string(::getpid());
    a_ = "dice-" + id + "-a";
    b_ = "dice-" + id + "-b";
    if (auto out = shell("ip netns add " + a_); !out) {
      why_ = "'ip netns add' failed (no permission?)";
      return;
    }
    created_a_ = true;
    if (!shell("ip netns add " + b_)) {
      why_ = "'ip netns add' failed for the second namespace";
      return;
    }
    created_b_ = true;
    for (auto& cmd :
         {"ip -n " + a_ + " link add dice0 type veth peer name dice1 netns "
            + b_,
          "ip -n " + a_ + " addr add 198.18.0.1/24 dev dice0",
          "ip -n " + b_ + " addr add 198.18.0.2/24 dev dice1",
          "ip -n " + a_ + " link set dice0 up",
          "ip -n " + b_ + " link set dice1 up",
          "ip -n " + a_ + " link set lo up",
          "ip -n " + b_ + " link set lo up"}) {
      if (!shell(cmd)) {
        why_ = "cannot set up the veth pair: '" + cmd + "' failed";
        return;
      }
    }
    ok_ = true;
  }

  ~netns_pair() {
    if (created_a_)
      shell("ip netns del " + a_);
    if (created_b_)
      shell("ip netns del " + b_);
  }

  /// True when both namespaces and the link are up.
  bool ok() const {
    return ok_;
  }

  /// Why not.
  const std::string& why() const {
    return why_;
  }

  /// `argv` run inside the first (0) or second (1) namespace.
  std::vector<std::string> exec_in(int which, std::vector<std::string> argv) {
    argv.insert(argv.begin(), {"ip", "netns", "exec", which == 0 ? a_ : b_});
    return argv;
  }

 private:
  std::string a_;
  std::string b_;
  bool created_a_ = false;
  bool created_b_ = false;
  bool ok_ = false;
  std::string why_;
};

} // namespace dice::test
