"""python3 -m dice.launch [options] -- python3 my_pipeline.py [args]

Starts a dice cluster of Python (or C++) nodes: runs dice-launch, with every
one of its options (--workers, --learners, --secret-file, --max-restarts,
TLS and the rest: ``python3 -m dice.launch --help``). Each node gets its
--dice.* settings after the script's own arguments, where dice.run reads
them.
"""

import os
import shutil
import sys


def launcher():
    """Path of the dice-launch this package belongs to: $DICE_LAUNCH, else
    the bin/ beside the build or install prefix the package sits in
    (build/python/dice, PREFIX/lib/python3.X/dist-packages/dice), else PATH."""
    path = os.environ.get("DICE_LAUNCH")
    if path:
        return path
    here = os.path.dirname(os.path.abspath(__file__))
    for up in range(2, 6):
        root = os.path.join(here, *[".."] * up)
        candidate = os.path.normpath(os.path.join(root, "bin", "dice-launch"))
        if os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which("dice-launch")
    if found:
        return found
    raise SystemExit("dice.launch: dice-launch not found (build dice, or set "
                     "DICE_LAUNCH to its path)")


def main(argv=None):
    args = sys.argv[1:] if argv is None else list(argv)
    path = launcher()
    os.execv(path, [path] + args)


if __name__ == "__main__":
    main()
