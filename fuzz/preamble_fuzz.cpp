// The first bytes a stranger sends to a node's port (and a hostile acceptor
// to a dialer): dice's preamble, both sides, with and without a secret, the
// input split at arbitrary points. Nothing may crash, a side must never ask
// for bytes past its current message, and a failed side stays failed.
//
// Input: one mode byte, then the bytes to feed.
//   bit 0: the fed side has the cluster secret
//   bit 1: feed the dialer (the bytes are an acceptor's); else the acceptor
//   bits 2-7: chunk size - 1 (how the bytes arrive)
// Nonces are fixed so a seed made from a genuine exchange completes.

#include "net/preamble.hpp"

#include <cstdint>
#include <cstdlib>
#include <string>

namespace {

const std::string secret = "0123456789abcdef0123456789abcdef";
const std::string dialer_nonce(32, '\x11');
const std::string acceptor_nonce(32, '\x22');

void check(bool ok) {
  if (!ok)
    std::abort();
}

template <class Side>
void drive(Side& side, const std::uint8_t* data, std::size_t size,
           std::size_t chunk, std::size_t max_message) {
  using dice::net::preamble_state;
  std::size_t pos = 0;
  while (pos < size && side.state() == preamble_state::running) {
    auto want = side.want();
    check(want > 0 && want <= max_message);
    auto n = std::min({want, chunk, size - pos});
    side.feed(reinterpret_cast<const char*>(data + pos), n);
    pos += n;
    auto out = side.take_output();
    check(out.size() <= dice::net::acceptor_hello_size);
  }
  if (side.state() != preamble_state::running) {
    check(side.want() == 0);
    // More bytes change nothing once the preamble ended.
    auto before = side.state();
    char extra = 'x';
    check(side.feed(&extra, 1) == before);
  }
  if (side.state() == preamble_state::failed)
    check(side.error() != dice::net::preamble_error::none);
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data,
                                      std::size_t size) {
  if (size < 1)
    return 0;
  auto mode = data[0];
  ++data;
  --size;
  auto key = (mode & 1) != 0 ? secret : std::string{};
  std::size_t chunk = (mode >> 2) + 1u;
  if ((mode & 2) != 0) {
    dice::net::preamble_dialer d{key, dialer_nonce,
                                 dice::net::channel::control};
    check(d.take_output().size() == dice::net::dialer_hello_size);
    drive(d, data, size, chunk, dice::net::acceptor_hello_size);
  } else {
    dice::net::preamble_acceptor a{key, acceptor_nonce};
    drive(a, data, size, chunk, dice::net::dialer_hello_size);
  }
  return 0;
}
