// The "dice" options of a node's actor system config (node_system_config):
// what `--help` lists and make_node_config (node_config.cpp) reads.
#include "dice/runtime/node_config.hpp"
#include "dice/type_ids.hpp"

#include "caf/io/middleman.hpp"
#include "caf/openssl/manager.hpp"

#include <chrono>

namespace dice {

node_system_config::node_system_config() {
  load<caf::io::middleman>();
  // TLS is used only when openssl.certificate/key/cafile are set (and
  // checked by make_node_config); loading the module costs nothing else.
  load<caf::openssl::manager>();
  dice::add_message_types(*this);
  // CAF leaves heartbeats off: a hung peer would never be noticed. These
  // find one in about a second (research/caf_probe.md §3); the command line
  // may override them.
  set("middleman.heartbeat-interval",
      caf::timespan{std::chrono::milliseconds{200}});
  set("middleman.connection-timeout",
      caf::timespan{std::chrono::milliseconds{1500}});
  opt_group{custom_options_, "dice"}
    .add(node_id, "node-id", "this node's id (default: 0, or SLURM_PROCID)")
    .add(workers, "workers", "nodes in the cluster")
    .add(learners, "learners",
         "learner nodes (0..L-1) forming one data-parallel group (1)")
    .add(roles, "roles", "roles, e.g. learner (default: by node id)")
    .add(host, "host", "address to listen on (default: all)")
    .add(port, "port", "port to listen on (0: any free port)")
    .add(listen_fd, "listen-fd",
         "listen on this inherited socket instead of binding host:port "
         "(dice-launch passes 3)")
    .add(attach_to, "attach-to", "peers to attach to: host:port,...")
    .add(nodes, "nodes", "addresses of all nodes in order: host:port,...")
    .add(topology, "topology",
         "alone, star or mesh over dice.nodes (default: alone; mesh under "
         "SLURM)")
    .add(min_peers, "min-peers", "peers to wait for before starting")
    .add(start_timeout, "start-timeout", "longest wait for min-peers")
    .add(peer_loss_timeout, "peer-loss-timeout",
         "stop after having no peer for this long")
    .add(connect_timeout, "connect-timeout", "deadline of one connect")
    .add(handshake_timeout, "handshake-timeout",
         "close an accepted connection that has not finished dice's "
         "preamble by then")
    .add(max_pending, "max-pending",
         "most accepted connections in the preamble at once")
    .add(max_basp_payload, "max-basp-payload",
         "largest BASP payload (bytes) a peer may announce; a larger one "
         "closes its connection")
    .add(insecure, "insecure",
         "listen beyond loopback with neither secret nor TLS (anyone who "
         "reaches the port may join)")
    .add(data_channel, "data-channel",
         "send large snapshots to peers on data connections beside BASP "
         "(false: BASP only)")
    .add(relay, "relay",
         "in a mesh, send large snapshots to 3 or more remote peers down a "
         "relay tree of them, each byte leaving this node about once: auto "
         "(whichever this node measures faster), true or false (one copy "
         "per peer)")
    .add(coalesce, "coalesce",
         "send forwards that queue for a peer while the router is busy as "
         "one message (false: one BASP message each)")
    .add(secret_file, "secret-file",
         "file with the cluster secret (peers must know it)")
    .add(deterministic, "deterministic",
         "embedded runs: one thread, fixed order, virtual clock (reproducible)")
    .add(max_restarts, "max-restarts",
         "start a role actor whose middleware threw again, this many times")
    .add(spool_dir, "spool-dir",
         "collectors spool unacknowledged context deltas here; a restarted "
         "collector republishes them (empty: no spool)")
    .add(spool_fsync, "spool-fsync",
         "flush every spool write to disk (power loss; kill -9 needs none)")
    .add(role_nice, "role-nice",
         "nice value added to each role actor's thread (and the LibTorch "
         "threads it starts), so the router and I/O threads answer while "
         "it trains (0: unchanged; default 5)")
    .add(cpu_latency_us, "cpu-latency-us",
         "hold a PM QoS request that idle CPUs wake within this many us "
         "while the node runs (0: they poll instead of halting; for the "
         "whole machine; needs write access to /dev/cpu_dma_latency; -1: "
         "none, the default)");
}

} // namespace dice
