#include "net/preamble.hpp"

#include "dice/core/errc.hpp"
#include "dice/security/auth.hpp"

#include <algorithm>
#include <cstring>

namespace dice::net {

namespace {

constexpr std::uint8_t secret_flag = 0x01;
constexpr std::size_t header_size = 8; // magic, version, flags, 2 reserved
constexpr std::size_t mac_size = 32;

const std::string accept_label{"dice-preamble-accept"};
const std::string dial_label{"dice-preamble-dial"};
const std::string no_mac(mac_size, '\0');

std::uint8_t byte_at(const std::string& x, std::size_t i) {
  return static_cast<std::uint8_t>(x[i]);
}

std::string header(bool has_secret, std::uint8_t channels) {
  std::string result(preamble_magic, sizeof(preamble_magic));
  result.push_back(static_cast<char>(preamble_version));
  result.push_back(static_cast<char>(has_secret ? secret_flag : 0));
  result.push_back(static_cast<char>(channels));
  result.push_back('\0');
  return result;
}

// Checks what has arrived of a hello so far: the magic byte by byte (a
// stranger is refused at its first wrong byte), then flags and reserved
// bytes (byte 6 is the acceptor's channel set, 0 from a dialer). The
// version is checked by the caller once the hello is complete.
bool plausible_hello(const std::string& buf, bool from_acceptor) {
  auto n = std::min(buf.size(), sizeof(preamble_magic));
  if (std::memcmp(buf.data(), preamble_magic, n) != 0)
    return false;
  if (buf.size() > 5 && (byte_at(buf, 5) & ~secret_flag) != 0)
    return false;
  if (buf.size() > 6 && !from_acceptor && byte_at(buf, 6) != 0)
    return false;
  if (buf.size() > 7 && byte_at(buf, 7) != 0)
    return false;
  return true;
}

std::uint8_t channel_bit(channel x) {
  auto c = static_cast<unsigned>(x);
  return c >= 1 && c <= 8 ? static_cast<std::uint8_t>(1u << (c - 1)) : 0;
}

bool has_secret_flag(const std::string& hello) {
  return (byte_at(hello, 5) & secret_flag) != 0;
}

std::string mac(const std::string& secret, const std::string& label,
                const std::string& data) {
  if (secret.empty())
    return no_mac;
  return hmac_sha256(secret, label + data);
}

// Appends up to `want` bytes to `buf`; false if the driver gave more.
bool take(std::string& buf, std::size_t want, const char* data,
          std::size_t size) {
  if (size > want)
    return false;
  buf.append(data, size);
  return true;
}

} // namespace

bool known(channel x) noexcept {
  return x == channel::control || x == channel::data;
}

std::uint8_t served_channels() noexcept {
  return channel_bit(channel::control) | channel_bit(channel::data);
}

const char* to_string(preamble_error x) noexcept {
  switch (x) {
    case preamble_error::none: return "no error";
    case preamble_error::not_dice: return "not dice's preamble";
    case preamble_error::version: return "another preamble version";
    case preamble_error::dialer_lacks_secret:
      return "the dialer has no cluster secret";
    case preamble_error::acceptor_lacks_secret:
      return "the acceptor has no cluster secret";
    case preamble_error::bad_proof: return "wrong cluster secret";
    case preamble_error::unknown_channel: return "unknown channel";
  }
  return "unknown preamble error";
}

// -- acceptor -----------------------------------------------------------------

preamble_acceptor::preamble_acceptor(std::string secret, std::string nonce)
  : secret_(std::move(secret)), nonce_(std::move(nonce)) {
  nonce_.resize(preamble_nonce_size, '\0');
}

std::size_t preamble_acceptor::want() const noexcept {
  if (state_ != preamble_state::running)
    return 0;
  auto total = hello_done_ ? dialer_proof_size : dialer_hello_size;
  return total - buf_.size();
}

preamble_state preamble_acceptor::fail(preamble_error why) {
  error_ = why;
  state_ = preamble_state::failed;
  return state_;
}

preamble_state preamble_acceptor::feed(const char* data, std::size_t size) {
  if (state_ != preamble_state::running)
    return state_;
  if (!take(buf_, want(), data, size))
    return fail(preamble_error::not_dice);
  if (!hello_done_) {
    if (!plausible_hello(buf_, false))
      return fail(preamble_error::not_dice);
    return buf_.size() == dialer_hello_size ? on_hello() : state_;
  }
  return buf_.size() == dialer_proof_size ? on_proof() : state_;
}

preamble_state preamble_acceptor::on_hello() {
  dialer_hello_ = std::move(buf_);
  buf_.clear();
  hello_done_ = true;
  acceptor_hello_ = header(!secret_.empty(), served_channels()) + nonce_;
  acceptor_hello_ += mac(secret_, accept_label,
                         dialer_hello_ + acceptor_hello_);
  // The hello goes out even when refusing, so a genuine dialer can say why
  // (another version, a secret missing on one side).
  out_ += acceptor_hello_;
  if (byte_at(dialer_hello_, 4) != preamble_version)
    return fail(preamble_error::version);
  if (!secret_.empty() && !has_secret_flag(dialer_hello_))
    return fail(preamble_error::dialer_lacks_secret);
  return state_;
}

preamble_state preamble_acceptor::on_proof() {
  auto proof = std::move(buf_);
  buf_.clear();
  if (byte_at(proof, 1) != 0 || byte_at(proof, 2) != 0
      || byte_at(proof, 3) != 0)
    return fail(preamble_error::not_dice);
  if (!secret_.empty()) {
    auto expected = mac(secret_, dial_label,
                        dialer_hello_ + acceptor_hello_ + proof.substr(0, 4));
    if (!same_mac(proof.substr(4), expected))
      return fail(preamble_error::bad_proof);
  }
  auto ch = static_cast<channel>(byte_at(proof, 0));
  if (!known(ch))
    return fail(preamble_error::unknown_channel);
  channel_ = ch;
  state_ = preamble_state::done;
  return state_;
}

std::string preamble_acceptor::binding() const {
  if (dialer_hello_.size() < header_size + preamble_nonce_size)
    return {};
  return dialer_hello_.substr(header_size, preamble_nonce_size) + nonce_;
}

std::string preamble_acceptor::take_output() {
  std::string result;
  result.swap(out_);
  return result;
}

// -- dialer -------------------------------------------------------------------

preamble_dialer::preamble_dialer(std::string secret, std::string nonce,
                                 channel ch)
  : secret_(std::move(secret)), channel_(ch) {
  nonce.resize(preamble_nonce_size, '\0');
  dialer_hello_ = header(!secret_.empty(), 0) + nonce;
  out_ = dialer_hello_;
}

std::size_t preamble_dialer::want() const noexcept {
  if (state_ != preamble_state::running)
    return 0;
  return acceptor_hello_size - buf_.size();
}

preamble_state preamble_dialer::fail(preamble_error why) {
  error_ = why;
  state_ = preamble_state::failed;
  return state_;
}

preamble_state preamble_dialer::feed(const char* data, std::size_t size) {
  if (state_ != preamble_state::running)
    return state_;
  if (!take(buf_, want(), data, size))
    return fail(preamble_error::not_dice);
  if (!plausible_hello(buf_, true))
    return fail(preamble_error::not_dice);
  return buf_.size() == acceptor_hello_size ? on_hello() : state_;
}

preamble_state preamble_dialer::on_hello() {
  acceptor_hello_ = std::move(buf_);
  buf_.clear();
  if (byte_at(acceptor_hello_, 4) != preamble_version)
    return fail(preamble_error::version);
  auto theirs = has_secret_flag(acceptor_hello_);
  if (theirs && secret_.empty())
    return fail(preamble_error::dialer_lacks_secret);
  if (!theirs && !secret_.empty())
    return fail(preamble_error::acceptor_lacks_secret);
  if (!secret_.empty()) {
    auto body = acceptor_hello_.substr(0, header_size + preamble_nonce_size);
    auto expected = mac(secret_, accept_label, dialer_hello_ + body);
    if (!same_mac(acceptor_hello_.substr(body.size()), expected))
      return fail(preamble_error::bad_proof);
  }
  if ((byte_at(acceptor_hello_, 6) & channel_bit(channel_)) == 0)
    return fail(preamble_error::unknown_channel);
  std::string proof(4, '\0');
  proof[0] = static_cast<char>(channel_);
  proof += mac(secret_, dial_label, dialer_hello_ + acceptor_hello_ + proof);
  out_ += proof;
  state_ = preamble_state::done;
  return state_;
}

std::string preamble_dialer::binding() const {
  if (acceptor_hello_.size() < header_size + preamble_nonce_size)
    return {};
  return dialer_hello_.substr(header_size, preamble_nonce_size)
    + acceptor_hello_.substr(header_size, preamble_nonce_size);
}

std::string preamble_dialer::take_output() {
  std::string result;
  result.swap(out_);
  return result;
}

caf::error dialer_failure(preamble_error why) {
  switch (why) {
    case preamble_error::version:
      return make_error(errc::handshake_failed,
                        "the peer speaks another dice preamble version (this "
                        "node: v"
                          + std::to_string(preamble_version) + ")");
    case preamble_error::dialer_lacks_secret:
      return make_error(errc::unauthorized,
                        "the peer requires the cluster secret and this node "
                        "has none (--dice.secret-file)");
    case preamble_error::acceptor_lacks_secret:
      return make_error(errc::unauthorized,
                        "the peer has no cluster secret; this node has one "
                        "and refuses it");
    case preamble_error::bad_proof:
      return make_error(errc::unauthorized,
                        "the peer does not know the cluster secret");
    case preamble_error::unknown_channel:
      return make_error(errc::handshake_failed,
                        "the peer does not serve the requested channel");
    default:
      return make_error(errc::handshake_failed,
                        "the peer did not answer with dice's preamble (not a "
                        "dice node of this version?)");
  }
}

} // namespace dice::net
