#!/usr/bin/env python3
"""The mutation check (docs/reliability.md, "Tests that notice"): plants
small bugs, one at a time, in a copy of the tree, rebuilds, runs the tests
each names, and reports which bugs the tests caught.

The bugs are kept beside the code they target: FILE.mutants next to FILE
(src/tracer/episode.c.mutants for src/tracer/episode.c). Format:

    # comment
    area = episodes                      # what the score is counted under
    tests = episode-storm episode-sites  # meson test names, for every mutant below

    mutant = the device condition dropped
      find = if (f->device == device && f->open)
      replace = if (f->open)
      tests = episode-two-devices        # instead of the file's, optional
      equivalent = why this one cannot be caught   # optional: an argued survivor

`find` is one line of FILE (spaces at either end ignored) and must match
exactly one line; `replace` is what that line becomes (its indentation
kept). A list whose `find` no longer matches is reported as stale, never
skipped silently.

Each mutant is built in BUILD/tree (a copy of the working tree: tracked and
new files, as git lists them) and BUILD/build (a plain Meson build of it);
a mutant that does not compile is "stillborn" (not counted); one whose
tests all pass "survived" — unless it says why it is `equivalent`. The tests
are first run unmutated: a failure there stops the run (no verdict is
possible on a red baseline).

usage: scripts/mutants [--build DIR] [--area AREA]... [--file FILE]... [--list] [--jobs N]
Exit 0 when every mutant was caught or argued equivalent; 1 when one
survived or a list is stale; 2 on a usage or setup error.
Standard library only.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))
SUFFIX = ".mutants"


class MutantsError(Exception):
    """A list or the setup is wrong: one line."""


@dataclass
class Mutant:
    name: str
    target: str           # the file, relative to the root
    find: str = ""
    replace: Optional[str] = None
    tests: List[str] = field(default_factory=list)
    equivalent: str = ""
    area: str = ""
    where: str = ""       # list:line, for messages


def parse(path: str) -> List[Mutant]:
    """The mutants of one list file (path relative to the root)."""
    target = path[: -len(SUFFIX)]
    if not os.path.isfile(os.path.join(ROOT, target)):
        raise MutantsError(f"{path}: no {target} beside it")
    area, tests = "", []
    out: List[Mutant] = []
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        for n, raw in enumerate(f, 1):
            line = raw.rstrip("\n")
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            key, sep, value = line.strip().partition("=")
            key, value = key.strip(), value.strip()
            if not sep or not key:
                raise MutantsError(f"{path}:{n}: not KEY = VALUE: {line.strip()!r}")
            indented = line[:1].isspace()
            if key == "mutant":
                out.append(Mutant(value, target, tests=list(tests), area=area, where=f"{path}:{n}"))
            elif indented and out and key in ("find", "replace", "tests", "equivalent"):
                m = out[-1]
                if key == "find":
                    m.find = value
                elif key == "replace":
                    m.replace = value
                elif key == "tests":
                    m.tests = value.split()
                else:
                    m.equivalent = value
            elif not indented and key == "area" and not out:
                area = value
            elif not indented and key == "tests" and not out:
                tests = value.split()
            else:
                raise MutantsError(f"{path}:{n}: {key} is not expected here")
    for m in out:
        if not m.area:
            raise MutantsError(f"{path}: no area before mutant {m.name!r}")
        if not m.find or m.replace is None:
            raise MutantsError(f"{m.where}: mutant {m.name!r} needs find and replace")
        if not m.tests:
            raise MutantsError(f"{m.where}: mutant {m.name!r} names no test")
        if m.find == m.replace.strip():
            raise MutantsError(f"{m.where}: mutant {m.name!r} changes nothing")
    return out


def lists() -> List[str]:
    proc = subprocess.run(["git", "-C", ROOT, "ls-files", "--cached", "--others", "--exclude-standard",
                           f"*{SUFFIX}"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        raise MutantsError(f"git ls-files: {proc.stderr.strip()}")
    return sorted(p for p in proc.stdout.split() if p.endswith(SUFFIX))


def line_of(text: str, find: str, where: str) -> int:
    hits = [i for i, ln in enumerate(text.split("\n")) if ln.strip() == find]
    if len(hits) != 1:
        raise MutantsError(f"{where}: find matches {len(hits)} lines of the file, not 1 (stale?): {find!r}")
    return hits[0]


def mutate(text: str, m: Mutant) -> str:
    lines = text.split("\n")
    i = line_of(text, m.find, m.where)
    indent = lines[i][: len(lines[i]) - len(lines[i].lstrip())]
    lines[i] = indent + (m.replace or "").strip()
    return "\n".join(lines)


def sh(cmd: List[str], cwd: str, timeout: float) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(cmd, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        return subprocess.CompletedProcess(cmd, 124, out + f"\n(timed out after {timeout:.0f} s)")


def copy_tree(into: str) -> None:
    """The working tree's files into `into`, replacing what differs."""
    proc = subprocess.run(["git", "-C", ROOT, "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        raise MutantsError(f"git ls-files: {proc.stderr.strip()}")
    for rel in filter(None, proc.stdout.split("\0")):
        src, dst = os.path.join(ROOT, rel), os.path.join(into, rel)
        if not os.path.lexists(src):
            continue
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        if os.path.islink(src):
            if os.path.lexists(dst):
                os.remove(dst)
            os.symlink(os.readlink(src), dst)
            continue
        try:
            with open(src, "rb") as a, open(dst, "rb") as b:
                if a.read() == b.read():
                    continue
        except OSError:
            pass
        # NOTE: a fresh mtime, not the source's (copy2): a file edited while
        # the copy's build ran keeps an mtime older than its stale object,
        # and ninja would never rebuild it.
        shutil.copyfile(src, dst)
        shutil.copymode(src, dst)


class Runner:
    def __init__(self, build: str, jobs: int) -> None:
        self.tree = os.path.join(build, "tree")
        self.build = os.path.join(build, "build")
        self.jobs = jobs

    def setup(self) -> None:
        os.makedirs(self.tree, exist_ok=True)
        copy_tree(self.tree)
        if not os.path.isfile(os.path.join(self.build, "build.ninja")):
            p = sh(["meson", "setup", self.build, self.tree], self.tree, 1800)
            if p.returncode != 0:
                raise MutantsError("meson setup of the copy failed:\n" + p.stdout[-3000:])
        p = self.compile()
        if p.returncode != 0:
            raise MutantsError("the unmutated copy does not build:\n" + p.stdout[-3000:])

    def compile(self) -> subprocess.CompletedProcess:
        return sh(["ninja", "-C", self.build] + ([f"-j{self.jobs}"] if self.jobs else []), self.tree, 3600)

    def test(self, names: List[str]) -> subprocess.CompletedProcess:
        return sh(["meson", "test", "-C", self.build, "--no-rebuild", "--print-errorlogs", "-t", "4"]
                  + (["--num-processes", str(self.jobs)] if self.jobs else []) + names, self.tree, 7200)


def failed_tests(output: str) -> List[str]:
    out = []
    for ln in output.splitlines():
        parts = ln.split()
        if len(parts) >= 4 and "/" in parts[0] and parts[-1] != "OK" and any(
                w in ln for w in (" FAIL ", " TIMEOUT ", " ERROR ")):
            out.append(ln.strip())
    return out


def main(argv: List[str]) -> int:
    ap = argparse.ArgumentParser(prog="scripts/mutants", description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build-mutants"),
                    help="where the copy and its build live (default: build-mutants in the source tree)")
    ap.add_argument("--area", action="append", default=[], help="only this area (repeatable)")
    ap.add_argument("--file", action="append", default=[], help="only this list or its source file (repeatable)")
    ap.add_argument("--list", action="store_true", help="list the mutants and check that each still applies")
    ap.add_argument("--jobs", type=int, default=0, help="ninja's and meson test's parallelism (default: theirs)")
    args = ap.parse_args(argv)

    try:
        mutants: List[Mutant] = []
        for path in lists():
            if args.file and path not in args.file and path[: -len(SUFFIX)] not in args.file:
                continue
            mutants += [m for m in parse(path) if not args.area or m.area in args.area]
        stale = []
        for m in mutants:
            with open(os.path.join(ROOT, m.target), encoding="utf-8") as f:
                try:
                    line_of(f.read(), m.find, m.where)
                except MutantsError as e:
                    stale.append(str(e))
        if args.list:
            for m in mutants:
                print(f"{m.area:14} {m.target}: {m.name}  [{' '.join(m.tests)}]"
                      + (f"  (equivalent: {m.equivalent})" if m.equivalent else ""))
            for s in stale:
                print("STALE " + s)
            print(f"{len(mutants)} mutants in {len({m.target for m in mutants})} files, {len(stale)} stale")
            return 1 if stale else 0
        if stale:
            for s in stale:
                print("STALE " + s, file=sys.stderr)
            return 1
        if not mutants:
            print("no mutants chosen", file=sys.stderr)
            return 2

        runner = Runner(os.path.abspath(args.build), args.jobs)
        print(f"scripts/mutants: {len(mutants)} mutants; the copy and its build in {args.build}", flush=True)
        runner.setup()
        every = sorted({t for m in mutants for t in m.tests})
        base = runner.test(every)
        if base.returncode != 0:
            print("the tests fail unmutated; no verdict is possible:\n  " + "\n  ".join(failed_tests(base.stdout))
                  + "\n" + base.stdout[-2000:], file=sys.stderr)
            return 2

        results: Dict[str, List[str]] = {}
        survivors: List[Mutant] = []
        for i, m in enumerate(mutants, 1):
            path = os.path.join(runner.tree, m.target)
            with open(path, encoding="utf-8") as f:
                original = f.read()
            start = time.monotonic()
            try:
                with open(path, "w", encoding="utf-8") as f:
                    f.write(mutate(original, m))
                if runner.compile().returncode != 0:
                    verdict = "stillborn"
                else:
                    t = runner.test(m.tests)
                    verdict = "caught" if t.returncode != 0 else ("equivalent" if m.equivalent else "SURVIVED")
            finally:
                with open(path, "w", encoding="utf-8") as f:
                    f.write(original)
            results.setdefault(m.area, []).append(verdict)
            if verdict == "SURVIVED":
                survivors.append(m)
            print(f"[{i}/{len(mutants)}] {verdict:10} {m.area}: {m.target}: {m.name} "
                  f"({time.monotonic() - start:.0f} s)", flush=True)
        runner.compile()

        print("\narea            planted  caught  equivalent  survived  stillborn")
        totals = [0, 0, 0, 0, 0]
        for area in sorted(results):
            v = results[area]
            row = [len(v) - v.count("stillborn"), v.count("caught"), v.count("equivalent"), v.count("SURVIVED"),
                   v.count("stillborn")]
            totals = [a + b for a, b in zip(totals, row)]
            print(f"{area:15} {row[0]:7} {row[1]:7} {row[2]:11} {row[3]:9} {row[4]:10}")
        print(f"{'all':15} {totals[0]:7} {totals[1]:7} {totals[2]:11} {totals[3]:9} {totals[4]:10}")
        if totals[0]:
            print(f"caught {totals[1]} of {totals[0]} ({100 * totals[1] / totals[0]:.0f} %); "
                  f"{totals[2]} argued equivalent")
        for m in survivors:
            print(f"SURVIVED {m.where}: {m.name} (tests: {' '.join(m.tests)})")
        return 1 if survivors else 0
    except MutantsError as e:
        print(f"scripts/mutants: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
