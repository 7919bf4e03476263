#pragma once

#include "dice/actors/relay_mode.hpp"
#include "dice/actors/scheduling.hpp"
#include "dice/core/role.hpp"
#include "dice/security/auth.hpp"

#include "caf/actor_system_config.hpp"
#include "caf/expected.hpp"
#include "caf/timespan.hpp"

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dice {

/// Which peers a node attaches to (DI-engine's `--topology`).
enum class topology : std::uint8_t {
  /// Only the explicit attach-to list.
  alone,
  /// Everyone attaches to node 0.
  star,
  /// Each node attaches to every node before it.
  mesh,
};

/// "alone", "star" or "mesh".
const char* to_string(topology x) noexcept;

/// Parses "alone", "star" or "mesh".
caf::expected<topology> parse_topology(std::string_view str);

/// A peer address.
struct endpoint {
  /// Host name or address.
  std::string host;
  /// TCP port.
  std::uint16_t port = 0;
};

/// "host:port".
std::string to_string(const endpoint& x);

/// Parses "host:port" or "tcp://host:port".
caf::expected<endpoint> parse_endpoint(std::string_view str);

/// Parses a comma-separated list of endpoints (empty string: none).
caf::expected<std::vector<endpoint>> parse_endpoints(std::string_view str);

/// Roles by position, as DI-engine's examples assign them: 0 learner, 1
/// evaluator when the cluster has more than 2 nodes, the rest collectors.
/// With `learners` > 1: 0..learners-1 learners (a data-parallel group,
/// docs/learner_group.md), then the evaluator when nodes are left for
/// collectors too, then collectors.
role_set default_roles(std::uint32_t index, std::uint32_t workers,
                       std::uint32_t learners = 1);

/// The nodes that the node at `index` attaches to in `topo`, given the
/// addresses of all nodes in order (DI-engine: mesh `nodes[:i]`, star
/// `nodes[:min(1, i)]`, alone none).
std::vector<endpoint> topology_peers(topology topo, std::uint32_t index,
                                     const std::vector<endpoint>& nodes);

/// How many direct peers the node at `index` of `workers` nodes gets in
/// `topo` plus `extra` explicit ones: the default start barrier.
std::uint32_t expected_peers(topology topo, std::uint32_t index,
                             std::uint32_t workers, std::size_t extra);

/// Expands a SLURM host list such as "a,b[1-3,7],c" into host names.
caf::expected<std::vector<std::string>>
expand_slurm_hosts(std::string_view str);

/// Expands SLURM_TASKS_PER_NODE such as "2(x3),1" into one count per host.
caf::expected<std::vector<std::uint32_t>>
expand_slurm_tasks(std::string_view str);

/// Everything a node needs to know to join a cluster.
struct node_config {
  /// Node id (unique in the cluster).
  std::uint32_t id = 0;
  /// Position in the cluster (0..workers-1): picks default roles and peers.
  std::uint32_t index = 0;
  /// Nodes in the cluster.
  std::uint32_t workers = 1;
  /// Learner nodes (indices 0..learners-1): they form a data-parallel group.
  std::uint32_t learners = 1;
  /// Roles; empty picks `default_roles(index, workers, learners)`.
  role_set roles;
  /// Address to listen on ("" = every interface). A node that listens on
  /// more than loopback refuses to start with neither `secret` nor `tls`,
  /// unless `insecure`.
  std::string host;
  /// Port to listen on; 0 picks a free one (reported on stdout).
  std::uint16_t port = 0;
  /// Listen for peers at all.
  bool listen = true;
  /// Accept peers only once `node::run`'s role actor has joined the router
  /// (bound and listening from `node::start`: early peers wait in the
  /// backlog), so every peer's handshake lists this node's subscriptions and
  /// nothing a peer publishes when it starts misses them. dice::run sets it;
  /// off, `node::start` accepts at once (a node used without `run`).
  bool accept_once_running = false;
  /// An inherited listening socket to listen on instead of binding
  /// host:port (-1: bind); dice-launch passes one as fd 3.
  int listen_fd = -1;
  /// Peers to attach to, besides those the topology names.
  std::vector<endpoint> attach_to;
  /// Addresses of all nodes in order (when known: fixed ports, SLURM).
  std::vector<endpoint> nodes;
  /// Topology over `nodes`.
  topology topo = topology::alone;
  /// Start iterating once this many peers are connected (-1: by topology).
  std::int32_t min_peers = -1;
  /// Start anyway (with a warning) after waiting this long for peers.
  caf::timespan start_timeout = std::chrono::seconds{30};
  /// A node without peers for this long stops with an error.
  caf::timespan peer_loss_timeout = std::chrono::seconds{30};
  /// Deadline of one connection attempt.
  caf::timespan connect_timeout = std::chrono::seconds{2};
  /// An accepted connection that has not finished dice's preamble by then
  /// is closed (net/preamble.hpp).
  caf::timespan handshake_timeout = std::chrono::seconds{2};
  /// Most accepted connections in the preamble at once; a new one past it
  /// closes the oldest without a whole hello (net/listener.hpp).
  std::size_t max_pending = 64;
  /// Largest BASP payload a peer may announce; a larger announce closes its
  /// connection before CAF allocates it (net/basp_guard.hpp).
  std::uint32_t max_basp_payload = std::uint32_t{256} << 20;
  /// Listen on a non-loopback address with neither secret nor TLS (logged
  /// as a warning): anyone who reaches the port and speaks dice joins.
  bool insecure = false;
  /// Large snapshots to peers travel on data connections beside BASP
  /// (net/data_plane.hpp); false: BASP only, as before protocol v4.
  bool data_channel = true;
  /// Large snapshots for many remote peers go down a relay tree of them
  /// (actors/router_relay.cpp); only in a mesh, where members are
  /// connected to each other. Auto: the relay or one copy per peer,
  /// whichever this node measured faster.
  relay_mode relay = relay_mode::automatic;
  /// Forwards that queue for a peer go as one batch
  /// (router_config::coalesce).
  bool coalesce = true;
  /// A relay receiver that has not confirmed a round this long gets the
  /// bytes directly (router_config::relay_deadline).
  caf::timespan relay_deadline = std::chrono::seconds{5};
  /// Children per node of the relay tree (router_config::relay_fanout).
  std::size_t relay_fanout = 2;
  /// Part of a cluster (false: the embedded single-process mode).
  bool distributed = false;
  /// Cluster secret (empty: none); peers prove they know it before any
  /// data is exchanged.
  std::string secret;
  /// TLS certificate, key and CA (all empty: plain TCP).
  tls_files tls;
  /// Restarts of the role actor after a middleware threw
  /// (--dice.max-restarts; run_local takes it as local_run_options).
  std::int64_t max_restarts = 0;
  /// Restarts of this process so far: dice-launch --max-restarts sets
  /// DICE_RESTART_COUNT for a node it started again (0: first start).
  std::int64_t restart_count = 0;
  /// Directory where a collector spools the context deltas no learner has
  /// acknowledged, so that its next incarnation republishes them (empty:
  /// no spool; dice-launch --max-restarts gives each node one).
  std::string spool_dir;
  /// fdatasync every spool write (survives power loss, not only kill -9).
  bool spool_fsync = false;
  /// Nice value a detached role actor adds to its thread
  /// (role_config::thread_nice, --dice.role-nice).
  int role_nice = default_role_nice;
  /// A CPU latency request the node holds while it runs, in microseconds
  /// (runtime/cpu_latency.hpp, --dice.cpu-latency-us; -1: none). 0 keeps
  /// idle CPUs polling instead of halting, for the whole machine.
  std::int32_t cpu_latency_us = -1;
};

/// An actor system config with the node settings as options (group
/// "dice", e.g. `--dice.node-id=1 --dice.attach-to=host:port`), the
/// middleman loaded and heartbeats on (CAF leaves them off, so a hung peer
/// would go unnoticed). Programs derive their config from it.
class node_system_config : public caf::actor_system_config {
 public:
  node_system_config();

  /// dice.node-id (-1: not set).
  std::int64_t node_id = -1;
  /// dice.workers (0: not set).
  std::size_t workers = 0;
  /// dice.learners: learner nodes forming one data-parallel group.
  std::size_t learners = 1;
  /// dice.roles ("": by node id).
  std::string roles;
  /// dice.host.
  std::string host;
  /// dice.port.
  std::uint16_t port = 0;
  /// dice.listen-fd (-1: bind dice.host:dice.port).
  std::int64_t listen_fd = -1;
  /// dice.attach-to.
  std::string attach_to;
  /// dice.nodes.
  std::string nodes;
  /// dice.topology ("": alone, or mesh under SLURM, so `srun PROGRAM`
  /// needs no flags).
  std::string topology;
  /// dice.min-peers.
  std::int64_t min_peers = -1;
  /// dice.start-timeout.
  caf::timespan start_timeout = std::chrono::seconds{30};
  /// dice.peer-loss-timeout.
  caf::timespan peer_loss_timeout = std::chrono::seconds{30};
  /// dice.connect-timeout.
  caf::timespan connect_timeout = std::chrono::seconds{2};
  /// dice.handshake-timeout.
  caf::timespan handshake_timeout = std::chrono::seconds{2};
  /// dice.max-pending.
  std::size_t max_pending = 64;
  /// dice.max-basp-payload (bytes).
  std::size_t max_basp_payload = std::size_t{256} << 20;
  /// dice.insecure.
  bool insecure = false;
  /// dice.data-channel.
  bool data_channel = true;
  /// dice.relay: auto, true or false.
  std::string relay = "auto";
  /// dice.coalesce.
  bool coalesce = true;
  /// dice.secret-file: a file holding the cluster secret.
  std::string secret_file;
  /// dice.deterministic: run the embedded (one-process) mode on one thread
  /// in a fixed order with a virtual clock, so a seeded run is reproducible.
  bool deterministic = false;
  /// dice.max-restarts: restarts of a role actor whose middleware threw.
  std::int64_t max_restarts = 0;
  /// dice.spool-dir: where a collector spools unacknowledged deltas.
  std::string spool_dir;
  /// dice.spool-fsync: flush every spool write to disk.
  bool spool_fsync = false;
  /// dice.role-nice: nice value added to the role actor's thread.
  std::int64_t role_nice = default_role_nice;
  /// dice.cpu-latency-us (-1: no request).
  std::int64_t cpu_latency_us = -1;
};

/// Builds the node settings from the options and, when dice.node-id is not
/// given, from SLURM's environment (SLURM_PROCID, SLURM_NTASKS,
/// SLURM_NODELIST, SLURM_TASKS_PER_NODE; ports from dice.port, default
/// 50515, plus the task's local index; refused if that passes 65535).
caf::expected<node_config> make_node_config(const node_system_config& cfg);

} // namespace dice
