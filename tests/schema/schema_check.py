"""Validation of the snapshots a test made, for the test harnesses (standard
library only: they run under meson's python3, which may not see jsonschema).

tools/validate_snapshot.py does the work, run by the first interpreter that
can import jsonschema 4.0 or newer: those GMT_TEST_SCHEMA_PYTHON names (a
list separated by ':', set by tests/meson.build), else this interpreter and
/usr/bin/python3 (each also with GMT_TEST_SCHEMA_PYTHONPATH in front of its
path, where a bundle of scripts/gpu-bundle sets it to the copy of jsonschema
it carries). None can: one problem saying to install python3-jsonschema,
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


def _with_pythonpath(extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = extra + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


@functools.lru_cache(maxsize=None)
def schema_runner() -> tuple[str, dict[str, str] | None] | None:
    """The first candidate that can import jsonschema's draft 2020-12
    validator, with the environment to run it in (None: this one), or None.
    Each candidate is tried as it is first, then with
    GMT_TEST_SCHEMA_PYTHONPATH (a bundle's copy of jsonschema, which
    scripts/gpu-bundle carries) in front of its path."""
    extra = os.environ.get("GMT_TEST_SCHEMA_PYTHONPATH", "")
    envs = [None, _with_pythonpath(extra)] if extra else [None]
    for python in candidates():
        for env in envs:
            try:
                probe = subprocess.run([python, "-c", PROBE], stdin=subprocess.DEVNULL, env=env,
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60)
            except (OSError, subprocess.TimeoutExpired):
                break
            if probe.returncode == 0:
                return python, env
    return None


def schema_python() -> str | None:
    """The interpreter of schema_runner(), or None."""
    runner = schema_runner()
    return runner[0] if runner else None


def snapshot_files(directory: str) -> list[str]:
    """The snapshots in directory (by the writer's naming; its temporary
    files start with a dot), sorted."""
    return sorted(glob.glob(os.path.join(glob.escape(directory), "gpumemtrace.*.json")))


def validate(paths: list[str]) -> list[str]:
    """One line per schema problem of the files in paths ("FILE: POINTER:
    message"), or the one line saying why they could not be checked."""
    if not paths:
        return []
    runner = schema_runner()
    if runner is None:
        return [f"no Python interpreter here can import jsonschema 4.0 or newer (tried "
                f"{', '.join(candidates())}) to check snapshots against {SCHEMA}: install "
                "python3-jsonschema (scripts/test installs it)"]
    python, env = runner
    proc = subprocess.run([python, VALIDATOR, "--schema", SCHEMA, "--quiet"] + list(paths),
                          stdin=subprocess.DEVNULL, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, timeout=300)
    if proc.returncode == 0:
        return []
    lines = [line for line in proc.stdout.splitlines() if line]
    if proc.returncode != 1 or not lines:
        lines.append(f"{VALIDATOR} under {python} exited {proc.returncode}: {proc.stderr.strip()[-500:]}")
    return ["schema: " + line for line in lines]
