"""Validation of the snapshots a test made, for the test harnesses (standard
library only: they run under meson's python3, which may not see jsonschema).

tools/validate_snapshot.py does the work, run by the first interpreter that
can import jsonschema 4.0 or newer: those GMT_TEST_SCHEMA_PYTHON names (a
list separated by ':', set by tests/meson.build), else this interpreter and
/usr/bin/python3. None can: one problem saying to install python3-jsonschema,
so that a test that validates fails rather than passing unchecked.
NOTE: the interpreter is chosen when the test runs, not when meson
configures, so installing the package later needs no reconfiguration.
"""

from __future__ import annotations

import functools
import glob
import os
import subprocess
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir))
VALIDATOR = os.path.join(ROOT, "tools", "validate_snapshot.py")
SCHEMA = os.path.join(ROOT, "docs", "snapshot.schema.json")
PROBE = "from jsonschema import Draft202012Validator"


def candidates() -> list[str]:
    """The interpreters to try, in order."""
    named = os.environ.get("GMT_TEST_SCHEMA_PYTHON", "")
    if named:
        return [p for p in named.split(":") if p]
    return [sys.executable, "/usr/bin/python3"]


@functools.lru_cache(maxsize=None)
def schema_python() -> str | None:
    """The first candidate that can import jsonschema's draft 2020-12
    validator, or None."""
    for python in candidates():
        try:
            probe = subprocess.run([python, "-c", PROBE], stdin=subprocess.DEVNULL,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if probe.returncode == 0:
            return python
    return None


def snapshot_files(directory: str) -> list[str]:
    """The snapshots in directory (by the writer's naming; its temporary
    files start with a dot), sorted."""
    return sorted(glob.glob(os.path.join(glob.escape(directory), "gpumemtrace.*.json")))


def validate(paths: list[str]) -> list[str]:
    """One line per schema problem of the files in paths ("FILE: POINTER:
    message"), or the one line saying why they could not be checked."""
    if not paths:
        return []
    python = schema_python()
    if python is None:
        return [f"no Python interpreter here can import jsonschema 4.0 or newer (tried "
                f"{', '.join(candidates())}) to check snapshots against {SCHEMA}: install "
                "python3-jsonschema (scripts/test installs it)"]
    proc = subprocess.run([python, VALIDATOR, "--schema", SCHEMA, "--quiet"] + list(paths),
                          stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, timeout=300)
    if proc.returncode == 0:
        return []
    lines = [line for line in proc.stdout.splitlines() if line]
    if proc.returncode != 1 or not lines:
        lines.append(f"{VALIDATOR} under {python} exited {proc.returncode}: {proc.stderr.strip()[-500:]}")
    return ["schema: " + line for line in lines]
