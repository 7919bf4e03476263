// Writes one valid encoding per case into fuzz/corpus/<target>/ (run by
// hand after a format change; the files are committed).

#include "dice/messages/context_delta.hpp"
#include "dice/messages/detail/peer_hello.hpp"
#include "dice/messages/model_snapshot.hpp"
#include "dice/messages/payload.hpp"
#include "dice/messages/value.hpp"
#include "net/preamble.hpp"

#include "caf/binary_serializer.hpp"
#include "caf/make_message.hpp"

#include "fuzz_common.hpp"

#include <fstream>
#include <iostream>
#include <string>

namespace {

void write(const std::string& path, std::uint8_t tag, const char* data,
           std::size_t size) {
  std::ofstream out{path, std::ios::binary};
  out.put(static_cast<char>(tag));
  out.write(data, static_cast<std::streamsize>(size));
}

template <class T>
void seed(const std::string& dir, const std::string& name, std::uint8_t tag,
          T x) {
  std::vector<char> buf;
  caf::binary_serializer sink{fuzz::system(), buf};
  if (auto err = sink(x)) {
    std::cerr << "cannot serialize " << name << "\n";
    std::exit(1);
  }
  write(dir + "/" + name, tag, buf.data(), buf.size());
}

void seed_payload(const std::string& dir, const std::string& name,
                  std::uint8_t type, const dice::payload& p) {
  auto tag = static_cast<std::uint8_t>((p.count << 2) | type);
  write(dir + "/" + name, tag, reinterpret_cast<const char*>(p.bytes.data()),
        p.bytes.size());
}

dice::model_snapshot snapshot() {
  dice::snapshot_builder b;
  float w[6] = {1, 2, 3, 4, 5, 6};
  std::int64_t n = 7;
  b.add("fc.weight", dice::dtype::float32, {2, 3}, w, sizeof(w));
  b.add("bn.num_batches_tracked", dice::dtype::int64, {}, &n, sizeof(n));
  return b.build(1, 42, 3, 1000);
}

// dice::value seeds are plain encodings (value_fuzz reads the input as one).
void seed_value(const std::string& dir, const std::string& name,
                const dice::shared_bytes& bytes) {
  std::ofstream out{dir + "/" + name, std::ios::binary};
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

void seed_value(const std::string& dir, const std::string& name,
                const dice::value& x) {
  auto bytes = dice::encode_value(x);
  if (!bytes) {
    std::cerr << "cannot encode " << name << "\n";
    std::exit(1);
  }
  seed_value(dir, name, *bytes);
}

// An array viewing `data` (static: the seeds are written before it goes).
dice::value array(dice::dtype type, std::vector<std::int64_t> shape,
                  const void* data, std::size_t nbytes,
                  dice::array_flavor flavor = dice::array_flavor::numpy) {
  dice::value_array a;
  a.type = type;
  a.shape = std::move(shape);
  a.data = static_cast<const std::uint8_t*>(data);
  a.nbytes = nbytes;
  a.flavor = flavor;
  return dice::value::of(std::move(a));
}

void seed_values(const std::string& dir) {
  using dice::value;
  static const std::uint8_t raw[64] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  auto i64 = [](std::int64_t x) {
    return value::of(x);
  };
  auto transition = [&](std::int64_t i) {
    return value::dict({"obs", "action", "reward", "done"},
                       {array(dice::dtype::float32, {2, 2}, raw, 16), i64(i),
                        value::of(0.5 * i), value::of(i == 2)});
  };
  auto info = value::dict(
    {"name", "raw", "none", "pair", "empty"},
    {value::of("h\u00e9llo \u2603 \U0001F3B2"),
     value::of_bytes(std::string{"\0\xff", 2}), value::none(),
     value::tuple({i64(1), value::of(2.5)}),
     value::list({value::list({}), value::dict({}, {}), value::tuple({})})});
  seed_value(
    dir, "nested",
    value::dict(
      {"step", "info", "t", "x"},
      {array(dice::dtype::int64, {}, raw, 8, dice::array_flavor::numpy_scalar),
       info,
       array(dice::dtype::bfloat16, {1}, raw, 2, dice::array_flavor::tensor),
       transition(1)}));
  auto items = dice::pack_values({transition(0), transition(1), transition(2)});
  seed_value(dir, "items", items->bytes);
  seed_value(dir, "scalars",
             value::tuple({value::none(), value::of(false), value::of(true),
                           i64(INT64_MIN), i64(INT64_MAX), i64(-1),
                           value::of(-0.0), value::of(1e300), value::of(""),
                           value::of_bytes("")}));
  std::vector<value> arrays;
  for (int t = 0; t <= static_cast<int>(dice::dtype::boolean); ++t) {
    auto type = static_cast<dice::dtype>(t);
    arrays.push_back(array(type, {}, raw, dice::element_size(type)));
    arrays.push_back(array(type, {2, 0}, raw, 0));
    arrays.push_back(array(type, {2, 1}, raw, 2 * dice::element_size(type)));
  }
  seed_value(dir, "arrays", value::list(std::move(arrays)));
  auto deep = value::list({});
  for (int i = 0; i < 9; ++i)
    deep = value::list({std::move(deep)});
  seed_value(dir, "deep", deep);
}

} // namespace

int main(int argc, char** argv) {
  std::string root = argc > 1 ? argv[1] : "corpus";
  auto p = root + "/payload";
  std::vector<fuzz::item> items{{"a", {1, 2}, {{1}, {2, 3}}, true},
                                {"", {}, {}, false}};
  seed_payload(p, "items", 0, dice::pack(items));
  seed_payload(p, "floats", 1, dice::pack(std::vector<float>{1, 2, 3}));
  seed_payload(p, "strings", 2,
               dice::pack(std::vector<std::string>{"x", "yz"}));
  seed_payload(p, "doubles", 3,
               dice::pack(std::vector<std::vector<double>>{{1.5}, {}}));
  auto m = root + "/message";
  dice::context_delta d;
  d.sender = 2;
  d.incarnation = 9;
  d.seq = 1;
  d.sender_roles = dice::role_set{dice::role::collector};
  d.env_step = 4;
  d.env_episode = 1;
  d.trajectories.push_back(dice::pack(items, 2, 0));
  d.trajectory_end_idx = {1};
  d.has_trajectory_end_idx = true;
  seed(m, "delta", 0, d);
  seed(m, "snapshot", 1, snapshot());
  dice::peer_hello h;
  h.node = 3;
  h.topics = {"model", "context_exchanger_learner"};
  h.proof = std::string(64, 'a');
  seed(m, "hello", 2, h);
  seed(m, "message_delta", 3,
       caf::make_message(std::string{"context_exchanger_collector"}, d));
  seed(m, "message_snapshot", 3, caf::make_message(snapshot()));
  seed(m, "finish", 4, dice::finish{1, "max_step", false});
  auto c = root + "/config";
  auto text = [&](const std::string& name, const std::string& s) {
    std::ofstream out{c + "/" + name, std::ios::binary};
    out << s;
  };
  text("endpoints", "127.0.0.1:4242,tcp://host:1,[::1]:80");
  text("slurm_hosts", "n[01-03,7],gpu[1-2]x,c");
  text("slurm_tasks", "2(x3),1");
  text("roles", "learner,collector");
  // Genuine preamble exchanges with preamble_fuzz's fixed nonces and secret
  // (mode byte: bit 0 secret, bit 1 dialer side, bits 2-7 chunk size - 1).
  auto pre = root + "/preamble";
  auto exchange = [](const std::string& key) {
    dice::net::preamble_dialer d{key, std::string(32, '\x11'),
                                 dice::net::channel::control};
    dice::net::preamble_acceptor a{key, std::string(32, '\x22')};
    auto d1 = d.take_output();
    a.feed(d1.data(), d1.size());
    auto a1 = a.take_output();
    d.feed(a1.data(), a1.size());
    auto d2 = d.take_output();
    return std::make_pair(d1 + d2, a1);
  };
  auto bytes = [&](const std::string& name, std::uint8_t mode,
                   const std::string& data) {
    write(pre + "/" + name, mode, data.data(), data.size());
  };
  auto with = exchange("0123456789abcdef0123456789abcdef");
  auto without = exchange("");
  bytes("acceptor_secret", (39 << 2) | 1, with.first);
  bytes("acceptor_secret_bytewise", 1, with.first);
  bytes("acceptor_plain", 39 << 2, without.first);
  bytes("dialer_secret", (63 << 2) | 3, with.second);
  bytes("dialer_plain", (63 << 2) | 2, without.second);
  std::string basp(32, '\0');
  basp[0] = 1; // CAF 0.17's crash frame: a client handshake, no payload
  bytes("basp_crash_frame", (31 << 2) | 1, basp);
  seed_values(root + "/value");
  return 0;
}
