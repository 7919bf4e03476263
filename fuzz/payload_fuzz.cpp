// Boost payloads as a peer could send them: the first byte picks the item
// type and the claimed count, the rest are the archive bytes.

#include "dice/messages/payload.hpp"

#include "fuzz_common.hpp"

#include <cstdint>
#include <cstdlib>

namespace {

template <class T>
void try_unpack(const dice::payload& p) {
  auto res = dice::unpack<T>(p);
  // A success must honour the claimed count.
  if (res && res->size() != p.count)
    std::abort();
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data,
                                      std::size_t size) {
  if (size < 1)
    return 0;
  dice::payload p;
  p.bytes = dice::shared_bytes{
    std::vector<std::uint8_t>(data + 1, data + size)};
  p.count = data[0] >> 2;
  switch (data[0] & 3) {
    case 0: try_unpack<fuzz::item>(p); break;
    case 1: try_unpack<float>(p); break;
    case 2: try_unpack<std::string>(p); break;
    default: try_unpack<std::vector<double>>(p); break;
  }
  return 0;
}
