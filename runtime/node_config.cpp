// Node settings: the topology, endpoint and SLURM parsers, and
// make_node_config joining them with the "dice" options (declared in
// node_system_config.cpp).
#include "dice/runtime/node_config.hpp"

#include "dice/core/errc.hpp"

#include <algorithm>
#include <cstdlib>
#include <limits>

namespace dice {

namespace {

std::vector<std::string_view> split(std::string_view str, char sep) {
  std::vector<std::string_view> result;
  if (str.empty())
    return result;
  std::size_t pos = 0;
  for (;;) {
    auto next = str.find(sep, pos);
    result.push_back(str.substr(pos, next - pos));
    if (next == std::string_view::npos)
      return result;
    pos = next + 1;
  }
}

// Splits at `sep`, but not inside brackets: "a[1,2],b" -> "a[1,2]", "b".
std::vector<std::string_view> split_outside_brackets(std::string_view str) {
  std::vector<std::string_view> result;
  int depth = 0;
  std::size_t start = 0;
  for (std::size_t i = 0; i < str.size(); ++i) {
    if (str[i] == '[')
      ++depth;
    else if (str[i] == ']')
      --depth;
    else if (str[i] == ',' && depth == 0) {
      result.push_back(str.substr(start, i - start));
      start = i + 1;
    }
  }
  if (start < str.size())
    result.push_back(str.substr(start));
  return result;
}

bool parse_uint(std::string_view str, std::uint64_t& out) {
  if (str.empty() || str.size() > 19)
    return false;
  out = 0;
  for (auto c : str) {
    if (c < '0' || c > '9')
      return false;
    out = out * 10 + static_cast<std::uint64_t>(c - '0');
  }
  return true;
}

const char* env(const char* name) {
  auto x = std::getenv(name);
  return x != nullptr && *x != '\0' ? x : nullptr;
}

} // namespace

const char* to_string(topology x) noexcept {
  switch (x) {
    case topology::star: return "star";
    case topology::mesh: return "mesh";
    default: return "alone";
  }
}

caf::expected<topology> parse_topology(std::string_view str) {
  if (str == "alone")
    return topology::alone;
  if (str == "star")
    return topology::star;
  if (str == "mesh")
    return topology::mesh;
  return make_error(errc::invalid_config,
                    "unknown topology '" + std::string{str}
                      + "' (expected alone, star or mesh)");
}

std::string to_string(const endpoint& x) {
  return x.host + ":" + std::to_string(x.port);
}

caf::expected<endpoint> parse_endpoint(std::string_view str) {
  auto orig = std::string{str};
  if (str.substr(0, 6) == "tcp://")
    str.remove_prefix(6);
  auto colon = str.rfind(':');
  std::uint64_t port = 0;
  if (colon == std::string_view::npos || colon == 0
      || !parse_uint(str.substr(colon + 1), port) || port == 0 || port > 65535)
    return make_error(errc::invalid_config,
                      "bad peer address '" + orig + "' (expected host:port)");
  auto host = str.substr(0, colon);
  // "[::1]:4242"
  if (host.size() > 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  return endpoint{std::string{host}, static_cast<std::uint16_t>(port)};
}

caf::expected<std::vector<endpoint>> parse_endpoints(std::string_view str) {
  std::vector<endpoint> result;
  for (auto part : split(str, ',')) {
    if (part.empty())
      continue;
    auto x = parse_endpoint(part);
    if (!x)
      return x.error();
    result.push_back(std::move(*x));
  }
  return result;
}

role_set default_roles(std::uint32_t index, std::uint32_t workers,
                       std::uint32_t learners) {
  learners = std::max<std::uint32_t>(learners, 1);
  if (index < learners)
    return {role::learner};
  if (index == learners && workers > learners + 1)
    return {role::evaluator};
  return {role::collector};
}

std::vector<endpoint> topology_peers(topology topo, std::uint32_t index,
                                     const std::vector<endpoint>& nodes) {
  auto n = std::min<std::size_t>(index, nodes.size());
  switch (topo) {
    case topology::mesh: return {nodes.begin(), nodes.begin() + n};
    case topology::star:
      return {nodes.begin(), nodes.begin() + std::min<std::size_t>(n, 1)};
    default: return {};
  }
}

std::uint32_t expected_peers(topology topo, std::uint32_t index,
                             std::uint32_t workers, std::size_t extra) {
  std::uint32_t by_topo = 0;
  if (workers > 1) {
    if (topo == topology::mesh)
      by_topo = workers - 1;
    else if (topo == topology::star)
      by_topo = index == 0 ? workers - 1 : 1;
  }
  return std::max(by_topo, static_cast<std::uint32_t>(extra));
}

caf::expected<std::vector<std::string>>
expand_slurm_hosts(std::string_view str) {
  std::vector<std::string> result;
  auto bad = [&] {
    return make_error(errc::invalid_config,
                      "cannot parse SLURM host list '" + std::string{str}
                        + "'");
  };
  for (auto item : split_outside_brackets(str)) {
    auto lb = item.find('[');
    if (lb == std::string_view::npos) {
      result.emplace_back(item);
      continue;
    }
    auto rb = item.find(']', lb);
    if (rb == std::string_view::npos)
      return bad();
    auto prefix = item.substr(0, lb);
    auto suffix = item.substr(rb + 1);
    for (auto range : split(item.substr(lb + 1, rb - lb - 1), ',')) {
      auto dash = range.find('-');
      auto lo_str = range.substr(0, dash);
      auto hi_str = dash == std::string_view::npos ? lo_str
                                                   : range.substr(dash + 1);
      std::uint64_t lo = 0;
      std::uint64_t hi = 0;
      if (!parse_uint(lo_str, lo) || !parse_uint(hi_str, hi) || hi < lo
          || hi - lo > 100000)
        return bad();
      for (auto i = lo; i <= hi; ++i) {
        // Keep zero padding: "n[01-03]" -> n01, n02, n03.
        auto num = std::to_string(i);
        if (num.size() < lo_str.size())
          num.insert(0, lo_str.size() - num.size(), '0');
        result.push_back(std::string{prefix} + num + std::string{suffix});
      }
    }
  }
  return result;
}

caf::expected<std::vector<std::uint32_t>>
expand_slurm_tasks(std::string_view str) {
  std::vector<std::uint32_t> result;
  for (auto item : split(str, ',')) {
    std::uint64_t count = 0;
    std::uint64_t times = 1;
    auto paren = item.find("(x");
    auto ok = parse_uint(item.substr(0, paren), count);
    if (ok && paren != std::string_view::npos)
      ok = item.back() == ')'
        && parse_uint(item.substr(paren + 2, item.size() - paren - 3), times);
    if (!ok || times > 100000)
      return make_error(errc::invalid_config,
                        "cannot parse SLURM_TASKS_PER_NODE '" + std::string{str}
                          + "'");
    result.insert(result.end(), times, static_cast<std::uint32_t>(count));
  }
  return result;
}

caf::expected<node_config> make_node_config(const node_system_config& cfg) {
  node_config result;
  result.host = cfg.host;
  result.port = cfg.port;
  result.start_timeout = cfg.start_timeout;
  result.peer_loss_timeout = cfg.peer_loss_timeout;
  result.connect_timeout = cfg.connect_timeout;
  result.handshake_timeout = cfg.handshake_timeout;
  result.max_pending = cfg.max_pending;
  // Snapshots cross BASP in chunks of default_chunk_bytes (8 MB) plus a
  // header; below 16 MiB a node could not take its own chunks.
  if (cfg.max_basp_payload < (std::size_t{16} << 20)
      || cfg.max_basp_payload > std::numeric_limits<std::uint32_t>::max())
    return make_error(errc::invalid_config,
                      "dice.max-basp-payload must be between 16 MiB and 4 GiB "
                      "(bytes), not "
                        + std::to_string(cfg.max_basp_payload));
  result.max_basp_payload = static_cast<std::uint32_t>(cfg.max_basp_payload);
  if (cfg.listen_fd < -1 || cfg.listen_fd > 1000000)
    return make_error(errc::invalid_config,
                      "bad dice.listen-fd " + std::to_string(cfg.listen_fd));
  result.listen_fd = static_cast<int>(cfg.listen_fd);
  result.insecure = cfg.insecure;
  if (cfg.max_restarts < 0)
    return make_error(errc::invalid_config, "dice.max-restarts is negative");
  result.max_restarts = cfg.max_restarts;
  result.spool_dir = cfg.spool_dir;
  result.spool_fsync = cfg.spool_fsync;
  if (cfg.role_nice < 0 || cfg.role_nice > 19)
    return make_error(errc::invalid_config,
                      "dice.role-nice must be between 0 and 19, not "
                        + std::to_string(cfg.role_nice));
  result.role_nice = static_cast<int>(cfg.role_nice);
  if (cfg.cpu_latency_us < -1 || cfg.cpu_latency_us > 1'000'000)
    return make_error(errc::invalid_config,
                      "dice.cpu-latency-us must be -1 (none) or between 0 "
                      "and 1000000, not "
                        + std::to_string(cfg.cpu_latency_us));
  result.cpu_latency_us = static_cast<std::int32_t>(cfg.cpu_latency_us);
  if (auto restarted = env("DICE_RESTART_COUNT")) {
    std::uint64_t n = 0;
    if (!parse_uint(restarted, n) || n > 1000000)
      return make_error(errc::invalid_config,
                        "bad DICE_RESTART_COUNT '" + std::string{restarted}
                          + "'");
    result.restart_count = static_cast<std::int64_t>(n);
  }
  result.data_channel = cfg.data_channel;
  if (auto mode = parse_relay_mode(cfg.relay))
    result.relay = *mode;
  else
    return make_error(errc::invalid_config,
                      "bad dice.relay '" + cfg.relay
                        + "' (auto, true or false)");
  result.coalesce = cfg.coalesce;
  if (!cfg.secret_file.empty()) {
    auto secret = load_secret(cfg.secret_file);
    if (!secret)
      return secret.error();
    result.secret = std::move(*secret);
  }
  result.tls = tls_files{cfg.openssl_certificate, cfg.openssl_key,
                         cfg.openssl_cafile};
  // CAF aborts on a bad path and silently goes unauthenticated with none:
  // check before any connection is made.
  if (result.tls.any())
    if (auto err = validate(result.tls))
      return err;
  auto topo_str = cfg.topology;
  auto attach = parse_endpoints(cfg.attach_to);
  if (!attach)
    return attach.error();
  result.attach_to = std::move(*attach);
  auto nodes = parse_endpoints(cfg.nodes);
  if (!nodes)
    return nodes.error();
  result.nodes = std::move(*nodes);
  result.workers = static_cast<std::uint32_t>(cfg.workers);
  if (cfg.learners < 1 || cfg.learners > 65536)
    return make_error(errc::invalid_config,
                      "dice.learners must be 1..65536, not "
                        + std::to_string(cfg.learners));
  result.learners = static_cast<std::uint32_t>(cfg.learners);
  auto slurm_id = env("SLURM_PROCID");
  if (cfg.node_id >= 0) {
    if (cfg.node_id > 0xFFFFFFFF)
      return make_error(errc::invalid_config, "dice.node-id is too large");
    result.id = static_cast<std::uint32_t>(cfg.node_id);
    result.index = result.id;
    result.distributed = true;
  } else if (slurm_id != nullptr) {
    // srun PROGRAM: one task per node, addresses from the allocation.
    std::uint64_t id = 0;
    std::uint64_t ntasks = 0;
    auto ntasks_str = env("SLURM_NTASKS");
    auto hosts_str = env("SLURM_NODELIST") ? env("SLURM_NODELIST")
                                           : env("SLURM_JOB_NODELIST");
    if (!parse_uint(slurm_id, id) || ntasks_str == nullptr
        || !parse_uint(ntasks_str, ntasks) || hosts_str == nullptr
        || id >= ntasks)
      return make_error(errc::invalid_config,
                        "SLURM_PROCID is set, but SLURM_NTASKS or "
                        "SLURM_NODELIST is missing or inconsistent");
    auto hosts = expand_slurm_hosts(hosts_str);
    if (!hosts)
      return hosts.error();
    std::vector<std::uint32_t> per_host(hosts->size(), 1);
    if (auto tpn = env("SLURM_TASKS_PER_NODE")) {
      auto xs = expand_slurm_tasks(tpn);
      if (!xs)
        return xs.error();
      per_host = std::move(*xs);
    }
    std::uint32_t base = cfg.port != 0 ? cfg.port : 50515;
    if (cfg.nodes.empty())
      for (std::size_t h = 0; h < hosts->size() && h < per_host.size(); ++h)
        for (std::uint32_t k = 0; k < per_host[h]; ++k) {
          // Task k on a host listens on base + k: it must stay a port.
          if (base + k > 65535)
            return make_error(errc::invalid_config,
                              "SLURM task " + std::to_string(k) + " on "
                                + (*hosts)[h] + " would listen on port "
                                + std::to_string(base) + " + "
                                + std::to_string(k)
                                + " > 65535; give a "
                                  "lower --dice.port");
          result.nodes.push_back(
            endpoint{(*hosts)[h], static_cast<std::uint16_t>(base + k)});
        }
    if (result.nodes.size() < ntasks)
      return make_error(errc::invalid_config,
                        "SLURM allocation lists fewer slots than SLURM_NTASKS");
    result.id = static_cast<std::uint32_t>(id);
    result.index = result.id;
    result.workers = static_cast<std::uint32_t>(ntasks);
    result.port = result.nodes[id].port;
    result.distributed = true;
    if (topo_str.empty())
      topo_str = "mesh";
  }
  if (topo_str.empty())
    topo_str = "alone";
  auto topo = parse_topology(topo_str);
  if (!topo)
    return topo.error();
  result.topo = *topo;
  if (result.workers == 0)
    result.workers = std::max<std::uint32_t>(
      1, static_cast<std::uint32_t>(result.nodes.size()));
  if (result.workers > 1 || !result.attach_to.empty())
    result.distributed = true;
  if (!cfg.roles.empty()) {
    auto rs = parse_role_set(cfg.roles);
    if (!rs)
      return rs.error();
    result.roles = *rs;
  } else {
    result.roles = default_roles(result.index, result.workers, result.learners);
  }
  // Peers named by the topology come first, then the explicit ones.
  auto peers = topology_peers(result.topo, result.index, result.nodes);
  for (auto& x : result.attach_to) {
    auto same = [&](const endpoint& y) {
      return y.host == x.host && y.port == x.port;
    };
    if (std::none_of(peers.begin(), peers.end(), same))
      peers.push_back(x);
  }
  result.attach_to = std::move(peers);
  result.min_peers = cfg.min_peers >= 0
    ? static_cast<std::int32_t>(cfg.min_peers)
    : static_cast<std::int32_t>(expected_peers(
      result.topo, result.index, result.workers, result.attach_to.size()));
  return result;
}

} // namespace dice
