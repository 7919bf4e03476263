// mujoco_bench: the modes are in mujoco_bench.hpp.

#include "mujoco_bench.hpp"

#include <cstring>
#include <vector>

int main(int argc, char** argv) {
  // The dice mode's options are dice::run's (CAF's parser); the loops'
  // are bench_options'. dice-launch puts its --dice.* options before the
  // program's own, so "dice" may come anywhere.
  std::vector<char*> rest{argv[0]};
  bool through_dice = false;
  for (int i = 1; i < argc; ++i) {
    if (!through_dice && std::strcmp(argv[i], "dice") == 0)
      through_dice = true;
    else
      rest.push_back(argv[i]);
  }
  if (through_dice)
    return dice::bench::mujoco::dice_main(static_cast<int>(rest.size()),
                                          rest.data());
  return dice::bench::mujoco::loops_main(argc, argv);
}
