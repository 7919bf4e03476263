// The context spool's writer: segments, records, rotation and settling.
#include "storage/context_spool.hpp"

#include "context_spool_impl.hpp"

namespace dice {

using namespace spool_detail;

context_spool::context_spool(context_spool_options opts)
  : opts_(std::move(opts)) {}

// The segments' fds close (and unlock) with their members.
context_spool::~context_spool() = default;

caf::error context_spool::prepare_dir(const std::string& dir) {
  if (dir.empty())
    return make_error(errc::invalid_config, "no spool directory given");
  std::error_code ec;
  if (std::filesystem::create_directories(dir, ec))
    std::filesystem::permissions(dir, std::filesystem::perms::owner_all, ec);
  if (ec || !std::filesystem::is_directory(dir, ec))
    return make_error(errc::storage_failed,
                      "cannot use spool directory " + dir
                        + (ec ? ": " + ec.message() : ": not a directory"));
  // Where another user can create files (or owns the directory), a forged
  // spool file can be planted for this node to republish as its own.
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    return make_error(errc::storage_failed,
                      "cannot use spool directory " + dir
                        + ": not a directory (a symbolic link is refused)");
  if (st.st_uid != ::geteuid())
    return make_error(
      errc::unauthorized,
      "spool directory " + dir + " is owned by uid " + std::to_string(st.st_uid)
        + ", not this process's user (uid " + std::to_string(::geteuid())
        + "): another user could plant files in it");
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%04o", st.st_mode & 07777);
    return make_error(errc::unauthorized,
                      "spool directory " + dir + " has mode "
                        + std::string{mode}
                        + ": group or others can create files in it "
                          "(dice makes its own 0700)");
  }
  return caf::none;
}

caf::expected<std::unique_ptr<context_spool>>
context_spool::open(context_spool_options opts) {
  if (auto err = prepare_dir(opts.dir))
    return err;
  std::unique_ptr<context_spool> result{new context_spool(std::move(opts))};
  if (auto err = result->scan())
    return err;
  return result;
}

std::vector<spooled_incarnation> context_spool::take_recovered() {
  return std::exchange(recovered_, {});
}

caf::error context_spool::new_segment() {
  auto path = opts_.dir + "/" + spool_prefix + std::to_string(opts_.node) + "."
    + incarnation_hex(opts_.incarnation) + "."
    + std::to_string(own_.next_segment++);
  unique_fd fd{::open(
    path.c_str(), O_CREAT | O_EXCL | O_RDWR | O_APPEND | O_CLOEXEC | O_NOFOLLOW,
    0600)};
  if (!fd)
    return make_error(errc::storage_failed, sys_error("cannot create " + path));
  if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
    auto err = make_error(errc::storage_failed,
                          sys_error("cannot lock " + path));
    fd.reset();
    ::unlink(path.c_str());
    return err;
  }
  auto head = file_header(opts_.node, opts_.incarnation, opts_.key);
  if (auto err = write_all(fd.get(), head.data(), head.size(), path)) {
    fd.reset();
    ::unlink(path.c_str());
    return err;
  }
  own_.segments.push_back(segment{path, std::move(fd), head.size()});
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
  put<std::uint64_t>(buf,
                     record_checksum(opts_.key, buf.data(), payload.data(),
                                     payload.size()));
  buf.insert(buf.end(), payload.begin(), payload.end());
  // One write(2) per record: the kernel's copy outlives this process; only
  // a kill in the middle of the call can leave the record torn, and then
  // it is the last one (dropped when read back).
  if (auto err = write_all(s.fd.get(), buf.data(), buf.size(), s.path)) {
    // Cut a partial record off, so later records stay readable.
    if (::ftruncate(s.fd.get(), static_cast<off_t>(s.size)) != 0)
      log::error(opts_.node, sys_error("spool: cannot truncate " + s.path));
    return err;
  }
  if (opts_.fsync && ::fdatasync(s.fd.get()) != 0)
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
  // The old segment's fd and path, not a reference (new_segment may move
  // the vector's elements); it stays open in own_.segments until the end.
  auto old_fd = own_.segments.back().fd.get();
  auto old_path = own_.segments.back().path;
  auto unsettled = std::move(own_.unsettled);
  own_.unsettled.clear();
  if (auto err = new_segment())
    return err;
  auto& fresh = own_.segments.back();
  std::vector<char> buf;
  for (auto& [seq, pos] : unsettled) {
    buf.resize(static_cast<std::size_t>(pos.length));
    if (!pread_all(old_fd, buf.data(), buf.size(),
                   static_cast<off_t>(pos.offset)))
      return make_error(errc::storage_failed,
                        sys_error("spool: cannot read back " + old_path));
    auto at = fresh.size;
    if (auto err = write_all(fresh.fd.get(), buf.data(), buf.size(),
                             fresh.path))
      return err;
    fresh.size += buf.size();
    own_.unsettled[seq] = record_pos{at, pos.length};
  }
  if (opts_.fsync && ::fdatasync(fresh.fd.get()) != 0)
    return make_error(errc::storage_failed,
                      sys_error("fdatasync " + fresh.path));
  for (std::size_t i = 0; i + 1 < own_.segments.size(); ++i) {
    ::unlink(own_.segments[i].path.c_str());
    own_.segments[i].fd.reset();
  }
  own_.segments.erase(own_.segments.begin(), own_.segments.end() - 1);
  return caf::none;
}

caf::error context_spool::settle(std::uint64_t incarnation,
                                 std::uint64_t upto) {
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
      s.fd.reset();
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
    s.fd.reset();
  }
  own_ = own_state{};
  for (auto& kvp : old_)
    for (auto& s : kvp.second.segments) {
      ::unlink(s.path.c_str());
      s.fd.reset();
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
