#pragma once

// Files a test reads, and a folder it writes into.

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace dice::test {

/// The whole content of `p` ("" if it cannot be read).
inline std::string read_all(const std::filesystem::path& p) {
  std::ifstream f{p};
  return {std::istreambuf_iterator<char>{f}, {}};
}

/// A fresh folder under the temp directory, removed at the end of the test.
struct scratch {
  std::filesystem::path dir;
  explicit scratch(const std::string& name)
    : dir(std::filesystem::temp_directory_path()
          / (name + "_" + std::to_string(::getpid()))) {
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
  }
  ~scratch() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
};

} // namespace dice::test
