// mujoco_bench: the modes are in mujoco_bench.hpp.

#include "mujoco_bench.hpp"

#include <cstring>

int main(int argc, char** argv) {
  // The dice mode's options are dice::run's (CAF's parser); the loops'
  // are bench_options'.
  if (argc > 1 && std::strcmp(argv[1], "dice") == 0)
    return dice::bench::mujoco::dice_main(argc - 1, argv + 1);
  return dice::bench::mujoco::loops_main(argc, argv);
}
