// Path confinement: which storage references a loader may open.
#include "storage_impl.hpp"

namespace dice {

caf::error confine(const storage_ref& ref, const storage_options& opts) {
  auto refuse = [&](const std::string& why) {
    count(trust_event::message_rejected);
    return make_error(errc::unauthorized,
                      "refused storage reference '" + ref.path.substr(0, 256)
                        + "': " + why);
  };
  // A plain name this library could have made: "dice." and then no path
  // separator, no parent reference, nothing a shell or kernel treats
  // specially.
  auto plain = [](const std::string& name) {
    if (name.size() < 6 || name.size() > 240
        || name.compare(0, 5, "dice.") != 0)
      return false;
    if (name.find("..") != std::string::npos)
      return false;
    for (auto c : name)
      if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_'
            || c == '-'))
        return false;
    return true;
  };
  if (ref.kind == storage_kind::shm) {
    if (ref.path.empty() || ref.path[0] != '/' || !plain(ref.path.substr(1)))
      return refuse("not a dice shared-memory name");
    return caf::none;
  }
  if (ref.kind != storage_kind::file)
    return refuse("unknown kind");
  std::filesystem::path path{ref.path};
  auto name = path.filename().string();
  if (!plain(name))
    return refuse("not a dice file name");
  std::error_code ec;
  auto dir = std::filesystem::canonical(path.parent_path(), ec);
  if (ec)
    return refuse("its directory cannot be resolved: " + ec.message());
  auto own = std::filesystem::canonical(opts.dirname, ec);
  if (ec)
    return refuse("this loader's directory " + opts.dirname
                  + " cannot be resolved: " + ec.message());
  if (dir != own)
    return refuse("outside this loader's directory " + own.string());
  return caf::none;
}

} // namespace dice
