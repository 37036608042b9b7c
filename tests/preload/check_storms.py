#!/usr/bin/env python3
"""A storm of out-of-memory episodes is bounded (docs/reliability.md).

`triggers episodes N` has N episodes of one failure each (a server refusing
requests too big for it: a 200 MiB request fails with 128 MiB live, then a
1 MiB allocation succeeds and is freed). Run traced for a few and for many
episodes: whatever N, the same number of files (the first 8 episodes' and
one for the latest), the same number of lines on stderr, the same number of
snapshots written (stats.snapshots: the work done, not the time taken); the
program's output and exit status as untraced. The latest episode's snapshot
says which it is (episode.id N) and how many before it were left out
(episode.left_out N - 9); it holds the live set of its moment (the 128 MiB
block alone); one line says which episodes were left out; the exit snapshot
counts them (stats.oom_episodes_left_out N - 8).

Usage: check_storms.py --lib LIBGPUMEMTRACE -- TRIGGERS
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import re
import subprocess
import sys
import tempfile
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "schema"))
import schema_check  # noqa: E402  (tests/schema: every snapshot against docs/snapshot.schema.json)

import preload_env  # noqa: E402  (beside this file)

FIRST = 8  # GMT_STORM_EPISODES
MIB = 1 << 20
FEW, MANY = 20, 400


def env_of(lib: str | None, snapdir: str) -> dict[str, str]:
    """Traced (lib) or not (None). NOTE: no leak scan at exit: under
    AddressSanitizer it can take minutes (each word looked up in its
    allocator), and it is not what this is about."""
    settings = dict(GMTSIM_MEMORY="256M", GPUMEMTRACE_DIR=snapdir, GPUMEMTRACE_SNAPSHOT_ON="oom,exit",
                    GPUMEMTRACE_LEAK_SCAN="0")
    if lib is None:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("GMTSIM_", "GPUMEMTRACE_"))}
        return dict(env, **settings)
    return preload_env.env_of(lib, **settings)


def load(path: str) -> dict[str, Any]:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def run(program: str, n: int, lib: str | None, snapdir: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([program, "episodes", str(n)], env=env_of(lib, snapdir), cwd=snapdir,
                          capture_output=True, text=True, errors="replace", timeout=600, check=False)


def comparable(stdout: str) -> list[str]:
    return [re.sub(r"\b(pid|PID)[ =]\d+", r"\1 N", re.sub(r"0x[0-9a-f]+", "ADDR", line))
            for line in stdout.splitlines()]


def traced_problems(program: str, lib: str, n: int, work: str) -> tuple[list[str], dict[str, Any]]:
    """Runs n episodes traced; returns the problems and what the run left."""
    snapdir = os.path.join(work, f"n{n}")
    os.mkdir(snapdir)
    plain = run(program, n, None, snapdir)
    traced = run(program, n, lib, snapdir)
    problems = []
    if traced.returncode != plain.returncode or comparable(traced.stdout) != comparable(plain.stdout):
        problems.append(f"{n} episodes: traced exit {traced.returncode} and output differ from untraced "
                        f"({plain.returncode}): {traced.stdout[-300:]!r} / {plain.stdout[-300:]!r}")
    ooms = sorted(glob.glob(os.path.join(snapdir, "gpumemtrace.*.oom.*.json")),
                  key=lambda p: int(p.rsplit(".", 2)[1]))
    exits = glob.glob(os.path.join(snapdir, "gpumemtrace.*.exit.*.json"))
    lines = traced.stderr.splitlines()
    facts = {"ooms": len(ooms), "lines": len(lines), "stderr": traced.stderr}
    if len(exits) != 1:
        return problems + [f"{n} episodes: {len(exits)} exit snapshots"], facts
    exit_doc = load(exits[0])
    facts["snapshots"] = exit_doc["stats"].get("snapshots")
    facts["left_out"] = exit_doc["stats"].get("oom_episodes_left_out")
    problems += [f"{n} episodes: {p}" for p in schema_check.validate(ooms + exits)]
    if n <= FIRST:
        return problems, facts
    if facts["left_out"] != n - FIRST:
        problems.append(f"{n} episodes: stats.oom_episodes_left_out {facts['left_out']}, expected {n - FIRST}")
    if not ooms:
        return problems + [f"{n} episodes: no oom snapshot"], facts
    last = load(ooms[-1])
    ep = last.get("episode", {})
    if ep.get("id") != n or ep.get("left_out") != n - FIRST - 1:
        problems.append(f"{n} episodes: the last oom snapshot is of episode {ep.get('id')} with left_out "
                        f"{ep.get('left_out')}; expected episode {n}, left_out {n - FIRST - 1}")
    live = sorted(a["size"] for a in last.get("allocations", []))
    if live != [128 * MIB]:
        problems.append(f"{n} episodes: the last oom snapshot's live set is {live}, expected the 128 MiB block")
    said = [line for line in lines if f"episodes {FIRST + 1} to {n} of this process ({n - FIRST})" in line]
    if len(said) != 1:
        problems.append(f"{n} episodes: {len(said)} lines say which episodes were left out, expected 1")
    return problems, facts


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("program")
    a = ap.parse_args()
    program, lib = os.path.abspath(a.program), os.path.abspath(a.lib)
    with tempfile.TemporaryDirectory(prefix="gmt-storms-") as work:
        problems, few = traced_problems(program, lib, FEW, work)
        more, many = traced_problems(program, lib, MANY, work)
        problems += more
    for what in ("ooms", "lines", "snapshots"):
        if few.get(what) != many.get(what):
            problems.append(f"{what}: {few.get(what)} after {FEW} episodes, {many.get(what)} after {MANY}: "
                            "not bounded")
    if many.get("ooms") != FIRST + 1:
        problems.append(f"{many.get('ooms')} oom snapshots after {MANY} episodes, expected {FIRST + 1}")
    for p in problems:
        print(f"FAIL: {p}")
    if problems:
        print(many.get("stderr", "")[-2000:])
        return 1
    print(f"OK: {FEW} and {MANY} episodes: {many['ooms']} oom files, {many['lines']} lines, "
          f"{many['snapshots']} snapshots each")
    return 0


if __name__ == "__main__":
    sys.exit(main())
