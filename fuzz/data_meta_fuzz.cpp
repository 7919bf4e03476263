// A data-plane snapshot header (net/data_meta.hpp), as a peer's reader
// thread decodes it before its router routes the snapshot. Nothing may
// crash or allocate beyond the input's size, and what decodes must encode
// back to the same bytes (the format has one encoding per value).

#include "net/data_meta.hpp"

#include <cstdint>
#include <cstdlib>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data,
                                      std::size_t size) {
  auto x = dice::net::decode_meta(reinterpret_cast<const char*>(data), size);
  if (!x)
    return 0;
  auto again = dice::net::encode_meta(x->topic, x->sender, x->header);
  if (again != std::string{reinterpret_cast<const char*>(data), size})
    std::abort();
  return 0;
}
