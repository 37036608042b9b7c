"""gpumemtrace view: `python3 -m gpumemtrace.view FILE…`, or this file run by
path (what `gpumemtrace view` does: `python3 -I …/gpumemtrace/view/__main__.py`,
isolated, so that neither the working directory nor this one shadows a
module of the standard library). docs/viewer.md says what it does."""

import os
import sys

if __package__ in (None, ""):
    # Run by path: the package's parent is what makes `gpumemtrace.view`
    # importable (the directory that holds the package, and only that one
    # where gpumemtrace is installed apart; a Python environment's
    # site-packages where it was installed there).
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__)))))

from gpumemtrace.view.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
