#!/usr/bin/env python3
"""The Python package runs on Python 3.9 and newer (docs/viewer.md; the
wheel's requires-python): every module of tools/python/gpumemtrace (the
viewer, the API, the bootstrap, the pytest plugin) and tools/gpumemtrace-view
must parse as Python 3.9 (no `match`,
no parenthesised context managers…), import only the standard library, and
defer its annotations (`from __future__ import annotations`), so that
`X | None` in a hint is never evaluated. CI machines have one Python (3.11
on Debian 12); this keeps the older ones honest without them.

Usage: test_py39.py TOOLS_DIR
"""

from __future__ import annotations

import ast
import os
import sys

# What the viewer may import: the standard library and itself.
STDLIB = set(getattr(sys, "stdlib_module_names", ())) or None


def sources(tools: str) -> list:
    out = [os.path.join(tools, "gpumemtrace-view")]
    pkg = os.path.join(tools, "python", "gpumemtrace")
    for dirpath, dirnames, names in os.walk(pkg):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        out += [os.path.join(dirpath, n) for n in sorted(names) if n.endswith(".py")]
    return out


# What a module may import beyond the standard library: the package itself,
# and pytest in the pytest plugin.
ALLOWED = {"pytest_plugin.py": {"pytest"}}


def problems(path: str) -> list:
    with open(path, encoding="utf-8") as f:
        text = f.read()
    try:
        tree = ast.parse(text, filename=path, feature_version=(3, 9))
    except SyntaxError as e:
        return [f"{path}:{e.lineno}: not Python 3.9: {e.msg}"]
    out = []
    future = any(isinstance(n, ast.ImportFrom) and n.module == "__future__"
                 and any(a.name == "annotations" for a in n.names) for n in tree.body)
    has_hints = any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and
                    (n.returns is not None or any(a.annotation for a in n.args.args))
                    for n in ast.walk(tree))
    if has_hints and not future and path.endswith(".py"):
        out.append(f"{path}: annotations without 'from __future__ import annotations'")
    for n in ast.walk(tree):
        names = []
        if isinstance(n, ast.Import):
            names = [a.name for a in n.names]
        elif isinstance(n, ast.ImportFrom) and n.level == 0 and n.module:
            names = [n.module]
        for name in names:
            top = name.split(".")[0]
            if top in ("gpumemtrace", "__future__") or top in ALLOWED.get(os.path.basename(path), ()):
                continue
            if STDLIB is not None and top not in STDLIB:
                out.append(f"{path}:{n.lineno}: imports {name}, not in the standard library")
    return out


def main() -> int:
    found = []
    files = sources(sys.argv[1])
    for path in files:
        found += problems(path)
    for p in found:
        print("FAIL", p, file=sys.stderr)
    print(f"{len(files)} sources of the package checked for Python 3.9: {len(found)} problems")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
