#!/usr/bin/env python3
"""The gpumemtrace launcher (src/cli/launcher.c).

Copies of the launcher are placed in temporary build and install trees, with
a dummy file named libgpumemtrace.so where the library would be, and run with
`env` as the command: the output must show LD_PRELOAD and the GPUMEMTRACE_*
variables the options ask for. Also: the library missing, bad option values,
usage errors (of run and check), --help (names every option of src/tracer/options.h
and of check, and check's exit statuses), --version. tests/check tests what
check does with the real library."""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass

LIB = "libgpumemtrace.so"


@dataclass
class Result:
    rc: int
    out: str
    err: str


class Checker:
    def __init__(self) -> None:
        self.failures = 0

    def eq(self, what: str, got: object, want: object) -> None:
        if got != want:
            print(f"FAIL {what}: got {got!r}, expected {want!r}", file=sys.stderr)
            self.failures += 1

    def true(self, what: str, cond: bool, detail: str = "") -> None:
        if not cond:
            print(f"FAIL {what}" + (f": {detail}" if detail else ""), file=sys.stderr)
            self.failures += 1


def clean_env() -> dict[str, str]:
    """The environment without anything the launcher sets or keeps."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("GPUMEMTRACE_") and k != "LD_PRELOAD"}
    # the dummy library makes ld.so complain; keep its message out of the way
    env["LC_ALL"] = "C"
    return env


def run(launcher: str, args: list[str], env: dict[str, str] | None = None,
        cwd: str | None = None) -> Result:
    p = subprocess.run([launcher] + args, capture_output=True, text=True,
                       env=env if env is not None else clean_env(), cwd=cwd, timeout=30)
    return Result(p.returncode, p.stdout, p.stderr)


def env_of(out: str) -> dict[str, str]:
    """Parses `env` output (values without newlines)."""
    result = {}
    for line in out.splitlines():
        k, sep, v = line.partition("=")
        if sep:
            result[k] = v
    return result


def place(root: str, launcher: str, bin_rel: str, lib_rel: str | None) -> tuple[str, str]:
    """A copy of the launcher at root/bin_rel and a dummy library at root/lib_rel."""
    exe = os.path.join(root, bin_rel)
    os.makedirs(os.path.dirname(exe), exist_ok=True)
    shutil.copy2(launcher, exe)
    lib = ""
    if lib_rel is not None:
        lib = os.path.join(root, lib_rel)
        os.makedirs(os.path.dirname(lib), exist_ok=True)
        with open(lib, "wb"):
            pass
    return exe, os.path.realpath(lib) if lib else ""


def one_line(c: Checker, what: str, r: Result, status: int, *words: str) -> None:
    """A launcher error: the status, one 'gpumemtrace:' line naming each word."""
    c.eq(f"{what}: exit status", r.rc, status)
    lines = r.err.splitlines()
    c.eq(f"{what}: stderr lines", len(lines), 1)
    c.true(f"{what}: prefix", r.err.startswith("gpumemtrace: "), r.err)
    for w in words:
        c.true(f"{what}: names {w!r}", w in r.err, r.err)
    c.eq(f"{what}: stdout", r.out, "")


def test_layouts(c: Checker, launcher: str, tmp: str, multiarch: str, libdir_rel: str) -> None:
    layouts = [
        ("flat", "bin/gpumemtrace", "bin/" + LIB),
        ("build tree", "build/src/cli/gpumemtrace", "build/src/" + LIB),
        ("install lib", "usr/bin/gpumemtrace", "usr/lib/" + LIB),
        ("install lib64", "usr/bin/gpumemtrace", "usr/lib64/" + LIB),
        ("install libdir", "usr/bin/gpumemtrace", f"usr/{libdir_rel}/{LIB}"),
    ]
    if multiarch:
        layouts.append(("install multiarch", "usr/bin/gpumemtrace",
                        f"usr/lib/{multiarch}/{LIB}"))
    for i, (name, bin_rel, lib_rel) in enumerate(layouts):
        root = os.path.join(tmp, f"layout{i}")
        exe, lib = place(root, launcher, bin_rel, lib_rel)
        r = run(exe, ["run", "--depth", "12", "--snapshot-on", "oom,exit", "--", "env"])
        c.eq(f"{name}: exit status", r.rc, 0)
        env = env_of(r.out)
        c.eq(f"{name}: LD_PRELOAD", env.get("LD_PRELOAD"), lib)
        c.eq(f"{name}: GPUMEMTRACE_STACK_DEPTH", env.get("GPUMEMTRACE_STACK_DEPTH"), "12")
        c.eq(f"{name}: GPUMEMTRACE_SNAPSHOT_ON", env.get("GPUMEMTRACE_SNAPSHOT_ON"), "oom,exit")
        c.true(f"{name}: no GPUMEMTRACE_DIR unless asked", "GPUMEMTRACE_DIR" not in env)


def test_missing_library(c: Checker, launcher: str, tmp: str, libdir_abs: str) -> None:
    if os.path.exists(os.path.join(libdir_abs, LIB)):
        print(f"skip: {libdir_abs}/{LIB} is installed, the launcher would find it")
        return
    exe, _ = place(os.path.join(tmp, "nolib"), launcher, "bin/gpumemtrace", None)
    r = run(exe, ["run", "--", "env"])
    one_line(c, "no library", r, 125, "cannot find " + LIB, os.path.dirname(exe))


def test_environment(c: Checker, launcher: str, tmp: str) -> None:
    exe, lib = place(os.path.join(tmp, "envs"), launcher, "bin/gpumemtrace", "bin/" + LIB)

    # LD_PRELOAD keeps what was there, after the library
    env = clean_env()
    env["LD_PRELOAD"] = "/opt/other.so"
    got = env_of(run(exe, ["run", "--", "env"], env).out).get("LD_PRELOAD")
    c.eq("LD_PRELOAD kept", got, f"{lib}:/opt/other.so")
    # ... but a leading sanitizer runtime stays first
    env["LD_PRELOAD"] = "/usr/lib/libasan.so.8 /opt/other.so"
    got = env_of(run(exe, ["run", "--", "env"], env).out).get("LD_PRELOAD")
    c.eq("LD_PRELOAD after libasan", got, f"/usr/lib/libasan.so.8:{lib}:/opt/other.so")
    # ... and the library is never there twice
    env["LD_PRELOAD"] = lib
    got = env_of(run(exe, ["run", "--", "env"], env).out).get("LD_PRELOAD")
    c.eq("LD_PRELOAD not doubled", got, lib)

    # variables already set are kept unless an option sets them
    env = clean_env()
    env["GPUMEMTRACE_STACK_DEPTH"] = "5"
    env["GPUMEMTRACE_RING_EVENTS"] = "128"
    got_env = env_of(run(exe, ["run", "--depth=7", "--verbose", "--no-python-stacks", "--", "env"], env).out)
    c.eq("--depth= form", got_env.get("GPUMEMTRACE_STACK_DEPTH"), "7")
    c.eq("kept variable", got_env.get("GPUMEMTRACE_RING_EVENTS"), "128")
    c.eq("--verbose", got_env.get("GPUMEMTRACE_VERBOSE"), "1")
    c.eq("--no-python-stacks", got_env.get("GPUMEMTRACE_PYTHON_STACKS"), "0")

    # --dir: absolute, so that a command changing directory still writes there
    os.makedirs(os.path.join(tmp, "snaps"), exist_ok=True)
    r = run(exe, ["run", "--dir", "snaps", "--snapshot-on=none", "--", "env"], cwd=tmp)
    got_env = env_of(r.out)
    c.eq("--dir absolute", got_env.get("GPUMEMTRACE_DIR"), os.path.realpath(os.path.join(tmp, "snaps")))
    c.eq("--snapshot-on=none", got_env.get("GPUMEMTRACE_SNAPSHOT_ON"), "none")
    # --dir made when missing, as check makes it
    r = run(exe, ["run", "--dir", "new-snaps", "--", "env"], cwd=tmp)
    c.eq("--dir made", os.path.isdir(os.path.join(tmp, "new-snaps")), True)
    c.eq("--dir made: absolute", env_of(r.out).get("GPUMEMTRACE_DIR"),
         os.path.realpath(os.path.join(tmp, "new-snaps")))

    # the command's exit status and arguments pass through
    r = run(exe, ["run", "--", "sh", "-c", "echo \"$0 $1\"; exit 7", "a b", "c"])
    c.eq("exit status passes through", r.rc, 7)
    c.eq("arguments pass through", r.out, "a b c\n")


def test_errors(c: Checker, launcher: str, tmp: str) -> None:
    exe, _ = place(os.path.join(tmp, "errs"), launcher, "bin/gpumemtrace", "bin/" + LIB)
    bad_values = [
        (["--depth", "300"], "--depth", "300"),
        (["--depth", "12x"], "--depth", "12x"),
        (["--depth", ""], "--depth", "''"),
        (["--depth=-1"], "--depth", "-1"),
        (["--snapshot-on", "oom,bogus"], "--snapshot-on", "oom,bogus"),
        (["--snapshot-on", "oom,"], "--snapshot-on", "oom,"),
        (["--dir", os.path.join(tmp, "no-parent", "snaps")], "--dir", "No such file"),
        (["--dir", "/etc/passwd"], "--dir", "not a directory"),
    ]
    for args, flag, word in bad_values:
        r = run(exe, ["run"] + args + ["--", "env"])
        one_line(c, f"bad value {args}", r, 2, flag, word)

    usage_errors = [
        (["run", "env"], "'--' must come before the command"),
        (["run"], "no command"),
        (["run", "--"], "no command after '--'"),
        (["run", "--depth"], "--depth needs a value"),
        (["run", "--depth", "--", "env"], "--depth needs a value"),
        (["run", "--frob", "--", "env"], "unknown option '--frob'"),
        (["frobnicate"], "unknown command 'frobnicate'"),
        (["check"], "no command"),
        (["check", "env"], "'--' must come before the command"),
        (["check", "--max-growth", "5%", "--", "env"], "--max-growth needs --baseline"),
        (["check", "--max-peak", "5X", "--", "env"], "--max-peak '5X' is invalid"),
        (["check", "--frob", "--", "env"], "unknown option '--frob'"),
    ]
    for args, words in usage_errors:
        one_line(c, f"usage error {args}", run(exe, args), 2, words)

    r = run(exe, [])
    c.eq("no arguments: exit status", r.rc, 2)
    c.true("no arguments: usage", "Usage: gpumemtrace run" in r.err, r.err)

    r = run(exe, ["run", "--", os.path.join(tmp, "no-such-command")])
    one_line(c, "command not found", r, 127, "cannot run", "no-such-command")


def test_controls(c: Checker, launcher: str, tmp: str) -> None:
    """Control characters in arguments, paths and suppression lines: one line
    each, escaped \\xNN as the library's log does; no raw control byte."""
    exe, _ = place(os.path.join(tmp, "ctl"), launcher, "bin/gpumemtrace", "bin/" + LIB)
    supp = os.path.join(tmp, "ctl", "bad.supp")
    with open(supp, "wb") as f:
        f.write(b"leak:ok\nbogus\x1b[2J\xc2\x85gpumemtrace: forged\n")
    cases = [
        (["run", "--fr\nob\x1b[31m", "--", "env"], 2, "unknown option '--fr\\x0aob\\x1b[31m'"),
        (["frob\ngpumemtrace: forged"], 2, "unknown command 'frob\\x0agpumemtrace: forged'"),
        (["run", "--dir", os.path.join(tmp, "no\nparent", "snaps"), "--", "env"], 2, "no\\x0aparent"),
        (["run", "--", os.path.join(tmp, "no-such\ncommand\x1b]0;t\x07")], 127,
         "no-such\\x0acommand\\x1b]0;t\\x07"),
        (["check", "--suppressions", supp, "--", "env"], 2, "bogus\\x1b[2J\\xc2\\x85gpumemtrace: forged"),
    ]
    for args, status, words in cases:
        r = run(exe, args)
        one_line(c, f"control characters {args!r}", r, status, words)
        c.true(f"control characters {args!r}: no raw control byte",
               not re.search("[\x00-\x09\x0b-\x1f\x7f-\x9f]", r.err), repr(r.err))


def test_space_in_path(c: Checker, launcher: str, tmp: str, lib: str) -> None:
    """An install whose path has a space (which LD_PRELOAD cannot hold): the
    program runs traced, with no ld.so error; a directory with ':' is one
    line, status 125."""
    root = os.path.join(tmp, "my tools")
    exe, dummy = place(root, launcher, "bin/gpumemtrace", "bin/" + LIB)
    shutil.copy2(lib, dummy)
    env = clean_env()
    if os.environ.get("GMT_TEST_ASAN_RUNTIME"):
        env["LD_PRELOAD"] = os.environ["GMT_TEST_ASAN_RUNTIME"]
        env["ASAN_OPTIONS"] = "detect_leaks=0"
    r = run(exe, ["run", "--", "cat", "/proc/self/maps"], env=env)
    c.eq("a space in the path: exit status", r.rc, 0)
    c.eq("a space in the path: stderr", r.err, "")
    c.true("a space in the path: the program traced", dummy in r.out, r.out[-400:])
    r = run(exe, ["run", "--", "env"], env=dict(env, LD_LIBRARY_PATH="/opt/own"))
    got = env_of(r.out)
    c.true("a space in the path: LD_PRELOAD names the file", LIB in got.get("LD_PRELOAD", "").split(":"),
           got.get("LD_PRELOAD"))
    c.eq("a space in the path: its directory after the program's", got.get("LD_LIBRARY_PATH"),
         "/opt/own:" + os.path.dirname(dummy))
    other = os.path.join(tmp, "other-lib")
    os.makedirs(other)
    with open(os.path.join(other, LIB), "wb"):
        pass
    r = run(exe, ["run", "--", "env"], env=dict(env, LD_LIBRARY_PATH=other))
    c.eq("a space in the path: its directory before one with another copy", env_of(r.out).get("LD_LIBRARY_PATH"),
         os.path.dirname(dummy) + ":" + other)
    colon = os.path.join(tmp, "a:b")
    exe, _ = place(colon, launcher, "bin/gpumemtrace", "bin/" + LIB)
    one_line(c, "a colon in the path", run(exe, ["run", "--", "true"]), 125, "cannot preload", "':'")


def test_help(c: Checker, launcher: str, options_h: str, version: str) -> None:
    with open(options_h, encoding="utf-8") as f:
        variables = sorted(set(re.findall(r'"(GPUMEMTRACE_[A-Z0-9_]+)"', f.read())))
    c.true("options.h names variables", len(variables) >= 5, str(variables))
    check_words = ["gpumemtrace check", "--max-leak-bytes", "--max-leaks", "--leak-classes",
                   "--suppressions", "--max-peak", "--baseline", "--max-growth", "--junit",
                   "GITHUB_ACTIONS", "powers of 1024", "Exit status of check"]
    check_words += [f"  {status} " for status in (2, 125, 127, 23, 24, 0)]
    for flag in (["--help"], ["-h"], ["run", "--help"], ["run", "--depth", "3", "-h"],
                 ["check", "--help"], ["check", "--max-leaks", "3", "-h"]):
        r = run(launcher, flag)
        c.eq(f"{flag}: exit status", r.rc, 0)
        c.eq(f"{flag}: stderr", r.err, "")
        for word in ["gpumemtrace run", "--dir", "--snapshot-on", "--depth", "--verbose",
                     "LD_PRELOAD", "Exit status"] + variables + check_words:
            c.true(f"{flag}: help mentions {word!r}", word in r.out)
    r = run(launcher, ["--version"])
    c.eq("--version", (r.rc, r.out), (0, f"gpumemtrace {version}\n"))

    # The man page (help2man, from --help) lists each usage on a line of
    # its own under SYNOPSIS, not run together in a paragraph.
    page = os.path.join(os.path.dirname(launcher), "gpumemtrace.1")
    man = shutil.which("man")
    if os.path.isfile(page) and man:
        r = subprocess.run([man, "-l", page], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, text=True, env=dict(clean_env(), MANWIDTH="80"))
        text = re.sub(r".\x08", "", r.stdout)
        forms = ["gpumemtrace run [options] -- command [argument...]",
                 "gpumemtrace check [options] -- command [argument...]",
                 "gpumemtrace view [options] FILE...", "gpumemtrace --help | --version"]
        lines = [ln.strip() for ln in text.split("\n")]
        c.true("man page: a SYNOPSIS", "SYNOPSIS" in lines, text[:400])
        for form in forms:
            c.true(f"man page: {form!r} on a line of its own", form in lines, text[:600])
    else:
        print("  (no man page or no man here: the man page's layout not checked)")


def test_view(c: Checker, launcher: str, tmp: str) -> None:
    """`gpumemtrace view` runs the viewer (the package's view/__main__.py)
    with python3 -I: the installed package (../share/gpumemtrace/python
    beside the launcher) first, else the source tree's; its arguments,
    output and status pass through."""
    prefix = os.path.join(tmp, "viewprefix")
    pkg = os.path.join(prefix, "share", "gpumemtrace", "python", "gpumemtrace")
    os.makedirs(os.path.join(prefix, "bin"))
    os.makedirs(os.path.join(pkg, "view"))
    exe = os.path.join(prefix, "bin", "gpumemtrace")
    shutil.copy(launcher, exe)
    open(os.path.join(pkg, "__init__.py"), "w", encoding="utf-8").close()
    with open(os.path.join(pkg, "view", "__main__.py"), "w", encoding="utf-8") as f:
        f.write("import sys\nprint('installed viewer', *sys.argv[1:], 'isolated' if sys.flags.isolated else '')\n"
                "sys.exit(3)\n")
    r = run(exe, ["view", "a.json", "--top", "5"])
    c.eq("installed viewer: output", r.out, "installed viewer a.json --top 5 isolated\n")
    c.eq("installed viewer: status passes through", r.rc, 3)

    # The build tree's launcher finds the source tree's viewer.
    r = run(launcher, ["view", "--help"])
    c.eq("view --help: status", r.rc, 0)
    c.true("view --help: the viewer's usage", "usage: gpumemtrace view" in r.out, r.out + r.err)
    missing = os.path.join(tmp, "no-such-snapshot.json")
    r = run(launcher, ["view", missing])
    c.eq("view of a missing file: status", r.rc, 1)
    c.eq("view of a missing file: stderr lines", len(r.err.splitlines()), 1)
    c.true("view of a missing file: names it", r.err.startswith("gpumemtrace view: ") and missing in r.err, r.err)
    r = run(launcher, ["view"])
    c.eq("view without files: usage error", r.rc, 2)

    env = clean_env()
    env["PATH"] = os.path.join(tmp, "empty-path")
    r = run(launcher, ["view", "x.json"], env=env)
    one_line(c, "view without python3", r, 127, "cannot run python3")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("launcher")
    ap.add_argument("options_h")
    ap.add_argument("version")
    ap.add_argument("libdir_abs")
    ap.add_argument("libdir_rel")
    ap.add_argument("multiarch", nargs="?", default="")
    ap.add_argument("--lib", help="the built library, for an install path with a space")
    a = ap.parse_args()

    c = Checker()
    with tempfile.TemporaryDirectory(prefix="gmt-launcher-") as tmp:
        test_layouts(c, a.launcher, tmp, a.multiarch, a.libdir_rel)
        test_missing_library(c, a.launcher, tmp, a.libdir_abs)
        test_environment(c, a.launcher, tmp)
        test_errors(c, a.launcher, tmp)
        test_controls(c, a.launcher, tmp)
        if a.lib:
            test_space_in_path(c, a.launcher, tmp, a.lib)
        test_help(c, a.launcher, a.options_h, a.version)
        test_view(c, a.launcher, tmp)
    if c.failures:
        print(f"{c.failures} failure(s)", file=sys.stderr)
    return 1 if c.failures else 0


if __name__ == "__main__":
    sys.exit(main())
