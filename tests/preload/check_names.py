#!/usr/bin/env python3
"""A name the program made cannot forge a line of the tracer's reports
(docs/reliability.md, "One message, one line").

forged_name.c allocates in a function whose symbol is "gmt_forged_grow", a
newline and "snapshot: /etc/passwd", runs out of memory with that block live
(the out-of-memory report's top site) and exits with it (the leak report's
frame). Every stderr line must be one of the tracer's own: no line says
"snapshot: /etc/passwd"; the name appears escaped (\\x0a) in both reports;
the snapshots keep the name as it is and pass the schema.

Usage: check_names.py PROGRAM --lib LIBGPUMEMTRACE
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "schema"))
import schema_check  # noqa: E402
from preload_env import env_of, finish  # noqa: E402

NAME = "gmt_forged_grow\nsnapshot: /etc/passwd"
ESCAPED = "gmt_forged_grow\\x0asnapshot: /etc/passwd"


def names_in(doc: object) -> bool:
    """Whether the raw name is a string somewhere in the document."""
    if isinstance(doc, str):
        return doc == NAME or doc.startswith(NAME + " ")
    if isinstance(doc, dict):
        return any(names_in(v) for v in doc.values())
    if isinstance(doc, list):
        return any(names_in(v) for v in doc)
    return False


def problems_of(program: str, lib: str, snapdir: str) -> list[str]:
    env = env_of(lib, GMTSIM_MEMORY="256M", GPUMEMTRACE_DIR=snapdir, GPUMEMTRACE_SNAPSHOT_ON="oom,exit",
                 GPUMEMTRACE_LEAK_CHECK="1", GPUMEMTRACE_LEAK_SCAN="0")
    run = subprocess.run([program], env=env, cwd=snapdir, capture_output=True,
                         text=True, errors="replace", timeout=120, check=False)
    problems = []
    if "PID " not in run.stdout:
        return [f"the program failed ({run.returncode}): {run.stderr[-500:]!r}"]
    lines = run.stderr.splitlines()
    for line in lines:
        if not line.startswith("gpumemtrace: "):
            problems.append(f"a stderr line not the tracer's: {line!r}")
        words = line[len("gpumemtrace: "):].strip()
        if words.startswith("snapshot:") and not words.startswith(("snapshot: " + snapdir, "snapshot: not written")):
            problems.append(f"a forged snapshot line: {line!r}")
    # The top sites, one line each after "top sites:".
    at = next((i for i, x in enumerate(lines) if x == "gpumemtrace:   top sites:"), len(lines))
    oom = [x for x in lines[at + 1:] if x.startswith("gpumemtrace:     ")][:1]
    if not oom or ESCAPED not in oom[0]:
        problems.append(f"the out-of-memory report's top site is not the escaped name: {oom!r}")
    if not any(ESCAPED in x and " in " in x and "#" in x for x in lines):
        problems.append("the leak report has no frame with the escaped name")
    snaps = schema_check.snapshot_files(snapdir)
    if len(snaps) < 2:
        problems.append(f"expected an oom and an exit snapshot, found {snaps}")
    problems += schema_check.validate(snaps)
    for path in glob.glob(os.path.join(snapdir, "gpumemtrace.*.oom.*.json")):
        with open(path, encoding="utf-8") as f:
            if not names_in(json.load(f)):
                problems.append(f"{path}: the name is not kept as it is")
    if problems:
        problems.append("stderr:\n" + run.stderr)
    return problems


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("program")
    ap.add_argument("--lib", required=True)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="gmt-names-") as snapdir:
        problems = problems_of(os.path.abspath(args.program), args.lib, snapdir)
    return finish(problems, "a newline in a function's name is escaped in both reports, kept in the snapshots")


if __name__ == "__main__":
    sys.exit(main())
