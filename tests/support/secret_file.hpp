#pragma once

// A cluster secret in a private temporary file for multi-process tests;
// the file and its directory go with the object.

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace dice::test {

/// The cluster secret of in-process tests (32 bytes).
inline const std::string secret_1 = "0123456789abcdef0123456789abcdef";
/// Another cluster's secret, for tests of nodes that must not meet.
inline const std::string secret_2 = "fedcba9876543210fedcba9876543210";

/// A secret file in a fresh temporary directory.
struct secret_file {
  /// The directory (mode 0700 by umask).
  std::filesystem::path dir;
  /// The file (mode 0600).
  std::string path;

  /// Writes `secret` (at least 16 bytes for dice to accept it).
  explicit secret_file(
    const std::string& secret = "0123456789abcdef0123456789abcdef") {
    namespace fs = std::filesystem;
    static int counter = 0;
    dir = fs::temp_directory_path()
      / ("dice-secret-" + std::to_string(::getpid()) + "-"
         + std::to_string(counter++));
    fs::create_directories(dir);
    path = (dir / "secret").string();
    std::ofstream{path} << secret << "\n";
    fs::permissions(path, fs::perms::owner_read | fs::perms::owner_write,
                    fs::perm_options::replace);
  }

  secret_file(const secret_file&) = delete;
  secret_file& operator=(const secret_file&) = delete;

  ~secret_file() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }

  /// "--dice.secret-file=PATH".
  std::string flag() const {
    return "--dice.secret-file=" + path;
  }
};

} // namespace dice::test
