#include "net/chunker.hpp"

#include "dice/logging/log.hpp"

#include <algorithm>
#include <cstring>

namespace dice {

snapshot_chunker::snapshot_chunker(std::size_t chunk_bytes)
  : chunk_bytes_(chunk_bytes == 0 ? default_chunk_bytes : chunk_bytes) {
  // nop
}

bool snapshot_chunker::splits(const caf::message& msg) const {
  if (!msg.match_elements<std::string, model_snapshot>())
    return false;
  return msg.get_as<model_snapshot>(1).data.size() > chunk_bytes_;
}

std::vector<snapshot_chunk> snapshot_chunker::split(std::uint32_t origin,
                                                    const std::string& topic,
                                                    std::uint32_t sender,
                                                    const model_snapshot& x,
                                                    bool hash) {
  auto total = x.data.size();
  auto count = std::max<std::size_t>(1,
                                     (total + chunk_bytes_ - 1) / chunk_bytes_);
  auto transfer = ++next_transfer_;
  std::vector<snapshot_chunk> result;
  result.reserve(count);
  for (std::size_t i = 0; i < count; ++i) {
    snapshot_chunk c;
    c.origin = origin;
    c.transfer = transfer;
    c.topic = topic;
    c.sender = sender;
    c.seq = static_cast<std::uint32_t>(i);
    c.count = static_cast<std::uint32_t>(count);
    c.offset = i * chunk_bytes_;
    c.total = total;
    auto len = std::min<std::size_t>(chunk_bytes_, total - c.offset);
    c.bytes = dice::chunk_bytes{x.data, static_cast<std::size_t>(c.offset),
                                len};
    if (hash)
      seal(c);
    if (i == 0) {
      c.header = x;
      c.header.data = shared_bytes{};
    }
    result.push_back(std::move(c));
  }
  return result;
}

void snapshot_chunker::seal(snapshot_chunk& c) {
  c.checksum = checksum64(c.bytes.data(), c.bytes.size());
}

void snapshot_chunker::drop(std::map<key, partial>::iterator i,
                            std::uint32_t node, const std::string& why) {
  ++dropped_;
  log::warning(node,
               "dropped model v" + std::to_string(i->second.header.version)
                 + " from node " + std::to_string(i->second.sender)
                 + " on topic '" + i->second.topic + "' after "
                 + std::to_string(i->second.next) + " of "
                 + std::to_string(i->second.count) + " chunks: " + why);
  dead_.insert(i->first);
  if (dead_.size() > 256)
    dead_.erase(dead_.begin());
  partial_.erase(i);
}

std::optional<snapshot_chunker::assembled>
snapshot_chunker::add(snapshot_chunk&& c, std::uint32_t node) {
  key k{c.origin, c.transfer};
  auto i = partial_.find(k);
  if (i == partial_.end()) {
    if (auto d = dead_.find(k); d != dead_.end()) {
      if (c.seq + 1 >= c.count)
        dead_.erase(d);
      return std::nullopt;
    }
    if (c.seq != 0) {
      // The start of this transfer never arrived (or was dropped): every
      // later chunk of it is useless.
      if (c.seq + 1 == c.count) {
        ++dropped_;
        log::warning(node,
                     "dropped the rest of a model from node "
                       + std::to_string(c.sender) + " on topic '" + c.topic
                       + "': its first chunks are missing");
      }
      return std::nullopt;
    }
    if (c.count == 0 || c.total > max_wire_bytes
        || c.total > std::uint64_t{c.count} * max_wire_bytes) {
      ++dropped_;
      log::warning(node,
                   "dropped a model from node " + std::to_string(c.sender)
                     + ": implausible size " + std::to_string(c.total)
                     + " bytes in " + std::to_string(c.count) + " chunks");
      return std::nullopt;
    }
    // A newer transfer on the same topic from the same router means an older
    // one can never complete (chunks of one transfer travel back to back).
    for (auto j = partial_.begin(); j != partial_.end();) {
      auto cur = j++;
      if (cur->first.first == c.origin && cur->second.topic == c.topic)
        drop(cur, node, "a newer transfer started before it was complete");
    }
    partial p;
    p.topic = c.topic;
    p.sender = c.sender;
    p.count = c.count;
    p.total = c.total;
    p.header = std::move(c.header);
    if (c.count == 1) {
      // One chunk: its bytes are the buffer, no copy.
      p.whole = c.bytes.release();
    } else {
      // Not zero-filled: every byte is written by exactly one chunk before
      // the snapshot is delivered (ranges are checked to be contiguous).
      p.buf = writable_bytes{static_cast<std::size_t>(c.total)};
    }
    i = partial_.emplace(k, std::move(p)).first;
    if (c.count == 1) {
      auto& q = i->second;
      if (q.whole.size() != q.total || c.offset != 0
          || checksum64(q.whole.data(), q.whole.size()) != c.checksum) {
        drop(i, node, "checksum or size mismatch in chunk 0");
        return std::nullopt;
      }
      q.next = 1;
      q.filled = q.total;
    }
  }
  auto& p = i->second;
  if (p.count > 1) {
    if (c.seq != p.next || c.count != p.count || c.total != p.total
        || c.topic != p.topic || c.sender != p.sender) {
      drop(i, node, "chunk " + std::to_string(c.seq) + " out of sequence");
      return std::nullopt;
    }
    auto len = c.bytes.size();
    if (c.offset != p.filled || len > p.total - p.filled
        || (len == 0 && p.total > 0)) {
      drop(i, node, "chunk " + std::to_string(c.seq) + " has a bad range");
      return std::nullopt;
    }
    // Hashed while copied (one pass); a mismatch drops the whole buffer,
    // so the bytes already copied are never seen.
    if (copy_checksum64(p.buf.data() + c.offset, c.bytes.data(), len)
        != c.checksum) {
      drop(i, node, "checksum mismatch in chunk " + std::to_string(c.seq));
      return std::nullopt;
    }
    p.filled += len;
    ++p.next;
  }
  if (p.next < p.count)
    return std::nullopt;
  if (p.filled != p.total) {
    drop(i, node, "size mismatch");
    return std::nullopt;
  }
  assembled result;
  result.topic = std::move(p.topic);
  result.sender = p.sender;
  result.snapshot = std::move(p.header);
  result.snapshot.data = p.count == 1 ? std::move(p.whole)
                                      : shared_bytes{std::move(p.buf)};
  partial_.erase(i);
  ++completed_;
  return result;
}

void snapshot_chunker::drop_origin(std::uint32_t origin, std::uint32_t node,
                                   const std::string& why) {
  for (auto j = partial_.begin(); j != partial_.end();) {
    auto cur = j++;
    if (cur->first.first == origin)
      drop(cur, node, why);
  }
}

} // namespace dice
