// Multi-process figures over loopback, each with its baseline measured by
// the same program in the same run (bench/run drives it):
//   remote_bench tcp --size S --rounds R         raw TCP, one stream
//   remote_bench snapshot --collectors N --size S --rounds R [--path P]
//     P = data (default): nodes as dice runs them (preamble, data plane)
//     with the same-host shortcut off (bytes on the data connection);
//     P = shm: the same-host shortcut on (sealed memfd, a reference on the
//     socket); P = basp: the data plane off (BASP chunks).
//     --tls DIR: every node runs TLS with DIR/{cert,key,ca}.pem
//     (scripts/make-test-certs), on BASP and on data connections alike.
//   remote_bench context --collectors N --obs K --batch B --seconds T [--path
//   P]
//     nodes as in the snapshot mode (the learner behind dice's listener and
//     preamble, collectors dialling it), deltas of B transitions of K floats.
//   remote_bench relay --collectors N --size S --rounds R [--relay 0|1]
//     [--kill K] [--deadline S] [--fanout K]: collectors in a mesh, the relay
//     broadcast on or off (relay.cpp says more)
// The parent is the learner; it forks N collector processes (this same
// binary) that attach to its router on an ephemeral port. One JSON line out.
//
// One file per mode (tcp.cpp, snapshot.cpp, context.cpp, collector.cpp,
// publisher.cpp, relay.cpp); nodes.cpp holds what the node modes share.

#include "dice/process/spawn.hpp"

#include "remote_bench.hpp"

#include <cstdio>
#include <string>
#include <vector>

namespace {

// Options after the mode.
const std::vector<std::string> known_options{
  "size",   "rounds", "collectors", "obs",      "batch",  "seconds", "chunk",
  "window", "port",   "node",       "mode",     "path",   "tls",     "relay",
  "kill",   "mesh",   "peers",      "deadline", "fanout", "coalesce"};

} // namespace

int main(int argc, char** argv) {
  using namespace dice::bench::remote;
  dice::process::die_with_parent_if_asked();
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: remote_bench tcp|snapshot|context|collector "
                 "[--size S] [--rounds R] [--collectors N] ...\n");
    return 1;
  }
  std::string mode = argv[1];
  if (auto why = dice::bench::check_options(argc, argv, 2, known_options);
      !why.empty())
    return dice::bench::refuse("remote_bench", why, known_options);
  tls_dir = arg(argc, argv, "tls", "");
  coalesce = arg(argc, argv, "coalesce", "1") != "0";
  if (mode == "tcp")
    return tcp_main(num(argc, argv, "size", 6'800'000),
                    num(argc, argv, "rounds", 10));
  if (mode == "collector")
    return collector_main(argc, argv);
  if (mode == "snapshot")
    return snapshot_main(argc, argv);
  if (mode == "publisher")
    return publisher_main(argc, argv);
  if (mode == "context")
    return context_main(argc, argv);
  if (mode == "relay")
    return relay_main(argc, argv);
  std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
  return 1;
}
