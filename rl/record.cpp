// The learner record's file: header, checksummed entries, reading with
// every byte checked (record.hpp, docs/replay.md).

#include "dice/rl/record.hpp"

#include "dice/core/errc.hpp"

#include "caf/binary_deserializer.hpp"
#include "caf/binary_serializer.hpp"

#include <xxhash.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

namespace dice::rl {

namespace {

constexpr char record_magic[8] = {'D', 'I', 'C', 'E', 'R', 'E', 'C', '\0'};
constexpr std::uint32_t record_version = 1;
constexpr std::size_t header_size = 24;
constexpr std::size_t entry_head = 16; // kind u32 | length u32 | xxh3 u64

enum : std::uint32_t {
  kind_start = 1,
  kind_weights = 2,
  kind_iteration = 3,
  kind_end = 4,
};

// The end entry: iterations written and whether the size limit cut them.
constexpr std::size_t end_payload = 9;
constexpr std::size_t end_entry = entry_head + end_payload;

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

// The checksum covers kind and length too: a flipped kind or length is
// caught like a flipped payload byte.
std::uint64_t entry_checksum(const char* head, const char* payload,
                             std::size_t n) {
  return XXH3_64bits_withSeed(payload, n, XXH3_64bits(head, 8));
}

std::vector<char> header() {
  std::vector<char> buf{record_magic, record_magic + 8};
  put<std::uint32_t>(buf, record_version);
  put<std::uint32_t>(buf, 0);
  put<std::uint64_t>(buf, XXH3_64bits(buf.data(), buf.size()));
  return buf;
}

template <class T>
caf::expected<std::vector<char>> encode(const T& x) {
  std::vector<char> buf;
  caf::binary_serializer sink{nullptr, buf};
  auto copy = x;
  if (auto err = sink(copy))
    return err;
  return buf;
}

std::string weights_bytes(torch::nn::Module& m) {
  torch::serialize::OutputArchive ar;
  m.save(ar);
  std::ostringstream os;
  ar.save_to(os);
  return os.str();
}

} // namespace

std::uint64_t weights_hash(torch::nn::Module& m) {
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  auto add = [st](const std::string& name, const torch::Tensor& t) {
    XXH3_64bits_update(st, name.data(), name.size() + 1);
    auto c = t.detach().to(torch::kCPU).contiguous();
    for (auto d : c.sizes()) {
      std::int64_t dim = d;
      XXH3_64bits_update(st, &dim, sizeof(dim));
    }
    XXH3_64bits_update(st, c.data_ptr(), c.numel() * c.element_size());
  };
  for (auto& kvp : m.named_parameters(true))
    add(kvp.key(), kvp.value());
  for (auto& kvp : m.named_buffers(true))
    add(kvp.key(), kvp.value());
  auto h = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  return h;
}

// -- writing ------------------------------------------------------------------

record_writer::record_writer(std::string path, std::FILE* f,
                             std::uint64_t max_bytes)
  : path_(std::move(path)), file_(f), max_bytes_(max_bytes) {
  // nop
}

record_writer::~record_writer() {
  std::fclose(file_);
}

caf::expected<std::unique_ptr<record_writer>>
record_writer::create(const std::string& dir, std::uint64_t max_bytes) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec)
    return make_error(errc::storage_failed,
                      "cannot create " + dir + ": " + ec.message());
  auto path = (fs::path{dir} / file_name).string();
  if (max_bytes > 0 && max_bytes < header_size + 2 * end_entry)
    return make_error(errc::invalid_config,
                      "--dice.record-max-bytes " + std::to_string(max_bytes)
                        + " cannot hold a record");
  // "x": an earlier record is never overwritten.
  auto* f = std::fopen(path.c_str(), "wbx");
  if (f == nullptr)
    return make_error(
      fs::exists(path) ? errc::invalid_config : errc::storage_failed,
      "cannot create " + path
        + (fs::exists(path) ? ": a record is already there"
                            : ": " + std::string{std::strerror(errno)}));
  std::unique_ptr<record_writer> w{new record_writer(path, f, max_bytes)};
  auto head = header();
  if (std::fwrite(head.data(), 1, head.size(), f) != head.size()
      || std::fflush(f) != 0)
    return make_error(errc::storage_failed, "cannot write " + path);
  w->bytes_ = head.size();
  return w;
}

caf::error record_writer::write_entry(std::uint32_t kind,
                                      const std::vector<char>& payload) {
  if (payload.size() > 0xFFFFFFFFu)
    return make_error(errc::invalid_config,
                      path_ + ": an entry of " + std::to_string(payload.size())
                        + " bytes is too large for a record");
  std::vector<char> buf;
  buf.reserve(entry_head + payload.size());
  put<std::uint32_t>(buf, kind);
  put<std::uint32_t>(buf, static_cast<std::uint32_t>(payload.size()));
  put<std::uint64_t>(
    buf, entry_checksum(buf.data(), payload.data(), payload.size()));
  buf.insert(buf.end(), payload.begin(), payload.end());
  // One write per entry, flushed: a killed learner leaves whole entries
  // (and at worst one torn one, refused on reading).
  if (std::fwrite(buf.data(), 1, buf.size(), file_) != buf.size()
      || std::fflush(file_) != 0)
    return make_error(errc::storage_failed,
                      "cannot write " + path_ + ": " + std::strerror(errno));
  bytes_ += buf.size();
  return caf::none;
}

caf::error record_writer::start(record_start x, torch::nn::Module& m) {
  x.weights_hash = weights_hash(m);
  auto buf = encode(x);
  if (!buf)
    return buf.error();
  if (auto err = write_entry(kind_start, *buf))
    return err;
  auto w = weights_bytes(m);
  return write_entry(kind_weights, std::vector<char>{w.begin(), w.end()});
}

caf::error record_writer::write_end(bool cut) {
  std::vector<char> buf;
  put<std::uint64_t>(buf, iterations_);
  buf.push_back(cut ? 1 : 0);
  finished_ = true;
  cut_ = cut;
  return write_entry(kind_end, buf);
}

caf::error record_writer::iteration(const recorded_iteration& x) {
  if (finished_)
    return caf::none;
  auto buf = encode(x);
  if (!buf)
    return buf.error();
  // The end entry always fits after the last iteration.
  if (max_bytes_ > 0
      && bytes_ + entry_head + buf->size() + end_entry > max_bytes_)
    return write_end(true);
  if (auto err = write_entry(kind_iteration, *buf))
    return err;
  ++iterations_;
  return caf::none;
}

caf::error record_writer::finish() {
  if (finished_)
    return caf::none;
  return write_end(false);
}

// -- reading ------------------------------------------------------------------

caf::expected<learner_record> read_record(const std::string& dir) {
  auto path = (std::filesystem::path{dir} / record_writer::file_name).string();
  std::ifstream in{path, std::ios::binary};
  if (!in)
    return make_error(errc::storage_missing, "no record at " + path);
  std::string data{std::istreambuf_iterator<char>{in},
                   std::istreambuf_iterator<char>{}};
  auto bad = [&](std::uint64_t offset, const std::string& what) {
    return make_error(errc::malformed_input,
                      path + ": " + what + " at byte offset "
                        + std::to_string(offset));
  };
  auto head = header();
  if (data.size() < header_size)
    return bad(0, "truncated header");
  if (std::memcmp(data.data(), head.data(), 12) != 0)
    return bad(0,
               "not a dice learner record of version "
                 + std::to_string(record_version));
  if (std::memcmp(data.data(), head.data(), header_size) != 0)
    return bad(0, "altered header (checksum)");
  learner_record rec;
  rec.bytes = data.size();
  std::uint64_t pos = header_size;
  bool have_start = false, have_weights = false, have_end = false;
  std::uint64_t end_count = 0;
  while (pos < data.size()) {
    if (have_end)
      return bad(pos, "bytes after the end entry");
    if (data.size() - pos < entry_head)
      return bad(pos, "truncated entry head");
    auto* p = data.data() + pos;
    auto kind = get<std::uint32_t>(p);
    auto len = get<std::uint32_t>(p + 4);
    auto sum = get<std::uint64_t>(p + 8);
    if (data.size() - pos - entry_head < len)
      return bad(
        pos,
        "truncated entry (" + std::to_string(len) + " bytes announced, "
          + std::to_string(data.size() - pos - entry_head) + " there)");
    auto* payload = p + entry_head;
    if (entry_checksum(p, payload, len) != sum)
      return bad(pos, "altered entry (checksum mismatch)");
    auto order = [&](bool ok) {
      return ok
        ? caf::error{}
        : bad(pos, "entry of kind " + std::to_string(kind) + " out of order");
    };
    caf::binary_deserializer src{nullptr, payload, len};
    switch (kind) {
      case kind_start:
        if (auto err = order(!have_start))
          return err;
        if (src(rec.start))
          return bad(pos, "start entry does not decode");
        have_start = true;
        break;
      case kind_weights:
        if (auto err = order(have_start && !have_weights))
          return err;
        rec.weights.assign(payload, len);
        have_weights = true;
        break;
      case kind_iteration: {
        if (auto err = order(have_weights))
          return err;
        recorded_iteration x;
        if (src(x))
          return bad(pos, "iteration entry does not decode");
        rec.iterations.push_back(std::move(x));
        break;
      }
      case kind_end:
        if (auto err = order(have_weights))
          return err;
        if (len != end_payload)
          return bad(pos, "end entry of the wrong size");
        end_count = get<std::uint64_t>(payload);
        rec.cut = payload[8] != 0;
        have_end = true;
        if (end_count != rec.iterations.size())
          return bad(pos,
                     "end entry counts " + std::to_string(end_count)
                       + " iterations, the record holds "
                       + std::to_string(rec.iterations.size()));
        break;
      default: return bad(pos, "unknown entry kind " + std::to_string(kind));
    }
    pos += entry_head + len;
  }
  if (!have_end)
    return bad(pos,
               "record ends without its end entry (truncated, or the "
               "learner was killed)");
  return rec;
}

caf::error write_record(const std::string& dir, const learner_record& rec) {
  auto w = record_writer::create(dir, 0);
  if (!w)
    return w.error();
  auto& x = **w;
  auto buf = encode(rec.start);
  if (!buf)
    return buf.error();
  if (auto err = x.write_entry(kind_start, *buf))
    return err;
  if (auto err = x.write_entry(kind_weights,
                               std::vector<char>{rec.weights.begin(),
                                                 rec.weights.end()}))
    return err;
  for (auto& it : rec.iterations)
    if (auto err = x.iteration(it))
      return err;
  return x.write_end(rec.cut);
}

} // namespace dice::rl
