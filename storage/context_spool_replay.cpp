// The context spool's replay: what a restarted node finds on disk (its own
// and older incarnations' segments), checked record by record.
#include "context_spool_impl.hpp"

namespace dice {

using namespace spool_detail;

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
    std::vector<unique_fd> fds; // none where a segment did not open
    bool live = false;
    for (auto& kvp : paths) {
      unique_fd fd{
        ::open(kvp.second.c_str(),
               O_RDWR | O_APPEND | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK)};
      if (!fd) {
        refuse(kvp.second, sys_error("cannot open"));
        fds.emplace_back();
        continue;
      }
      auto raw = fd.get();
      fds.push_back(std::move(fd));
      if (::flock(raw, LOCK_EX | LOCK_NB) != 0) {
        live = true;
        break;
      }
    }
    if (live) {
      fds.clear(); // closes (and unlocks) what was opened
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
      auto fd = std::move(fds[k++]);
      if (!fd)
        continue;
      struct stat sb;
      if (::fstat(fd.get(), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        fd.reset();
        refuse(path, "not a regular file");
        continue;
      }
      // dice writes its segments 0600 as the running user: a file of
      // another user, or one others could have written, was planted.
      if (sb.st_uid != ::geteuid()) {
        fd.reset();
        refuse(path,
               "owned by uid " + std::to_string(sb.st_uid)
                 + ", not this process's user (uid "
                 + std::to_string(::geteuid()) + ")");
        continue;
      }
      if ((sb.st_mode & 077) != 0) {
        char mode[8];
        std::snprintf(mode, sizeof(mode), "%04o", sb.st_mode & 07777);
        fd.reset();
        refuse(path,
               std::string{"mode "} + mode
                 + ": group or others may have written it (dice "
                   "writes 0600)");
        continue;
      }
      auto size = static_cast<std::uint64_t>(sb.st_size);
      char head[header_size];
      auto expected = file_header(node, incarnation, opts_.key);
      if (size < header_size) {
        // A kill between creating a segment and writing its header leaves
        // a prefix of it: nothing was spooled there.
        if (pread_all(fd.get(), head, static_cast<std::size_t>(size), 0)
            && std::memcmp(head, expected.data(), size) == 0) {
          ::unlink(path.c_str());
          fd.reset();
        } else {
          fd.reset();
          refuse(path, "too short for a spool header");
        }
        continue;
      }
      if (!pread_all(fd.get(), head, header_size, 0)) {
        fd.reset();
        refuse(path, sys_error("cannot read"));
        continue;
      }
      if (std::memcmp(head, expected.data(), header_size) != 0) {
        fd.reset();
        refuse(path,
               std::memcmp(head, spool_magic, 8) != 0 ? "not a dice spool file"
                 : opts_.key.empty()
                 ? "its header does not match its name"
                 : "its header does not match its name or "
                   "was written without the cluster secret");
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
            || !pread_all(fd.get(), rh, record_head, static_cast<off_t>(pos))) {
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
        if (!pread_all(fd.get(), payload.data(), payload.size(),
                       static_cast<off_t>(pos + record_head))
            || record_checksum(opts_.key, rh, payload.data(), payload.size())
              != get<std::uint64_t>(rh + 16)) {
          bad = opts_.key.empty()
            ? "a record with a wrong checksum (cut short or corrupt)"
            : "a record whose MAC does not check (cut short, corrupt, "
              "or written without the cluster secret)";
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
            bad = "a delta of node " + std::to_string(d.sender)
              + " incarnation " + std::to_string(d.incarnation) + " seq "
              + std::to_string(d.seq);
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
        fd.reset();
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
        if (::ftruncate(fd.get(), static_cast<off_t>(pos)) != 0)
          log::error(node, sys_error("spool: cannot truncate " + path));
        size = pos;
      }
      st.settled = std::max(st.settled, settled);
      for (auto& kv : mine)
        deltas[kv.first] = std::move(kv.second);
      st.segments.push_back(segment{path, std::move(fd), size});
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
        s.fd.reset();
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

} // namespace dice
