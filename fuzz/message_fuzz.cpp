// CAF deserialization of dice's messages, as BASP does for every frame from
// a peer: the first byte picks the type, the rest is the serialized value.
// A decoded snapshot then goes through validate() like the model exchanger
// does before touching a byte of it.

#include "dice/messages/context_delta.hpp"
#include "dice/messages/detail/peer_hello.hpp"
#include "dice/messages/model_snapshot.hpp"

#include "caf/binary_deserializer.hpp"
#include "caf/message.hpp"

#include "fuzz_common.hpp"

#include <cstdint>
#include <cstring>

namespace {

template <class T>
T decode(caf::binary_deserializer& source, bool& ok) {
  T x;
  ok = !source(x);
  return x;
}

void check_snapshot(const dice::model_snapshot& s) {
  if (dice::validate(s))
    return;
  // A valid snapshot's tensors lie inside its buffer: read every byte the
  // index names (ASan catches any read outside).
  std::uint64_t sum = 0;
  for (auto& e : s.index)
    for (std::uint64_t i = 0; i < e.nbytes; ++i)
      sum += s.data.data()[e.offset + i];
  static volatile std::uint64_t sink;
  sink = sum;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data,
                                      std::size_t size) {
  if (size < 1)
    return 0;
  auto& sys = fuzz::system();
  caf::binary_deserializer source{sys, reinterpret_cast<const char*>(data + 1),
                                  size - 1};
  bool ok = false;
  switch (data[0] % 5) {
    case 0: decode<dice::context_delta>(source, ok); break;
    case 1: {
      auto s = decode<dice::model_snapshot>(source, ok);
      if (ok)
        check_snapshot(s);
      break;
    }
    case 2: decode<dice::peer_hello>(source, ok); break;
    case 3: {
      // Any registered type, by name, as the content of a BASP message.
      auto m = decode<caf::message>(source, ok);
      if (ok && m.match_elements<dice::model_snapshot>())
        check_snapshot(m.get_as<dice::model_snapshot>(0));
      break;
    }
    default: decode<dice::finish>(source, ok); break;
  }
  return 0;
}
