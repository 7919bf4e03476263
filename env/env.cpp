#include "dice/env/env.hpp"

namespace dice {

env::~env() = default;

} // namespace dice
