#pragma once

// What remote_bench's modes share (main.cpp says what each mode does): the
// options, the nodes' settings and the collector processes.

#include "dice/messages/model_snapshot.hpp"
#include "dice/runtime/node.hpp"

#include "caf/actor_system_config.hpp"
#include "caf/scoped_actor.hpp"

#include "bench_options.hpp"
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace dice::bench::remote {

using clk = std::chrono::steady_clock;
using namespace std::chrono_literals;

/// --tls DIR (empty: no TLS).
extern std::string tls_dir;

/// --coalesce 0|1: routers batch forwards that queue for a peer (default 1).
extern bool coalesce;

/// --idle-poll 0|1: CAF's idle workers poll before they wait (1, default:
/// CAF's defaults), or wait on their condition variable at once (0: as
/// dice::rl::run_config sets them for RL nodes).
extern bool idle_poll;

/// The options after the mode (main.cpp parses them).
extern dice::bench::option_values given;

/// The value of `--name`, or `fallback`.
inline std::string arg(const std::string& name, const std::string& fallback) {
  return given.text(name, fallback);
}

/// The number after `--name`, or `fallback`.
inline long num(const std::string& name, long fallback) {
  return given.integer(name, fallback);
}

using dice::bench::print_json;

/// `d` in seconds.
inline double secs(clk::duration d) {
  return std::chrono::duration<double>(d).count();
}

/// An actor system with the middleman, OpenSSL (with --tls) and dice's types.
struct config : caf::actor_system_config {
  config();
};

/// Settings of a bench node on loopback.
dice::node_config node_settings(std::uint32_t id, bool listen,
                                const std::string& path);

/// This process's dice node as dice runs it (dialer, preamble, data plane
/// unless `path` is "basp"; the same-host shortcut only for "shm"): the
/// learner listens on an ephemeral port behind dice's listener, a collector
/// attaches. Every node mode starts its node here; none if it failed.
std::optional<dice::node> start_node(caf::actor_system& sys, std::uint32_t id,
                                     bool listen, const std::string& path);

/// The command line of collector `node` (1-based): this program in
/// collector mode with the learner's `port` and the bench's own options.
std::vector<std::string> collector_argv(int argc, char** argv,
                                        std::uint16_t port, long node);

/// Starts `n` collector processes (this binary, mode collector, with the
/// parent's options) that attach to `port`.
std::vector<pid_t> fork_collectors(int argc, char** argv, long n,
                                   std::uint16_t port);

/// Starts `n` collectors with the parent's options plus `extra` and waits up
/// to 30 s until `router` has them as peers; none (and none left running) if
/// they did not all come.
std::optional<std::vector<pid_t>>
start_collectors(caf::scoped_actor& self, const dice::router_actor& router,
                 int argc, char** argv, std::vector<std::string> extra, long n,
                 std::uint16_t port);

/// relay: the address of node `node` (0: the learner) from --hosts, or
/// 127.0.0.1.
std::string relay_host(long node);

/// Ends the collectors and waits for them.
void stop_all(const std::vector<pid_t>& pids);

/// Payload bytes over TCP (acked by the peer / received).
struct socket_bytes {
  std::uint64_t sent = 0;
  std::uint64_t received = 0;
};

/// The sum over this process's open TCP sockets (sockets.cpp).
socket_bytes tcp_bytes();

/// --ack socket, learner side: a loopback UDP socket the collectors' acks
/// come to (ack_socket.cpp).
class ack_receiver {
 public:
  /// Binds an ephemeral loopback port (port() is 0 if that failed).
  ack_receiver();
  ack_receiver(const ack_receiver&) = delete;
  ack_receiver& operator=(const ack_receiver&) = delete;
  ~ack_receiver();

  /// The port collectors send to.
  std::uint16_t port() const noexcept {
    return port_;
  }

  /// Waits for `n` acks of `version`; false on a timeout.
  bool wait(std::uint64_t version, long n, std::chrono::seconds within);

 private:
  void close();
  int fd_ = -1;
  std::uint16_t port_ = 0;
};

/// --ack socket, collector side: a UDP socket connected to the learner's
/// `port` (-1 on failure).
int ack_sender(std::uint16_t port);

/// Sends one ack {node, version} on `fd` (from ack_sender).
void send_ack(int fd, std::uint32_t node, std::uint64_t version);

/// A snapshot of one uint8 tensor of `size` bytes.
dice::model_snapshot make_snapshot(long size);

/// The modes: each returns the process's exit code; those that start
/// collectors pass `argv` (after the mode) on to them.
int tcp_main(long size, long rounds, long receivers);
int snapshot_main(int argc, char** argv);
int context_main(int argc, char** argv);
int collector_main();
int publisher_main();
int relay_main(int argc, char** argv);

} // namespace dice::bench::remote
