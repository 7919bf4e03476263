// dice::value encodings as a peer (or a Python program) could send them: the
// input is the encoding itself. A decoded value must encode back to the
// very same bytes (one encoding per value), and a list must unpack as a
// payload of its length.

#include "dice/messages/value.hpp"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data,
                                      std::size_t size) {
  dice::shared_bytes bytes{std::vector<std::uint8_t>(data, data + size)};
  // Tight limits too, so that the depth and ndim checks see both sides.
  dice::value_limits tight;
  tight.max_depth = 4;
  tight.max_ndim = 2;
  auto loose = dice::decode_value(bytes);
  if (dice::decode_value(bytes, tight) && !loose)
    std::abort(); // tighter limits accepted what the defaults refused
  if (!loose)
    return 0;
  auto again = dice::encode_value(*loose);
  if (!again || *again != bytes || dice::encoded_size(*loose) != size)
    std::abort();
  if (!(*loose == *loose))
    std::abort();
  // Arrays view the input in place (what malloc returns is aligned to 8,
  // the largest element size).
  auto aligned = reinterpret_cast<std::uintptr_t>(bytes.data()) % 8 == 0;
  std::vector<const dice::value*> todo{&*loose};
  while (!todo.empty()) {
    auto x = todo.back();
    todo.pop_back();
    if (aligned && x->kind == dice::value_kind::array && x->array.nbytes > 0
        && (x->array.data < bytes.data()
            || x->array.data + x->array.nbytes > bytes.data() + size))
      std::abort();
    for (auto& y : x->items)
      todo.push_back(&y);
  }
  if (loose->kind == dice::value_kind::list) {
    dice::payload p{bytes, loose->items.size(), 0, -1};
    std::vector<dice::value> out;
    if (dice::unpack_values_into(p, out) || out.size() != p.count)
      std::abort();
    p.count += 1;
    if (!dice::unpack_values_into(p, out) || out.size() != p.count - 1)
      std::abort();
  }
  return 0;
}
