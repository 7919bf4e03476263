#pragma once

// TLS on data connections (net/data_plane.hpp): the same certificate, key,
// CA and verification as CAF's openssl session on the control connection
// (both sides present a certificate the CA signed; TLS_method, "HIGH:!aNULL:
// !MD5"), on a blocking socket that already passed dice's preamble. OpenSSL
// does the work; only the settings live here.

#include "dice/security/auth.hpp"
#include "net/data_plane.hpp"

#include "caf/expected.hpp"

#include <openssl/ssl.h>

#include <memory>
#include <string>

namespace dice::net {

/// A TLS context built from a node's TLS files.
class data_tls {
 public:
  /// Loads and checks the files; an error says why not.
  static caf::expected<std::shared_ptr<data_tls>> make(const tls_files& files);

  data_tls(const data_tls&) = delete;
  data_tls& operator=(const data_tls&) = delete;
  ~data_tls();

  /// Runs the TLS handshake on blocking `fd` (its SO_RCVTIMEO/SO_SNDTIMEO
  /// bound the wait); the peer's certificate is verified against the CA.
  caf::expected<ssl_ptr> handshake(int fd, bool accepting) const;

 private:
  data_tls() = default;

  SSL_CTX* ctx_ = nullptr;
};

/// 32 bytes of TLS exporter output for the data plane's proofs (RFC 5705):
/// differs in every TLS session.
std::string tls_binding(SSL* ssl);

/// OpenSSL's error queue as text (emptied).
std::string ssl_errors();

} // namespace dice::net
