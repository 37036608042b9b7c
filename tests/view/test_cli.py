#!/usr/bin/env python3
"""Tests of the viewer's command line (tools/gpumemtrace-view), run as a
subprocess: exit 0 on good input; on every kind of bad input exit 1 and
exactly one line on stderr, "gpumemtrace view: " and the file's name, never a
traceback; usage errors exit 2; an output file that cannot be written is one
line naming it.

    python3 tests/view/test_cli.py [BUILD_DIR]

With BUILD_DIR, the real snapshots of the demo program on the simulated GPU
are among the inputs. Exits non-zero when a test fails (meson suite 'viewer')."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import re
import subprocess
import sys
import tempfile
import unicodedata
from typing import Any, Callable, Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
TOOL = os.path.join(ROOT, "tools", "gpumemtrace-view")
sys.path[:0] = [os.path.join(ROOT, "tools", "python"), HERE]

import fixtures  # noqa: E402
from gpumemtrace.view import cli  # noqa: E402

PREFIX = "gpumemtrace view: "
SGR = re.compile(r"\x1b\[[0-9;]*m")
TESTS: List[Callable[[], None]] = []
BUILD_DIR: Optional[str] = None
TMP = ""


def test(fn: Callable[[], None]) -> Callable[[], None]:
    TESTS.append(fn)
    return fn


def run(args: List[str], stdin: bytes = b"", env: Optional[Dict[str, str]] = None,
        timeout: int = 120, preexec_fn: Optional[Callable[[], None]] = None) -> Tuple[int, str, str]:
    e = dict(os.environ)
    e.pop("NO_COLOR", None)
    e.update(env or {})
    r = subprocess.run([sys.executable, TOOL] + args, input=stdin, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, env=e, timeout=timeout, preexec_fn=preexec_fn)
    return r.returncode, r.stdout.decode("utf-8", "backslashreplace"), r.stderr.decode("utf-8", "backslashreplace")


def path(name: str) -> str:
    return os.path.join(TMP, name)


def write(name: str, data: Any) -> str:
    p = path(name)
    if isinstance(data, (dict, list)):
        data = json.dumps(data)
    with open(p, "wb") as f:
        f.write(data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data)
    return p


def one_line_error(what: str, rc: int, err: str, names: Optional[str], want_rc: Tuple[int, ...] = (1,)) -> None:
    """rc is one of want_rc and err exactly one safe line naming names."""
    problems = []
    if rc not in want_rc:
        problems.append(f"exit status {rc}, want {' or '.join(map(str, want_rc))}")
    if "Traceback" in err or "Error:" in err.split(": ", 1)[0]:
        problems.append("a traceback")
    lines = err.split("\n")
    if not (len(lines) == 2 and lines[1] == ""):
        problems.append(f"{len(err.splitlines())} lines on stderr, want exactly one")
    if not err.startswith(PREFIX):
        problems.append(f"stderr does not start with {PREFIX!r}")
    if names is not None and names not in lines[0]:
        problems.append(f"the message does not name {names!r}")
    raw = [ch for ch in err.rstrip("\n") if unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Zl", "Zp")]
    if raw:
        problems.append(f"raw control characters on stderr: {raw!r}")
    if problems:
        raise AssertionError(f"{what}: " + "; ".join(problems) + f"\nstderr: {err!r}")


# --------------------------------------------------------------------------
# Inputs

def snapshot_text() -> str:
    """A snapshot as the tracer writes it: the demo's oom snapshot when a
    build is given, else a synthetic one."""
    if BUILD_DIR:
        out = tempfile.mkdtemp(prefix="snapshots.", dir=TMP)
        with open(fixtures.simulator_snapshots(BUILD_DIR, out)["oom"], encoding="utf-8") as f:
            return f.read()
    return json.dumps(fixtures.synthetic(n=200)[0], indent=1)


def mutated(fn: Callable[[Dict[str, Any]], None]) -> Dict[str, Any]:
    doc = fixtures.synthetic(n=50, leaks=True)[0]
    fn(doc)
    return doc


def _set(obj: Dict[str, Any], keys: str, value: Any) -> None:
    *head, last = keys.split(".")
    for k in head:
        obj = obj[int(k)] if isinstance(obj, list) else obj[k]
    if isinstance(obj, list):
        obj[int(last)] = value
    else:
        obj[last] = value


def bad_inputs() -> List[Tuple[str, Optional[Any], Optional[str]]]:
    """(what, content — None: no such file, "DIR": a directory —, what the
    message must name) for each kind of bad input."""
    real = snapshot_text()
    cases: List[Tuple[str, Optional[Any], Optional[str]]] = [
        ("missing file", None, None),
        ("directory", "DIR", None),
        ("empty file", b"", None),
        ("truncated JSON (half)", real[:len(real) // 2], None),
        ("truncated JSON (a third)", real[:len(real) // 3], None),
        ("truncated JSON (last byte gone)", real.rstrip()[:-1], None),
        ("truncated JSON (first byte only)", real[:1], None),
        ("not JSON", b"hello, world\n", None),
        ("binary", bytes(range(256)) * 4, None),
        ("invalid UTF-8", real[:100].encode() + b"\xff\xfe" + real[100:].encode(), None),
        ("UTF-8 byte order mark", b"\xef\xbb\xbf" + real.encode(), None),
        ("JSON array", [1, 2, 3], None),
        ("JSON null", b"null", None),
        ("JSON string", b'"gpumemtrace-snapshot"', None),
        ("JSON but another document", {"format": "gmtsim-ledger", "version": 1}, None),
        ("version 2", mutated(lambda d: d.update(version=2)), None),
        ("unknown reason", mutated(lambda d: d.update(reason="boom")), None),
        ("string where int", mutated(lambda d: _set(d, "summary.live_bytes", "12")), None),
        ("float where int", mutated(lambda d: _set(d, "allocations.0.size", 1.5)), None),
        ("bool where int", mutated(lambda d: _set(d, "sites.0.live_bytes", True)), None),
        ("object where array", mutated(lambda d: d.update(allocations={})), None),
        ("string where array", mutated(lambda d: d.update(argv="./train")), None),
        ("null where object", mutated(lambda d: _set(d, "allocations.0", None)), None),
        ("huge number", mutated(lambda d: _set(d, "allocations.0.size", 2 ** 70)), None),
        ("2**64", mutated(lambda d: _set(d, "summary.peak_bytes", 2 ** 64)), None),
        ("negative number", mutated(lambda d: _set(d, "allocations.0.size", -5)), None),
        ("negative pid", mutated(lambda d: d.update(pid=-1)), None),
        ("NaN", real.replace('"live_bytes": ', '"live_bytes": NaN, "x": ', 1), None),
        ("Infinity", real.replace('"live_bytes": ', '"live_bytes": Infinity, "x": ', 1), None),
        ("-Infinity", real.replace('"live_bytes": ', '"live_bytes": -Infinity, "x": ', 1), None),
        ("1e400", real.replace('"live_bytes": ', '"live_bytes": 1e400, "x": ', 1), None),
        ("a stack id that does not exist", mutated(lambda d: _set(d, "allocations.0.stack", 99999)), None),
        ("a site's stack that does not exist", mutated(lambda d: _set(d, "sites.0.stack", 424242)), None),
        ("a failed request's stack that does not exist",
         mutated(lambda d: _set(d, "failed_request.stack", 77777)), None),
        ("a leak group's stack that does not exist", mutated(lambda d: _set(d, "leaks.sites.0.stack", 5555)),
         None),
        ("an address that is not hex", mutated(lambda d: _set(d, "allocations.0.address", "0xzz")), None),
        ("deeply nested arrays", b"[" * 100000, None),
        ("deeply nested arrays, closed", b"[" * 100000 + b"]" * 100000, None),
        ("deeply nested objects", b'{"a":' * 100000, None),
        ("deeply nested value", real.replace('"argv": ', '"argv": ' + "[" * 50000 + "]" * 50000 + ', "x": ', 1),
         None),
        ("duplicate keys", real.replace('"reason": ', '"reason": "exit", "reason": ', 1), None),
        ("trailing data", real + "\n{}", None),
        ("a NUL after the document", real + "\x00", None),
        ("control characters in a key", mutated(lambda d: d["stats"].update({"\x1b]0;pwned\x07\nx": "y"})),
         None),
        ("control characters in a value of the wrong type",
         mutated(lambda d: _set(d, "summary.live_bytes", "\x1b[2J\u202e" * 30)), None),
    ]
    if real.lstrip().startswith("{"):
        assert '"live_bytes": ' in real
    return cases


@test
def bad_input_is_one_line() -> None:
    failures = []
    for i, (what, content, names) in enumerate(bad_inputs()):
        if content is None:
            p = path("no-such-snapshot.json")
        elif content == "DIR":
            p = tempfile.mkdtemp(prefix="a-directory.", dir=TMP)
        else:
            p = write(f"bad{i}.json", content)
        rc, out, err = run([p])
        try:
            one_line_error(what, rc, err, names or p)
            if out:
                raise AssertionError(f"{what}: output on stdout: {out[:200]!r}")
        except AssertionError as e:
            failures.append(str(e))
    # The same through standard input: named "-".
    rc, _, err = run(["-"], stdin=b"{")
    try:
        one_line_error("truncated JSON on standard input", rc, err, "-")
    except AssertionError as e:
        failures.append(str(e))
    # A file name that holds a newline and an escape is still one safe line.
    odd = write("odd\nname\x1b[31m.json", b"nope")
    rc, _, err = run([odd])
    try:
        one_line_error("a file name with a newline and an escape", rc, err, "name")
    except AssertionError as e:
        failures.append(str(e))
    if failures:
        raise AssertionError(f"{len(failures)} bad inputs went wrong:\n" + "\n".join(failures))


@test
def nesting_at_the_recursion_limit() -> None:
    # A value nested just shallow enough to parse may still be too deep for
    # whatever prints it in the error message; try every depth around the
    # limit (in this process: a subprocess per depth would take long).
    failures = []
    for key, template in (("format", '{"format": %s}'),
                          ("version", '{"format": "gpumemtrace-snapshot", "version": %s}'),
                          ("seconds", None)):
        for depth in range(sys.getrecursionlimit() - 120, sys.getrecursionlimit() + 10):
            value = "[" * depth + "]" * depth
            if template is None:
                doc = fixtures.synthetic(n=5, oom=False, leaks=True)[0]
                text = json.dumps(doc).replace('"seconds": 0.01', '"seconds": ' + value)
            else:
                text = template % value
            p = write("deep.json", text)
            err = io.StringIO()
            try:
                with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                    rc = cli.main([p])
            except BaseException as e:  # noqa: BLE001 — what escapes main() is the bug
                failures.append(f"{key} nested {depth} deep: {type(e).__name__} escaped main(): {e}")
                continue
            if rc != 1 or len(err.getvalue().splitlines()) != 1:
                failures.append(f"{key} nested {depth} deep: exit {rc}, stderr {err.getvalue()[:200]!r}")
    if failures:
        raise AssertionError(f"{len(failures)} depths failed, the first:\n" + "\n".join(failures[:3]))


# --------------------------------------------------------------------------
# Good input

@test
def good_input() -> None:
    doc, truth = fixtures.synthetic(n=300)
    p = fixtures.write(doc, path("good.json"))
    rc, out, err = run([p])
    assert rc == 0 and err == "", (rc, err)
    assert out.startswith("gpumemtrace: OUT OF MEMORY"), out[:200]
    assert "\x1b" not in out, "colour when standard output is not a terminal"
    rc, out, err = run(["--width", "40", "--top", "3", "--color", "always", p])
    assert rc == 0 and err == "", (rc, err)
    assert SGR.search(out), "no colour with --color always"
    for line in SGR.sub("", out).split("\n"):
        assert len(line) <= 40, f"--width 40: {line!r}"
    rc, out, err = run(["-"], stdin=json.dumps(doc).encode())
    assert rc == 0 and out.startswith("gpumemtrace: OUT OF MEMORY"), (rc, err)
    rc, out, err = run(["--quiet", p])
    assert (rc, out, err) == (0, "", ""), (rc, out, err)


@test
def real_snapshots() -> None:
    if not BUILD_DIR:
        print("  (no BUILD_DIR given: the simulator's snapshots are not run)")
        return
    out_dir = tempfile.mkdtemp(prefix="sim.", dir=TMP)
    paths = fixtures.simulator_snapshots(BUILD_DIR, out_dir)
    for which in ("oom", "exit"):
        rc, out, err = run(["--width", "80", paths[which]])
        assert rc == 0 and err == "", (which, rc, err)
    rc, out, err = run([paths["oom"], paths["exit"]])
    assert rc == 0 and out.startswith("gpumemtrace diff:"), (rc, out[:200], err)


@test
def modes() -> None:
    a, _ = fixtures.synthetic(seed=1, n=100)
    b, _ = fixtures.synthetic(seed=2, n=120)
    b["time_ns"] += 10 ** 9
    pa, pb = fixtures.write(a, path("a.json")), fixtures.write(b, path("b.json"))
    rc, out, err = run([pa, pb])
    assert rc == 0 and out.startswith("gpumemtrace diff:"), (rc, out[:200], err)
    rc, out, err = run([pb, pa])
    assert rc == 0 and "NOTE: the first snapshot is the newer one" in out, (rc, out[:400], err)
    ranks = [fixtures.write(fixtures.synthetic(rank=r, pid=900 + r, seed=r, n=50)[0], path(f"r{r}.json"))
             for r in range(4)]
    rc, out, err = run(ranks)
    assert rc == 0 and out.startswith("gpumemtrace merge: 4 processes"), (rc, out[:200], err)
    rc, out, err = run(["--merge", pa, pb])
    assert rc == 0 and out.startswith("gpumemtrace merge: 2 processes"), (rc, out[:200], err)
    # Three of one process: neither a diff nor (without --merge) a merge.
    rc, _, err = run([pa, pb, pa])
    one_line_error("three snapshots of one process", rc, err, None)
    rc, _, err = run(["-", "-"])
    one_line_error("standard input twice", rc, err, None)
    # NOTE: --diff with three files is answered by cli.choose_mode (exit 1)
    # rather than argparse (exit 2); either is a usage error, in one line.
    rc, _, err = run(["--diff", pa, pb, ranks[0]])
    one_line_error("--diff with three files", rc, err, "--diff", want_rc=(1, 2))


@test
def separate_runs() -> None:
    """Two runs of one command, one after the other (README's glob after a
    second run): the newest, and the first line says so; --merge merges;
    processes that overlapped in time, or ranks, are merged as before."""
    def run_doc(seed: int, pid: int, start: int, taken: int, **kw: Any) -> Dict[str, Any]:
        d, _ = fixtures.synthetic(seed=seed, pid=pid, n=40, **kw)
        d["argv"] = ["python", "train.py"]
        d["process"]["ppid"] = 100
        d.setdefault("series", {})["start_ns"] = start
        d["time_ns"] = taken
        return d
    t = fixtures.T0
    first = fixtures.write(run_doc(1, 5001, t, t + 10 ** 9), path("gpumemtrace.5001.oom.1.json"))
    second = fixtures.write(run_doc(2, 5002, t + 5 * 10 ** 9, t + 6 * 10 ** 9), path("gpumemtrace.5002.oom.1.json"))
    rc, out, err = run([first, second])
    lines = out.split("\n")
    assert rc == 0 and "2 snapshots of 2 separate runs" in lines[0] and "pid 5002" in lines[0] \
        and "--merge" in lines[0] and lines[1].startswith("gpumemtrace: OUT OF MEMORY") \
        and "pid 5002" in lines[1], (rc, out[:400], err)
    rc, out, err = run(["--merge", first, second])
    assert rc == 0 and out.startswith("gpumemtrace merge: 2 processes"), (rc, out[:300], err)
    overlap = fixtures.write(run_doc(3, 5003, t + 5 * 10 ** 8, t + 2 * 10 ** 9), path("overlap.json"))
    rc, out, err = run([first, overlap])
    assert rc == 0 and out.startswith("gpumemtrace merge: 2 processes"), ("overlapping processes", out[:300], err)
    third = fixtures.write(run_doc(4, 5004, t + 8 * 10 ** 9, t + 9 * 10 ** 9), path("gpumemtrace.5004.oom.1.json"))
    rc, out, err = run([first, second, third])
    assert rc == 0 and "3 snapshots of 3 separate runs" in out.split("\n")[0] and "pid 5004" in out.split("\n")[1], \
        ("three runs, read lean", out[:400], err)
    ranks = [fixtures.write(run_doc(5 + r, 5100 + r, t + r * 5 * 10 ** 9, t + (r * 5 + 1) * 10 ** 9, rank=r),
                            path(f"rk{r}.json")) for r in range(2)]
    rc, out, err = run(ranks)
    assert rc == 0 and out.startswith("gpumemtrace merge: 2 processes"), ("ranks", out[:300], err)


@test
def directories() -> None:
    """A directory stands for the newest snapshot of each process in it:
    two of one process (seq 1 and 2) and one of another give a merge of two,
    the newer of the first; a directory with no snapshot is one line naming
    it; other files in it are not read."""
    d = path("snapdir")
    os.makedirs(d, exist_ok=True)
    old, _ = fixtures.synthetic(seed=5, pid=4001, n=40)
    new, _ = fixtures.synthetic(seed=6, pid=4001, n=60)
    new["time_ns"] = old["time_ns"] + 10 ** 9
    other, _ = fixtures.synthetic(seed=7, pid=4002, rank=1, n=50)
    fixtures.write(old, os.path.join(d, "gpumemtrace.4001.oom.1.json"))
    fixtures.write(new, os.path.join(d, "gpumemtrace.4001.exit.2.json"))
    fixtures.write(other, os.path.join(d, "gpumemtrace.4002.oom.1.rank1.json"))
    with open(os.path.join(d, "notes.json"), "w", encoding="utf-8") as f:
        f.write("not a snapshot")
    rc, out, err = run([d])
    assert rc == 0 and out.startswith("gpumemtrace merge: 2 processes"), (rc, out[:300], err)
    rc, out2, err = run([os.path.join(d, "gpumemtrace.4001.exit.2.json"),
                         os.path.join(d, "gpumemtrace.4002.oom.1.rank1.json")])
    assert rc == 0 and out == out2, ("the directory is its newest snapshots", out[:300], out2[:300])
    empty = path("emptydir")
    os.makedirs(empty, exist_ok=True)
    rc, _, err = run([empty])
    one_line_error("a directory without snapshots", rc, err, empty)


@test
def many_ranks_read_in_parallel() -> None:
    """A merge of enough ranks to be read by worker processes prints what
    the merge of the fully read documents prints, with host memory; a bad
    file among them is its one line, and nothing else."""
    from gpumemtrace.view import load, merge_view
    paths = []
    for r in range(load.PARALLEL_FROM + 3):
        doc = fixtures.synthetic(rank=r, pid=700 + r, seed=40 + r, n=120, oom=r == 5)[0]
        paths.append(fixtures.write(doc, path(f"many{r}.json")))
    rc, out, err = run(["--color", "never", "--width", "100"] + paths)
    want = merge_view.merge_text([load.load(p) for p in paths], width=100, color=False)
    assert rc == 0 and err == "" and out == want, (rc, err, out[:300], want[:300])
    assert "host" in want and f"{len(paths)} processes" in want, want[:600]
    bad = write("many-bad.json", "{\"format\": \"gpumemtrace-snapshot\", \"version\": 1")
    rc, out, err = run(paths[:6] + [bad] + paths[6:])
    one_line_error("a bad file among many ranks", rc, err, "many-bad.json")
    assert out == "", out[:200]
    # Lean reading checks every allocation before it drops them.
    doc = fixtures.synthetic(rank=99, pid=799, n=120)[0]
    doc["allocations"][77]["size"] = "big"
    bad = fixtures.write(doc, path("many-bad-size.json"))
    rc, out, err = run(paths + [bad])
    one_line_error("a bad allocation among many ranks", rc, err, "/allocations/77/size")


@test
def hostile_snapshot_on_the_terminal() -> None:
    evil = "\x1b[31mRED\x1b]0;pwned\x07\x9b2J\u202e\ud800\n"
    p = write("hostile.json", json.dumps(fixtures.hostile(evil=evil, n=100)[0]))
    for color in ("never", "always"):
        rc, out, err = run(["--color", color, p])
        assert rc == 0 and err == "", (rc, err)
        plain = SGR.sub("", out)
        raw = {ch for ch in plain if ch != "\n" and unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Zl", "Zp")}
        assert not raw, f"raw characters on the terminal with --color {color}: {raw!r}"
        assert "\\x1b[31mRED" in out and "\\u202e" in out, "escapes not visible"


@test
def usage_errors() -> None:
    p = fixtures.write(fixtures.synthetic(n=10)[0], path("u.json"))
    for args in ([], ["--no-such-option", p], ["--top", "0", p], ["--top", "many", p],
                 ["--width", "-3", p], ["--color", "sometimes", p], ["--diff", "--merge", p, p]):
        rc, out, err = run(args)
        assert rc == 2, f"{args}: exit {rc}, want 2; stderr {err!r}"
        assert "Traceback" not in err and err.startswith("usage: "), f"{args}: {err!r}"
    rc, out, _ = run(["--help"])
    assert rc == 0 and "usage: gpumemtrace view" in out, rc


@test
def broken_pipe_and_narrow_encodings() -> None:
    p = fixtures.write(fixtures.synthetic(n=5000, sites=2000)[0], path("big.json"))
    proc = subprocess.Popen([sys.executable, TOOL, "--top", "100000", p], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read().decode("utf-8", "replace")
    rc = proc.wait(timeout=120)
    assert rc == 0 and err == "", f"`| head`: exit {rc}, stderr {err!r}"
    # A terminal that cannot show the arrows and ellipses gets escapes, not a
    # traceback.
    rc, out, err = run([p], env={"PYTHONIOENCODING": "ascii"})
    assert rc == 0 and "Traceback" not in err, f"ASCII standard output: exit {rc}, stderr {err[-300:]!r}"


# --------------------------------------------------------------------------
# Output files

def _have(module: str) -> bool:
    return importlib.util.find_spec(f"gpumemtrace.view.{module}") is not None


@test
def unwritable_outputs() -> None:
    p = fixtures.write(fixtures.synthetic(n=50)[0], path("o.json"))
    flags = []
    if _have("html"):
        flags.append("--html")
    else:
        print("  (gpumemtrace.view.html is not there yet: --html not tested)")
    if _have("export"):
        flags += ["--perfetto", "--speedscope", "--pytorch"]
    else:
        print("  (gpumemtrace.view.export is not there yet: --perfetto, --speedscope, --pytorch not tested)")
    failures = []
    for flag in flags:
        good = path(f"out{flag.replace('-', '_')}")
        rc, out, err = run(["--quiet", flag, good, p])
        if rc != 0 or not os.path.isfile(good) or err != f"{PREFIX}wrote {good}\n":
            failures.append(f"{flag} {good}: exit {rc}, stderr {err!r}")
        for bad in (path("no-such-dir/out.file"), "/proc/x", "/proc/self/no-such/out", TMP):
            rc, out, err = run(["--quiet", flag, bad, p])
            try:
                one_line_error(f"{flag} {bad}", rc, err, bad)
            except AssertionError as e:
                failures.append(str(e))
            left = [n for n in os.listdir(TMP) if n.startswith(".gpumemtrace-view.")]
            if left:
                failures.append(f"{flag} {bad}: temporary files left: {left}")
    if failures:
        raise AssertionError("\n".join(failures))


@test
def special_outputs() -> None:
    """"-" is standard output; a FIFO (what /dev/stdout is behind a pipe) is
    written into and stays a FIFO, a link to it stays a link; a FIFO nobody
    reads is one line, never a wait."""
    import stat
    import threading
    if not _have("html"):
        print("  (gpumemtrace.view.html is not there yet: not tested)")
        return
    p = fixtures.write(fixtures.synthetic(n=50)[0], path("s.json"))
    failures = []
    rc, out, err = run(["--html", "-", p])
    if rc != 0 or "<html" not in out.lower() or "Top sites" in out or err != f"{PREFIX}wrote standard output\n":
        failures.append(f"--html -: exit {rc}, stdout {out[:80]!r}, stderr {err!r}")
    rc, out, err = run(["--html", "-", "--perfetto", "-", p])
    try:
        one_line_error("two outputs to -", rc, err, None)
    except AssertionError as e:
        failures.append(str(e))
    fifo, link = path("out.fifo"), path("out.link")
    os.mkfifo(fifo)
    os.symlink(fifo, link)
    for target in (fifo, link):
        got: List[bytes] = []
        reader = threading.Thread(target=lambda: got.append(open(fifo, "rb").read()))
        reader.start()
        rc, out, err = run(["--quiet", "--html", target, p])
        reader.join(timeout=60)
        if (rc != 0 or not got or b"<html" not in got[0].lower() or not stat.S_ISFIFO(os.stat(fifo).st_mode)
                or (target == link and not os.path.islink(link))):
            failures.append(f"--html {target}: exit {rc}, read {len(got[0]) if got else None} bytes, stderr {err!r}, "
                            f"now {oct(os.lstat(target).st_mode)}")
    rc, out, err = run(["--quiet", "--html", fifo, p])
    try:
        one_line_error("a FIFO nobody reads", rc, err, fifo)
        if "nobody reads it" not in err or not stat.S_ISFIFO(os.stat(fifo).st_mode):
            failures.append(f"a FIFO nobody reads: {err!r}, now {oct(os.lstat(fifo).st_mode)}")
    except AssertionError as e:
        failures.append(str(e))
    if failures:
        raise AssertionError("\n".join(failures))


@test
def special_inputs() -> None:
    """The gate's rule for what it reads: a FIFO nobody writes to, /dev/zero
    (as a file and as standard input) and a directory without snapshots are
    one line each, never a wait or an endless read; a pipe on standard input
    is read."""
    import resource
    import threading

    def small() -> None:
        """An endless read fails within 2 GiB instead of taking the machine."""
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
    fifo = path("in.fifo")
    os.mkfifo(fifo)
    empty = path("special-empty")
    os.makedirs(empty, exist_ok=True)
    failures = []
    for target, words in ((fifo, "not a regular file (a FIFO)"), ("/dev/zero", "not a regular file (a character device)"),
                          (empty, "no snapshot in this directory")):
        try:
            rc, _, err = run([target], timeout=30, preexec_fn=small)
            one_line_error(f"input {target}", rc, err, words)
        except (AssertionError, subprocess.TimeoutExpired) as e:
            failures.append(str(e))
    # A FIFO whose writer never stops: refused before anything is read.
    stop = threading.Event()

    def writer() -> None:
        try:
            with open(fifo, "wb") as f:
                while not stop.is_set():
                    f.write(b" " * 65536)
        except OSError:
            pass
    t = threading.Thread(target=writer, daemon=True)
    t.start()
    try:
        rc, _, err = run([fifo], timeout=30, preexec_fn=small)
        one_line_error("a FIFO with an endless writer", rc, err, "a FIFO")
    except (AssertionError, subprocess.TimeoutExpired) as e:
        failures.append(str(e))
    stop.set()
    try:
        os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))  # lets the writer's open return
    except OSError:
        pass
    with open("/dev/zero", "rb") as zero:
        try:
            r = subprocess.run([sys.executable, TOOL, "-"], stdin=zero, capture_output=True, timeout=30,
                               preexec_fn=small)
        except subprocess.TimeoutExpired as ex:
            r = subprocess.CompletedProcess(ex.cmd, -1, b"", b"timed out")
    try:
        one_line_error("standard input /dev/zero", r.returncode, r.stderr.decode("utf-8", "replace"),
                       "standard input is a character device")
    except AssertionError as ex:
        failures.append(str(ex))
    good = fixtures.write(fixtures.synthetic(n=5)[0], path("piped.json"))
    with open(good, "rb") as f:
        rc, out, err = run(["-"], stdin=f.read())
    if rc != 0 or err:
        failures.append(f"a pipe on standard input: exit {rc}, stderr {err!r}")
    if failures:
        raise AssertionError("\n".join(failures))


def main(argv: List[str]) -> int:
    global BUILD_DIR, TMP
    BUILD_DIR = argv[1] if len(argv) > 1 else None
    with tempfile.TemporaryDirectory(prefix="gmt-view-cli.") as tmp:
        TMP = tmp
        return fixtures.run_tests(TESTS)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
