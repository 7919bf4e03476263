// Multi-process figures over loopback, each with its baseline measured by
// the same program in the same run (bench/run drives it):
//   remote_bench tcp --size S --rounds R [--collectors N]  raw TCP, one
//     stream to each of N receivers (default 1)
//   remote_bench snapshot --collectors N --size S --rounds R [--path P]
//     P = data (default): nodes as dice runs them (preamble, data plane)
//     with the same-host shortcut off (bytes on the data connection);
//     P = shm: the same-host shortcut on (sealed memfd, a reference on the
//     socket); P = basp: the data plane off (BASP chunks).
//     --tls DIR: every node runs TLS with DIR/{cert,key,ca}.pem
//     (scripts/make-test-certs), on BASP and on data connections alike.
//     --idle-poll 0: CAF's idle workers wait at once, as in RL nodes
//     (dice::rl::run_config); --min-bytes B: the data plane's threshold;
//     --ack socket: collectors ack with a datagram instead of a dice
//     publish back (ack_socket.cpp), so a round times the delivery alone.
//     --cpu-latency-us N (every mode, tcp too): the run holds a CPU latency
//     request (dice/runtime/cpu_latency.hpp).
//   remote_bench context --collectors N --obs K --batch B --seconds T [--path
//   P]
//     nodes as in the snapshot mode (the learner behind dice's listener and
//     preamble, collectors dialling it), deltas of B transitions of K floats.
//   remote_bench relay --collectors N --size S --rounds R [--relay 0|1|auto]
//     [--kill K] [--deadline S] [--fanout K] [--hosts A0,A1,..]
//     [--netns NS1,..]: collectors in a mesh, the relay broadcast on, off or
//     chosen by measurement, on loopback or one host (network namespace)
//     each (relay.cpp says more)
// The parent is the learner; it forks N collector processes (this same
// binary) that attach to its router on an ephemeral port. One JSON line out.
//
// One file per mode (tcp.cpp, snapshot.cpp, context.cpp, collector.cpp,
// publisher.cpp, relay.cpp); nodes.cpp holds what the node modes share.

#include "dice/core/errc.hpp"
#include "dice/process/spawn.hpp"
#include "dice/runtime/cpu_latency.hpp"

#include "remote_bench.hpp"

#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace dice::bench::remote {

option_values given;

} // namespace dice::bench::remote

namespace {

using dice::bench::value_kind;

// Every mode takes every option: a learner passes its own options on to the
// collectors it starts (nodes.cpp), which ignore what is not theirs.
const std::vector<dice::bench::option_spec> specs{
  {"size", value_kind::integer, "bytes per snapshot or message (6800000)"},
  {"rounds", value_kind::integer, "timed rounds (10)"},
  {"collectors", value_kind::integer,
   "collector processes (snapshot 1, context 3, relay 8)"},
  {"path", value_kind::text,
   "data (default), shm (same host) or basp (BASP only)"},
  {"tls", value_kind::text, "TLS on every node, with DIR/{cert,key,ca}.pem",
   "DIR"},
  {"coalesce", value_kind::integer,
   "routers batch queued forwards: 1 (default) or 0"},
  {"min-bytes", value_kind::integer,
   "smallest snapshot on the data plane (0: dice's default)"},
  {"idle-poll", value_kind::integer,
   "idle CAF workers poll before they wait: 1 (default, CAF's) or 0 (as "
   "RL nodes)"},
  {"cpu-latency-us", value_kind::integer,
   "hold a CPU latency request of N us for the run (-1: none, the default; "
   "0: idle CPUs poll instead of halting), as --dice.cpu-latency-us"},
  {"ack", value_kind::text,
   "snapshot: how collectors ack: dice (default: a publish back through the "
   "routers and BASP) or socket (one datagram, as raw TCP's one-byte ack)"},
  {"obs", value_kind::integer, "context: floats per observation (4)"},
  {"batch", value_kind::integer, "context: transitions per delta (1000)"},
  {"seconds", value_kind::real, "context: seconds counted (3)"},
  {"window", value_kind::integer,
   "context: deltas a collector keeps in flight (dice's max_in_flight, 32)"},
  {"relay", value_kind::text,
   "relay: broadcast on (1, default), off (0) or auto (chosen by measurement)"},
  {"hosts", value_kind::text,
   "relay: the learner's address, then each collector's (default: loopback)"},
  {"netns", value_kind::text,
   "relay: each collector's network namespace (run with ip netns exec)"},
  {"kill", value_kind::integer,
   "relay: collector K stops, then dies mid-run (0: none)"},
  {"deadline", value_kind::integer, "relay: the relay deadline in seconds (5)"},
  {"fanout", value_kind::integer, "relay: children per node of the tree (2)"},
  // Set by the learner on the collectors' command lines.
  {"port", value_kind::integer, "collector: the learner's port"},
  {"node", value_kind::integer, "collector: its node id (1)"},
  {"ack-port", value_kind::integer,
   "collector: the learner's ack port (--ack socket)"},
  {"mode", value_kind::text, "collector: snapshot (default) or context"},
  {"mesh", value_kind::integer, "collector: one of the relay's mesh (0)"},
  {"peers", value_kind::text, "collector: the mesh peers it attaches to"},
};

const std::vector<dice::bench::mode_spec> modes{
  {"tcp", "raw TCP, one stream per receiver (the snapshot figures' baseline)"},
  {"snapshot", "model snapshots from the learner to N collectors"},
  {"context", "context deltas from N collectors to the learner"},
  {"relay", "snapshots to N collectors in a mesh, relay on or off"},
  {"collector", "a learner's peer process (started by the other modes)"},
  {"publisher", "a snapshot source (the same-host process tests)"},
};

} // namespace

int main(int argc, char** argv) {
  using namespace dice::bench::remote;
  dice::process::die_with_parent_if_asked();
  auto parsed = dice::bench::parse_options(
    "remote_bench", "Multi-process figures over loopback (bench/run).", specs,
    modes, argc, argv);
  if (auto* code = std::get_if<int>(&parsed))
    return *code;
  given = std::get<dice::bench::option_values>(std::move(parsed));
  tls_dir = arg("tls", "");
  coalesce = num("coalesce", 1) != 0;
  idle_poll = num("idle-poll", 1) != 0;
  auto& mode = given.mode();
  // The request is the machine's: the parent's covers its children, and
  // the baseline (tcp) takes it as the dice modes do.
  std::optional<dice::cpu_latency_request> latency;
  if (auto us = num("cpu-latency-us", -1);
      us >= 0 && mode != "collector" && mode != "publisher") {
    auto req = dice::cpu_latency_request::hold(static_cast<std::int32_t>(us));
    if (!req) {
      std::fprintf(stderr, "remote_bench: %s\n",
                   dice::render(req.error()).c_str());
      return 1;
    }
    latency = std::move(*req);
  }
  if (mode == "tcp")
    return tcp_main(num("size", 6'800'000), num("rounds", 10),
                    std::max(1L, num("collectors", 1)));
  if (mode == "collector")
    return collector_main();
  if (mode == "snapshot")
    return snapshot_main(argc, argv);
  if (mode == "publisher")
    return publisher_main();
  if (mode == "context")
    return context_main(argc, argv);
  // relay: parse_options took no other mode.
  return relay_main(argc, argv);
}
