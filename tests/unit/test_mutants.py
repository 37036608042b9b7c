#!/usr/bin/env python3
"""The mutation check's lists (scripts/mutants, docs/reliability.md "Tests
that notice") still apply: every *.mutants file parses, names only tests
that exist, and each mutant's `find` matches exactly one line of its file —
so that a change of the code that moves a planted bug's line is told here,
not found out at the next (slow) mutation run. Also the runner's own rules:
a mutant that matches no line, or two, is stale; the indentation is kept.

usage: test_mutants.py SOURCE_ROOT BUILD_ROOT
(the build's tests are read with `meson introspect --tests`)
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

FAILURES = []


def check(ok: bool, what: str, detail: object = "") -> None:
    print(("ok   " if ok else "FAIL ") + what + ("" if ok or detail == "" else f": {detail}"))
    if not ok:
        FAILURES.append(what)


def main(argv: list) -> int:
    root, build = argv[1], argv[2]
    meson = shutil.which("meson")
    if meson is None:
        print("FAIL no meson on PATH to list the build's tests")
        return 1
    listed = subprocess.run([meson, "introspect", "--tests", build], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    if listed.returncode != 0:
        print(f"FAIL meson introspect --tests {build}: {listed.stderr.strip()}")
        return 1
    tests = {t["name"] for t in json.loads(listed.stdout)}
    sys.path.insert(0, os.path.join(root, "scripts"))
    import mutants  # noqa: E402

    m = mutants.Mutant("x", "f.c", find="if (a && b)", replace="if (a)", where="t:1")
    check(mutants.mutate("x\n\tif (a && b)\ny", m) == "x\n\tif (a)\ny", "a mutant keeps the line's indentation")
    for text, n in (("if (a && b)\nif (a && b)", 2), ("nothing", 0)):
        try:
            mutants.mutate(text, m)
            check(False, f"a find that matches {n} lines is stale")
        except mutants.MutantsError as e:
            check(f"matches {n} lines" in str(e), f"a find that matches {n} lines is stale", e)

    count = 0
    for path in mutants.lists():
        try:
            found = mutants.parse(path)
        except mutants.MutantsError as e:
            check(False, f"{path} parses", e)
            continue
        for mu in found:
            count += 1
            with open(os.path.join(root, mu.target), encoding="utf-8") as f:
                text = f.read()
            try:
                mutants.line_of(text, mu.find, mu.where)
                applies = True
            except mutants.MutantsError as e:
                applies = False
                check(False, f"{mu.where}: {mu.name!r} still applies", e)
            unknown = [t for t in mu.tests if t not in tests]
            check(not unknown, f"{mu.where}: {mu.name!r} names tests that exist", unknown)
            if applies and not unknown:
                check(True, f"{mu.where}: {mu.name!r}")
    print(f"{count} mutants checked, {len(FAILURES)} problems")
    return 1 if FAILURES or count == 0 else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
