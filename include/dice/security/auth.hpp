#pragma once

// The cluster secret and TLS settings: proving knowledge of a shared secret
// (HMAC-SHA256 challenge-response, OpenSSL) and checking certificate files
// before CAF's openssl module sees them (it aborts the process on a bad
// path, and silently falls back to unauthenticated TLS when none is set).

#include "caf/error.hpp"
#include "caf/expected.hpp"

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

namespace dice {

/// Shortest secret dice accepts (bytes).
inline constexpr std::size_t min_secret_bytes = 16;

/// `n` bytes from OpenSSL's CSPRNG.
std::string random_nonce(std::size_t n = 32);

/// HMAC-SHA256 of `data` under `key` (32 raw bytes).
std::string hmac_sha256(const std::string& key, const std::string& data);

/// HMAC-SHA256 under `key` of `parts` one after the other (not copied).
std::string hmac_sha256(const std::string& key,
                        std::initializer_list<std::string_view> parts);

/// Refuses a file dice reads back (a stored item, a checkpoint) that
/// another user owns or that group or others may write (`uid` and `mode`
/// from its stat): another local user could have planted or changed it.
caf::error refuse_foreign_file(std::uint32_t uid, std::uint32_t mode,
                               const std::string& path);

/// The key a node's context spool authenticates its records with, derived
/// from the cluster secret (empty without one: records get a checksum only).
std::string spool_key(const std::string& secret);

/// SHA-256 of `n` bytes at `data` (32 raw bytes; OpenSSL EVP).
std::string sha256(const void* data, std::size_t n);

/// Constant-time equality of two MACs.
bool same_mac(const std::string& x, const std::string& y) noexcept;

/// What the accepting node answers to a challenge `nonce_a` with its own
/// `nonce_b`: proves it knows the secret (the attacher checks it).
std::string acceptor_proof(const std::string& secret,
                           const std::string& nonce_a,
                           const std::string& nonce_b);

/// What the attaching node (`node`) sends with its hello: proves it knows the
/// secret. Differs from acceptor_proof in label and order, so one cannot be
/// replayed as the other.
std::string attacher_proof(const std::string& secret,
                           const std::string& nonce_a,
                           const std::string& nonce_b, std::uint32_t node);

/// Reads a secret from a file (a trailing newline is dropped); refuses an
/// unreadable file or one shorter than `min_secret_bytes`.
caf::expected<std::string> load_secret(const std::string& path);

/// TLS settings (CAF's openssl.* options).
struct tls_files {
  /// PEM certificate of this node.
  std::string certificate;
  /// PEM private key of the certificate.
  std::string key;
  /// PEM certificate(s) of the CA that signed every node's certificate.
  std::string cafile;

  /// True when any file is set (TLS wanted).
  bool any() const noexcept {
    return !certificate.empty() || !key.empty() || !cafile.empty();
  }
};

/// Checks TLS settings before CAF starts using them: all three set, readable,
/// valid PEM, the key matches the certificate and the CA verifies it.
/// `errc::invalid_config` with the reason otherwise.
caf::error validate(const tls_files& x);

} // namespace dice
