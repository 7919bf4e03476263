#pragma once

// How a data connection proves that it belongs to one control session
// (net/data_plane.hpp). OpenSSL does the cryptography (X25519, HMAC-SHA256);
// these functions only fix what goes into it.
//
// On the control session (the router hello over BASP, authenticated by the
// cluster secret's challenge-response) the attacher sends an ephemeral
// X25519 public key, the acceptor answers with its own. Both derive
//
//   K = HMAC-SHA256(secret, "dice-data-session" | acceptor node[4]
//                   | attacher node[4] | pub_attacher | pub_acceptor | dh)
//
// (dh: the X25519 shared secret; an empty key without a cluster secret). A
// data connection then opens with dice's preamble, TLS when TLS is on, and
//
//   bind  mac_d = HMAC(K, "dice-data-bind" | direction | binding | tls)
//   ack   mac_a = HMAC(K, "dice-data-ack" | direction | binding | tls
//                      | mac_d)
//
// where `binding` is the connection's preamble nonces (fresh on both sides,
// so a recorded bind is worthless on another connection) and `tls` the TLS
// exporter value (empty without TLS: the proof does not verify in another
// TLS session). K is never sent; a new hello (reconnect, restart) makes a
// new K, so nothing of an older session binds.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace dice::net {

/// Length of an X25519 public key and of every MAC here.
inline constexpr std::size_t data_key_size = 32;

/// One side's ephemeral X25519 key pair for one control session.
class data_offer {
 public:
  /// A fresh key pair (nullptr if OpenSSL failed).
  static std::shared_ptr<data_offer> make();

  data_offer(const data_offer&) = delete;
  data_offer& operator=(const data_offer&) = delete;
  ~data_offer();

  /// The public key (`data_key_size` bytes), sent in the hello.
  const std::string& pub() const noexcept {
    return pub_;
  }

  /// X25519 with the other side's public key; nullopt if `their_pub` is
  /// malformed (wrong size, a low-order point).
  std::optional<std::string> agree(const std::string& their_pub) const;

 private:
  data_offer() = default;

  void* key_ = nullptr; // EVP_PKEY
  std::string pub_;
};

/// The session key K (see the file comment).
std::string data_session_key(const std::string& secret, std::uint32_t acceptor,
                             std::uint32_t attacher,
                             const std::string& pub_attacher,
                             const std::string& pub_acceptor,
                             const std::string& dh);

/// The dialer's proof in the bind frame.
std::string data_bind_mac(const std::string& key, std::uint8_t direction,
                          const std::string& binding, const std::string& tls);

/// The acceptor's proof in the ack.
std::string data_ack_mac(const std::string& key, std::uint8_t direction,
                         const std::string& binding, const std::string& tls,
                         const std::string& bind_mac);

} // namespace dice::net
