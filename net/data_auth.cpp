#include "net/data_auth.hpp"

#include "dice/security/auth.hpp"

#include <openssl/evp.h>

namespace dice::net {

namespace {

EVP_PKEY* pkey(void* x) {
  return static_cast<EVP_PKEY*>(x);
}

std::string be32(std::uint32_t x) {
  std::string out(4, '\0');
  for (int i = 3; i >= 0; --i, x >>= 8)
    out[static_cast<std::size_t>(i)] = static_cast<char>(x & 0xff);
  return out;
}

// Labels end in a 0 byte: no label is a prefix of another's input.
std::string label(const char* x) {
  return std::string{x} + '\0';
}

} // namespace

std::shared_ptr<data_offer> data_offer::make() {
  std::shared_ptr<data_offer> result{new data_offer};
  auto key = EVP_PKEY_Q_keygen(nullptr, nullptr, "X25519");
  if (key == nullptr)
    return nullptr;
  result->key_ = key;
  std::size_t len = data_key_size;
  result->pub_.resize(len);
  if (EVP_PKEY_get_raw_public_key(
        key, reinterpret_cast<unsigned char*>(result->pub_.data()), &len)
        != 1
      || len != data_key_size)
    return nullptr;
  return result;
}

data_offer::~data_offer() {
  EVP_PKEY_free(pkey(key_));
}

std::optional<std::string> data_offer::agree(const std::string& their) const {
  if (their.size() != data_key_size)
    return std::nullopt;
  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> peer{
    EVP_PKEY_new_raw_public_key(
      EVP_PKEY_X25519, nullptr,
      reinterpret_cast<const unsigned char*>(their.data()), their.size()),
    EVP_PKEY_free};
  if (!peer)
    return std::nullopt;
  std::unique_ptr<EVP_PKEY_CTX, decltype(&EVP_PKEY_CTX_free)> ctx{
    EVP_PKEY_CTX_new(pkey(key_), nullptr), EVP_PKEY_CTX_free};
  std::string out(data_key_size, '\0');
  auto len = out.size();
  // Fails for a low-order point (an all-zero shared secret).
  if (!ctx || EVP_PKEY_derive_init(ctx.get()) != 1
      || EVP_PKEY_derive_set_peer(ctx.get(), peer.get()) != 1
      || EVP_PKEY_derive(ctx.get(),
                         reinterpret_cast<unsigned char*>(out.data()), &len)
        != 1
      || len != data_key_size)
    return std::nullopt;
  return out;
}

std::string data_session_key(const std::string& secret, std::uint32_t acceptor,
                             std::uint32_t attacher,
                             const std::string& pub_attacher,
                             const std::string& pub_acceptor,
                             const std::string& dh) {
  // Without a cluster secret the key rests on the X25519 exchange alone
  // (a fixed HMAC key: OpenSSL 3.0 refuses an empty one).
  auto key = secret.empty() ? label("dice-data-no-secret") : secret;
  return hmac_sha256(key,
                     label("dice-data-session") + be32(acceptor)
                       + be32(attacher) + pub_attacher + pub_acceptor + dh);
}

std::string data_bind_mac(const std::string& key, std::uint8_t direction,
                          const std::string& binding, const std::string& tls) {
  return hmac_sha256(key,
                     label("dice-data-bind") + static_cast<char>(direction)
                       + binding + tls);
}

std::string data_ack_mac(const std::string& key, std::uint8_t direction,
                         const std::string& binding, const std::string& tls,
                         const std::string& bind_mac) {
  return hmac_sha256(key,
                     label("dice-data-ack") + static_cast<char>(direction)
                       + binding + tls + bind_mac);
}

} // namespace dice::net
