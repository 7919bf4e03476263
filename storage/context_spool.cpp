#include "dice/storage/context_spool.hpp"

#include "dice/core/errc.hpp"
#include "dice/storage/fd_io.hpp"
#include "dice/logging/log.hpp"
#include "dice/messages/snapshot_chunk.hpp"

#include "caf/binary_deserializer.hpp"
#include "caf/binary_serializer.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <system_error>
#include <utility>

namespace dice {

namespace {

constexpr char spool_magic[8] = {'D', 'I', 'C', 'E', 'S', 'P', 'L', '1'};
constexpr const char* spool_prefix = "dice-spool.";

// magic(8) | node(4) | zero(4) | incarnation(8) | checksum of the 24 bytes before.
constexpr std::size_t header_size = 32;
// kind(4) | zero(4) | length(8) | checksum(8), then `length` payload bytes.
constexpr std::size_t record_head = 24;

constexpr std::uint32_t kind_delta = 1;
constexpr std::uint32_t kind_settled = 2;

std::string sys_error(const std::string& what) {
  return what + ": " + std::strerror(errno);
}

template <class T>
void put(std::vector<char>& buf, T x) {
  char tmp[sizeof(T)];
  std::memcpy(tmp, &x, sizeof(T));
  buf.insert(buf.end(), tmp, tmp + sizeof(T));
}

template <class T>
T get(const char* p) {
  T x;
  std::memcpy(&x, p, sizeof(T));
  return x;
}

std::string incarnation_hex(std::uint64_t incarnation) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx",
                static_cast<unsigned long long>(incarnation));
  return buf;
}

// "dice-spool.<node>.<16 hex incarnation>.<segment>"
struct spool_name {
  std::uint32_t node = 0;
  std::uint64_t incarnation = 0;
  std::uint64_t segment = 0;
};

bool parse_number(const std::string& str, int base, std::uint64_t max,
                  std::uint64_t& out) {
  if (str.empty() || str.size() > 20)
    return false;
  for (auto c : str)
    if (!(base == 16 ? std::isxdigit(static_cast<unsigned char>(c))
                     : std::isdigit(static_cast<unsigned char>(c))))
      return false;
  errno = 0;
  char* end = nullptr;
  auto x = std::strtoull(str.c_str(), &end, base);
  if (errno != 0 || *end != '\0' || x > max)
    return false;
  out = x;
  return true;
}

std::optional<spool_name> parse_name(const std::string& name) {
  if (name.rfind(spool_prefix, 0) != 0)
    return std::nullopt;
  auto rest = name.substr(std::strlen(spool_prefix));
  auto a = rest.find('.');
  auto b = a == std::string::npos ? a : rest.find('.', a + 1);
  if (b == std::string::npos || rest.find('.', b + 1) != std::string::npos)
    return std::nullopt;
  spool_name result;
  std::uint64_t node = 0;
  if (!parse_number(rest.substr(0, a), 10, 0xFFFFFFFFu, node) || b - a - 1 != 16
      || !parse_number(rest.substr(a + 1, 16), 16, ~std::uint64_t{0},
                       result.incarnation)
      || !parse_number(rest.substr(b + 1), 10, ~std::uint64_t{0} >> 1,
                       result.segment))
    return std::nullopt;
  result.node = static_cast<std::uint32_t>(node);
  return result;
}

caf::error write_all(int fd, const char* p, std::size_t n,
                     const std::string& path) {
  if (!dice::write_all(fd, p, n))
    return make_error(errc::storage_failed, sys_error("write " + path));
  return caf::none;
}

std::vector<char> file_header(std::uint32_t node, std::uint64_t incarnation) {
  std::vector<char> buf{spool_magic, spool_magic + 8};
  put<std::uint32_t>(buf, node);
  put<std::uint32_t>(buf, 0);
  put<std::uint64_t>(buf, incarnation);
  put<std::uint64_t>(buf, checksum64(buf.data(), buf.size()));
  return buf;
}

// The record's checksum covers its kind and length too: a torn or
// overwritten head is caught like a torn payload.
std::uint64_t record_checksum(const char* head, const char* payload,
                              std::size_t n) {
  return checksum64(payload, n, checksum64(head, 16));
}

void close_all(std::vector<int>& fds) {
  for (auto fd : fds)
    if (fd >= 0)
      ::close(fd);
  fds.clear();
}

} // namespace

context_spool::context_spool(context_spool_options opts)
  : opts_(std::move(opts)) {}

context_spool::~context_spool() {
  for (auto& s : own_.segments)
    if (s.fd >= 0)
      ::close(s.fd);
  for (auto& kvp : old_)
    for (auto& s : kvp.second.segments)
      if (s.fd >= 0)
        ::close(s.fd);
}

caf::expected<std::unique_ptr<context_spool>>
context_spool::open(context_spool_options opts) {
  if (opts.dir.empty())
    return make_error(errc::invalid_config, "no spool directory given");
  std::error_code ec;
  if (std::filesystem::create_directories(opts.dir, ec))
    std::filesystem::permissions(opts.dir, std::filesystem::perms::owner_all,
                                 ec);
  if (ec || !std::filesystem::is_directory(opts.dir, ec))
    return make_error(errc::storage_failed,
                      "cannot use spool directory " + opts.dir
                        + (ec ? ": " + ec.message() : ": not a directory"));
  std::unique_ptr<context_spool> result{new context_spool(std::move(opts))};
  if (auto err = result->scan())
    return err;
  return result;
}

caf::error context_spool::scan() {
  namespace fs = std::filesystem;
  auto node = opts_.node;
  auto refuse = [&](const std::string& path, const std::string& why) {
    refused_.push_back(path + ": " + why);
    log::warning(node, "spool: left " + path + " alone: " + why);
  };
  // Segments of each earlier incarnation of this node, by segment number.
  std::map<std::uint64_t, std::map<std::uint64_t, std::string>> found;
  std::error_code ec;
  for (fs::directory_iterator it{opts_.dir, ec}, end; !ec && it != end;
       it.increment(ec)) {
    auto path = it->path().string();
    auto name = parse_name(it->path().filename().string());
    if (!name) {
      refuse(path, "not a spool file");
      continue;
    }
    if (name->node != node) {
      refuse(path, "it belongs to node " + std::to_string(name->node));
      continue;
    }
    if (name->incarnation == opts_.incarnation) {
      refuse(path, "it names this incarnation's own incarnation");
      continue;
    }
    std::error_code sec;
    if (!fs::is_regular_file(it->symlink_status(sec))) {
      refuse(path, "not a regular file");
      continue;
    }
    found[name->incarnation][name->segment] = path;
  }
  if (ec)
    return make_error(errc::storage_failed,
                      "cannot read spool directory " + opts_.dir + ": "
                        + ec.message());
  for (auto& [incarnation, paths] : found) {
    // Lock every segment first: one a live process holds (a node with this
    // id still runs) makes the whole incarnation off limits.
    std::vector<int> fds;
    bool live = false;
    for (auto& kvp : paths) {
      int fd = ::open(kvp.second.c_str(),
                      O_RDWR | O_APPEND | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
      if (fd < 0) {
        refuse(kvp.second, sys_error("cannot open"));
        fds.push_back(-1);
        continue;
      }
      fds.push_back(fd);
      if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
        live = true;
        break;
      }
    }
    if (live) {
      close_all(fds);
      for (auto& kvp : paths)
        refuse(kvp.second,
               "a live process of node " + std::to_string(node) + " holds it");
      continue;
    }
    old_state st;
    std::map<std::uint64_t, context_delta> deltas;
    std::size_t k = 0;
    for (auto& kvp : paths) {
      auto& path = kvp.second;
      int fd = fds[k++];
      if (fd < 0)
        continue;
      struct stat sb;
      if (::fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        ::close(fd);
        refuse(path, "not a regular file");
        continue;
      }
      auto size = static_cast<std::uint64_t>(sb.st_size);
      char head[header_size];
      auto expected = file_header(node, incarnation);
      if (size < header_size) {
        // A kill between creating a segment and writing its header leaves
        // a prefix of it: nothing was spooled there.
        if (pread_all(fd, head, static_cast<std::size_t>(size), 0)
            && std::memcmp(head, expected.data(), size) == 0) {
          ::unlink(path.c_str());
          ::close(fd);
        } else {
          ::close(fd);
          refuse(path, "too short for a spool header");
        }
        continue;
      }
      if (!pread_all(fd, head, header_size, 0)) {
        ::close(fd);
        refuse(path, sys_error("cannot read"));
        continue;
      }
      if (std::memcmp(head, expected.data(), header_size) != 0) {
        ::close(fd);
        refuse(path,
               std::memcmp(head, spool_magic, 8) != 0
                 ? "not a dice spool file"
                 : "its header does not match its name");
        continue;
      }
      std::map<std::uint64_t, context_delta> mine;
      std::uint64_t settled = 0;
      std::string bad;
      std::uint64_t pos = header_size;
      std::vector<char> payload;
      while (pos < size) {
        char rh[record_head];
        if (size - pos < record_head
            || !pread_all(fd, rh, record_head, static_cast<off_t>(pos))) {
          bad = "a record cut short";
          break;
        }
        auto kind = get<std::uint32_t>(rh);
        auto len = get<std::uint64_t>(rh + 8);
        if (len > size - pos - record_head) {
          bad = "a record cut short";
          break;
        }
        payload.resize(static_cast<std::size_t>(len));
        if (!pread_all(fd, payload.data(), payload.size(),
                       static_cast<off_t>(pos + record_head))
            || record_checksum(rh, payload.data(), payload.size())
              != get<std::uint64_t>(rh + 16)) {
          bad = "a record with a wrong checksum (cut short or corrupt)";
          break;
        }
        if (kind == kind_settled && len == 8) {
          settled = std::max(settled, get<std::uint64_t>(payload.data()));
        } else if (kind == kind_delta) {
          context_delta d;
          caf::binary_deserializer src{nullptr, payload.data(), payload.size()};
          if (auto err = src(d); err || src.remaining() != 0) {
            bad = "an undecodable delta";
            break;
          }
          // A spool only speaks for the incarnation its name and header
          // give: a delta in another node's name (or incarnation) is never
          // republished, and neither is the rest of its file.
          if (d.sender != node || d.incarnation != incarnation || d.seq == 0
              || sequence_error(d) != nullptr) {
            bad = "a delta of node " + std::to_string(d.sender) + " incarnation "
              + std::to_string(d.incarnation) + " seq " + std::to_string(d.seq);
            mine.clear();
            settled = 0;
            pos = 0;
            break;
          }
          mine[d.seq] = std::move(d);
        } else {
          bad = "an unknown record kind " + std::to_string(kind);
          break;
        }
        pos += record_head + len;
      }
      if (pos == 0) {
        ::close(fd);
        refuse(path, "it holds " + bad);
        continue;
      }
      if (!bad.empty()) {
        log::warning(node,
                     "spool: " + path + ": dropped "
                       + std::to_string(size - pos) + " bytes at offset "
                       + std::to_string(pos) + " (" + bad
                       + "; a kill in the middle of a write leaves "
                         "one)");
        // Records appended later (settled marks) must follow good ones.
        if (::ftruncate(fd, static_cast<off_t>(pos)) != 0)
          log::error(node, sys_error("spool: cannot truncate " + path));
        size = pos;
      }
      st.settled = std::max(st.settled, settled);
      for (auto& kv : mine)
        deltas[kv.first] = std::move(kv.second);
      st.segments.push_back(segment{path, fd, size});
    }
    if (st.segments.empty())
      continue;
    spooled_incarnation inc;
    inc.incarnation = incarnation;
    for (auto& kv : deltas)
      if (kv.first > st.settled) {
        st.last_seq = kv.first;
        inc.deltas.push_back(std::move(kv.second));
      }
    if (inc.deltas.empty()) {
      // Everything it spooled was settled: nothing to republish.
      for (auto& s : st.segments) {
        ::unlink(s.path.c_str());
        ::close(s.fd);
      }
      continue;
    }
    log::info(node,
              "spool: incarnation " + std::to_string(incarnation) + " left "
                + std::to_string(inc.deltas.size())
                + " unacknowledged deltas (seq "
                + std::to_string(inc.deltas.front().seq) + ".."
                + std::to_string(inc.deltas.back().seq) + ")");
    old_.emplace(incarnation, std::move(st));
    recovered_.push_back(std::move(inc));
  }
  return caf::none;
}

std::vector<spooled_incarnation> context_spool::take_recovered() {
  return std::exchange(recovered_, {});
}

caf::error context_spool::new_segment() {
  auto path = opts_.dir + "/" + spool_prefix + std::to_string(opts_.node) + "."
    + incarnation_hex(opts_.incarnation) + "." + std::to_string(own_.next_segment++);
  int fd = ::open(path.c_str(),
                  O_CREAT | O_EXCL | O_RDWR | O_APPEND | O_CLOEXEC | O_NOFOLLOW,
                  0600);
  if (fd < 0)
    return make_error(errc::storage_failed, sys_error("cannot create " + path));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    auto err = make_error(errc::storage_failed,
                          sys_error("cannot lock " + path));
    ::close(fd);
    ::unlink(path.c_str());
    return err;
  }
  auto head = file_header(opts_.node, opts_.incarnation);
  if (auto err = write_all(fd, head.data(), head.size(), path)) {
    ::close(fd);
    ::unlink(path.c_str());
    return err;
  }
  own_.segments.push_back(segment{path, fd, head.size()});
  return caf::none;
}

caf::error context_spool::write_record(segment& s, std::uint32_t kind,
                                       const std::vector<char>& payload,
                                       record_pos* where) {
  std::vector<char> buf;
  buf.reserve(record_head + payload.size());
  put<std::uint32_t>(buf, kind);
  put<std::uint32_t>(buf, 0);
  put<std::uint64_t>(buf, payload.size());
  put<std::uint64_t>(
    buf, record_checksum(buf.data(), payload.data(), payload.size()));
  buf.insert(buf.end(), payload.begin(), payload.end());
  // One write(2) per record: the kernel's copy outlives this process; only
  // a kill in the middle of the call can leave the record torn, and then
  // it is the last one (dropped when read back).
  if (auto err = write_all(s.fd, buf.data(), buf.size(), s.path)) {
    // Cut a partial record off, so later records stay readable.
    if (::ftruncate(s.fd, static_cast<off_t>(s.size)) != 0)
      log::error(opts_.node, sys_error("spool: cannot truncate " + s.path));
    return err;
  }
  if (opts_.fsync && ::fdatasync(s.fd) != 0)
    return make_error(errc::storage_failed, sys_error("fdatasync " + s.path));
  if (where != nullptr)
    *where = record_pos{s.size, buf.size()};
  s.size += buf.size();
  return caf::none;
}

caf::error context_spool::append(const context_delta& d) {
  if (own_.segments.empty() || segment_size() >= opts_.segment_bytes)
    if (auto err = own_.segments.empty() ? new_segment() : rotate())
      return err;
  std::vector<char> payload;
  {
    caf::binary_serializer sink{nullptr, payload};
    auto copy = d;
    if (auto err = sink(copy))
      return err;
  }
  record_pos pos;
  if (auto err = write_record(own_.segments.back(), kind_delta, payload, &pos))
    return err;
  own_.unsettled[d.seq] = pos;
  return caf::none;
}

// A new segment gets the unsettled records of the last one (copied as
// they are), then the old segments go. A kill in between leaves both;
// whoever reads them takes each seq once.
caf::error context_spool::rotate() {
  auto old = own_.segments.back();
  auto unsettled = std::move(own_.unsettled);
  own_.unsettled.clear();
  if (auto err = new_segment())
    return err;
  auto& fresh = own_.segments.back();
  std::vector<char> buf;
  for (auto& [seq, pos] : unsettled) {
    buf.resize(static_cast<std::size_t>(pos.length));
    if (!pread_all(old.fd, buf.data(), buf.size(),
                   static_cast<off_t>(pos.offset)))
      return make_error(errc::storage_failed,
                        sys_error("spool: cannot read back " + old.path));
    auto at = fresh.size;
    if (auto err = write_all(fresh.fd, buf.data(), buf.size(), fresh.path))
      return err;
    fresh.size += buf.size();
    own_.unsettled[seq] = record_pos{at, pos.length};
  }
  if (opts_.fsync && ::fdatasync(fresh.fd) != 0)
    return make_error(errc::storage_failed,
                      sys_error("fdatasync " + fresh.path));
  for (std::size_t i = 0; i + 1 < own_.segments.size(); ++i) {
    ::unlink(own_.segments[i].path.c_str());
    ::close(own_.segments[i].fd);
  }
  own_.segments.erase(own_.segments.begin(), own_.segments.end() - 1);
  return caf::none;
}

caf::error context_spool::settle(std::uint64_t incarnation, std::uint64_t upto) {
  std::vector<char> payload;
  put<std::uint64_t>(payload, upto);
  if (incarnation == opts_.incarnation) {
    if (upto <= own_.settled || own_.segments.empty())
      return caf::none;
    own_.settled = upto;
    own_.unsettled.erase(own_.unsettled.begin(),
                         own_.unsettled.upper_bound(upto));
    return write_record(own_.segments.back(), kind_settled, payload, nullptr);
  }
  auto i = old_.find(incarnation);
  if (i == old_.end() || upto <= i->second.settled)
    return caf::none;
  auto& st = i->second;
  st.settled = upto;
  if (upto >= st.last_seq) {
    for (auto& s : st.segments) {
      ::unlink(s.path.c_str());
      ::close(s.fd);
    }
    old_.erase(i);
    log::info(opts_.node,
              "spool: every delta of incarnation " + std::to_string(incarnation)
                + " is acknowledged; its files are removed");
    return caf::none;
  }
  return write_record(st.segments.back(), kind_settled, payload, nullptr);
}

void context_spool::remove_all() {
  for (auto& s : own_.segments) {
    ::unlink(s.path.c_str());
    ::close(s.fd);
  }
  own_ = own_state{};
  for (auto& kvp : old_)
    for (auto& s : kvp.second.segments) {
      ::unlink(s.path.c_str());
      ::close(s.fd);
    }
  old_.clear();
}

std::size_t context_spool::files() const {
  auto n = own_.segments.size();
  for (auto& kvp : old_)
    n += kvp.second.segments.size();
  return n;
}

} // namespace dice
