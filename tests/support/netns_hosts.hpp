#pragma once

// Test hosts: N network namespaces behind a bridge, each link shaped to a
// rate (scripts/netns-hosts, which bench/run and docs/distributed.md use
// too), so a test runs dice's nodes as on N machines whose links, not
// their cores, limit a broadcast. Root only; tests skip with the reason
// otherwise.

#include "support/netns.hpp"
#include <unistd.h>

#include <sstream>
#include <string>
#include <vector>

namespace dice::test {

/// N hosts PREFIX-h0 .. on links of `rate` (tc units: "1gbit"), one-way
/// `delay` per end where the kernel has sch_netem (`latency_shaped()`
/// says). Deleted on destruction.
class netns_hosts {
 public:
  netns_hosts(int n, const std::string& rate, const std::string& delay = "")
    : n_(n) {
    if (::geteuid() != 0) {
      why_ = "not root: cannot create network namespaces";
      return;
    }
    if (!shell("command -v ip && command -v tc")) {
      why_ = "iproute2 ('ip', 'tc') is not installed";
      return;
    }
    prefix_ = "dice" + std::to_string(::getpid());
    script_ = std::string{DICE_SOURCE_DIR} + "/scripts/netns-hosts";
    auto out = shell(script_ + " up " + prefix_ + " " + std::to_string(n) + " "
                     + rate + " " + delay + " 2>&1");
    if (!out) {
      why_ = "scripts/netns-hosts up failed (no bridge or tbf in this "
             "kernel?)";
      return;
    }
    std::istringstream in{*out};
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream words{line};
      std::string tag;
      int i = 0;
      std::string ns;
      std::string addr;
      if (words >> tag && tag == "host" && words >> i >> ns >> addr) {
        namespaces_.push_back(ns);
        addresses_.push_back(addr);
      } else if (line.rfind("latency not shaped", 0) == 0) {
        latency_ = line;
      }
    }
    ok_ = static_cast<int>(namespaces_.size()) == n;
    if (!ok_)
      why_ = "scripts/netns-hosts printed no hosts: " + *out;
    else if (!delay.empty() && latency_.empty())
      latency_ = "latency shaped: " + delay + " each way per link end";
  }

  ~netns_hosts() {
    if (!prefix_.empty())
      shell(script_ + " down " + prefix_ + " " + std::to_string(n_));
  }

  netns_hosts(const netns_hosts&) = delete;
  netns_hosts& operator=(const netns_hosts&) = delete;

  /// True when every host and link is up.
  bool ok() const {
    return ok_;
  }

  /// Why not.
  const std::string& why() const {
    return why_;
  }

  /// "latency not shaped: no sch_netem", or what was shaped.
  const std::string& latency() const {
    return latency_;
  }

  /// Host i's namespace.
  const std::string& ns(int i) const {
    return namespaces_.at(static_cast<std::size_t>(i));
  }

  /// Host i's address.
  const std::string& address(int i) const {
    return addresses_.at(static_cast<std::size_t>(i));
  }

  /// `argv` run on host i.
  std::vector<std::string> exec_in(int i, std::vector<std::string> argv) const {
    argv.insert(argv.begin(), {"ip", "netns", "exec", ns(i)});
    return argv;
  }

 private:
  int n_;
  std::string prefix_;
  std::string script_;
  std::vector<std::string> namespaces_;
  std::vector<std::string> addresses_;
  std::string latency_;
  bool ok_ = false;
  std::string why_;
};

} // namespace dice::test
