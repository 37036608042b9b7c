"""The gpumemtrace command where the package was installed from a wheel: the
`gpumemtrace` script pip makes runs main(), as does `python -m gpumemtrace`.
`view` runs the viewer in this Python; every other command is the
command-line program the wheel carries (_native/bin/gpumemtrace), which
finds the tracer and this package beside itself (docs/install.md)."""

from __future__ import annotations

import os
import sys
from typing import List, Optional


def main(argv: Optional[List[str]] = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    if args[:1] == ["view"]:
        from .view.cli import main as view
        return view(args[1:])
    native = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_native", "bin", "gpumemtrace")
    if not os.access(native, os.X_OK):
        print(f"gpumemtrace: this copy of the package has no command (no {native}): it comes with the "
              "wheel (docs/install.md); a source or Meson install has its own bin/gpumemtrace",
              file=sys.stderr)
        return 125
    try:
        os.execv(native, ["gpumemtrace"] + args)
    except OSError as e:
        print(f"gpumemtrace: cannot run {native}: {e.strerror}", file=sys.stderr)
        return 125


if __name__ == "__main__":
    sys.exit(main())
