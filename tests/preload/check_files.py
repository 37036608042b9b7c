#!/usr/bin/env python3
"""Runs a test program under LD_PRELOAD=libgpumemtrace.so where its snapshots
cannot go where they should, and checks the file-safety rules of the snapshot
writer through the whole library (tests/output/test_snapshot.c covers the
writer alone):

- read-only-dir: GPUMEMTRACE_DIR is a directory the program may not write into
  (as root: the program runs as uid/gid 65534, for which DAC applies);
- full-disk: a full tmpfs (when it can be mounted; else a 1 KiB RLIMIT_FSIZE);
- file-size-limit: a 1 KiB RLIMIT_FSIZE with SIGXFSZ at its default action
  (as `ulimit -f` leaves it: a write past the limit kills the writer's
  process unless the signal is blocked), file-size-limit-ignored the same
  with SIGXFSZ ignored (EFBIG);
  in these every snapshot fails the same way: the program must behave as
  without the tracer (exit status, stdout, its own stderr), the tracer must say
  "cannot write a snapshot into DIR: REASON (...)" exactly once, the
  out-of-memory report must still come for every episode (its verdict, and
  "snapshot: not written (REASON)"), and nothing (no temporary file either)
  may be left in the directory;
- stderr-over-limit: the same limit and default action, and stderr is a file
  already at the limit, so that the tracer's own message cannot be written
  either; stderr-closed: stderr is a pipe nobody reads (SIGPIPE at its
  default action) and GPUMEMTRACE_DIR cannot be made: in both the program
  must behave as without the tracer, and nothing may be left;
- stderr-unread-pipe, stderr-unread-socket: stderr is a pipe or a socket
  already full, read only after the program ended: the program must end as
  without the tracer, the lines that found no room counted in the exit
  snapshot's stats.log_lines_dropped;
- errors-counted: the directory is read-only until that one warning, writable
  afterwards: the later snapshots are written, and the exit snapshot counts the
  failures in stats.snapshot_errors (the first, and those the tracer
  attempted before the test could open the directory);
- symlink: a symlink to a file outside the directory planted at the name of the
  first oom snapshot (by the shell whose pid the program inherits through
  exec): the file keeps its content, the symlink stays, and the snapshot is
  written under the next number (seq 2), mode 0600;
- dangling-symlink: the same with a symlink to a path that does not exist,
  which must not be created;
- existing-file: a regular file at that name stays, with its content.

The program must reach at least two out-of-memory episodes and write a
snapshot for each when nothing is in the way (triggers storm does): the cases
where every write fails first run it into a writable directory to make sure.
Every snapshot written (in that first run too) must be valid against
docs/snapshot.schema.json (tests/schema/schema_check.py).

Usage: check_files.py CASE --lib LIBGPUMEMTRACE [--env VAR=VALUE]... -- PROGRAM [ARG]...
"""
from __future__ import annotations

import argparse
import errno
import fcntl
import glob
import json
import os
import re
import resource
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "schema"))
import schema_check  # noqa: E402  (tests/schema: every snapshot against docs/snapshot.schema.json)

NOBODY = 65534
FSIZE_LIMIT = 1024
WARNING = re.compile(r"^gpumemtrace: cannot write a snapshot into (.*): (.*) "
                     r"\(snapshots that fail the same way are counted, not reported\)$")
VICTIM_TEXT = "the victim of a planted link: must stay as it is\n"


@dataclass
class Outcome:
    pid: int
    status: int
    stdout: str
    stderr: str


@dataclass
class Setup:
    """How the program runs: its command, the environment without the tracer,
    the library (and ASan runtime) to preload, and the work directory."""
    command: list[str]
    env: dict[str, str]
    preload: list[str]
    workdir: str
    notes: list[str] = field(default_factory=list)  # what the case saw, printed by main
    ooms: int = 0  # oom snapshots of the baseline run


def base_env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("GMTSIM_") and not k.startswith("GPUMEMTRACE_")}
    env.update(extra)
    env["GPUMEMTRACE_SNAPSHOT_ON"] = "oom,exit"
    # NOTE: no leak scan at exit: not what these cases are about, and under
    # AddressSanitizer (each word looked up in its allocator) it can take
    # minutes on a busy machine.
    env["GPUMEMTRACE_LEAK_SCAN"] = "0"
    return env


def preload_list(lib: str) -> list[str]:
    asan = os.environ.get("GMT_TEST_ASAN_RUNTIME", "")
    # NOTE: an instrumented preload needs the ASan runtime first in the list
    # (as in check_trace.py).
    return [asan, lib] if asan else [lib]


def traced_env(setup: Setup, snapdir: str) -> dict[str, str]:
    env = dict(setup.env, GPUMEMTRACE_DIR=snapdir, LD_PRELOAD=" ".join(setup.preload))
    if len(setup.preload) > 1:
        env["ASAN_OPTIONS"] = env.get("ASAN_OPTIONS", "") + ":detect_leaks=0"
    return env


def child_setup(as_nobody: bool, fsize: int | None, xfsz_ignored: bool) -> Callable[[], None]:
    """What the child does between fork and exec: a fixed umask (so that the
    mode of a snapshot is the library's choice alone), then the file-size
    limit and the identity the case asks for."""
    def setup() -> None:
        os.umask(0)
        if fsize is not None:
            # SIG_IGN survives exec: write() fails with EFBIG instead; the
            # default action kills (Python ignores SIGXFSZ itself).
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN if xfsz_ignored else signal.SIG_DFL)
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
        if as_nobody:
            os.setgroups([])
            os.setresgid(NOBODY, NOBODY, NOBODY)
            os.setresuid(NOBODY, NOBODY, NOBODY)
    return setup


def run(command: list[str], env: dict[str, str], workdir: str, *, as_nobody: bool = False,
        fsize: int | None = None, xfsz_ignored: bool = False, stderr_fd: int | None = None,
        on_stderr_line: Callable[[str], None] | None = None) -> Outcome:
    """Runs command to its end; stderr is read line by line and each line
    handed to on_stderr_line while it runs (stderr_fd: stderr goes there
    instead, and the outcome has none)."""
    # NOTE: stdout through a pipe, not a file, which RLIMIT_FSIZE would cut.
    proc = subprocess.Popen(command, env=env, cwd=workdir, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE if stderr_fd is None else stderr_fd,
                            text=True, preexec_fn=child_setup(as_nobody, fsize, xfsz_ignored))
    assert proc.stdout is not None
    stdout: list[str] = []
    pipe = proc.stdout
    reader = threading.Thread(target=lambda: stdout.append(pipe.read()))
    reader.start()
    lines = []
    for line in proc.stderr if proc.stderr is not None else []:
        lines.append(line)
        if on_stderr_line is not None:
            on_stderr_line(line.rstrip("\n"))
    reader.join()
    status = proc.wait(timeout=120)
    return Outcome(proc.pid, status, "".join(stdout), "".join(lines))


def comparable(stdout: str) -> list[str]:
    """The output with what differs from run to run taken out: the pid of
    "PID <pid> <role>", the address of "LIVE <address> <size> <kind> <device>"."""
    lines = []
    for line in stdout.splitlines():
        words = line.split()
        if words[:1] == ["PID"] and len(words) == 3:
            line = f"PID * {words[2]}"
        elif words[:1] == ["LIVE"] and len(words) == 5:
            line = "LIVE * " + " ".join(words[2:])
        lines.append(line)
    return lines


def program_stderr(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if not line.startswith("gpumemtrace:")]


def behaviour_problems(traced: Outcome, plain: Outcome) -> list[str]:
    """What differs between the traced and the untraced run."""
    problems = []
    if traced.status != plain.status:
        problems.append(f"exit status {traced.status} traced, {plain.status} untraced")
    if comparable(traced.stdout) != comparable(plain.stdout):
        problems.append(f"stdout differs: traced {comparable(traced.stdout)}, "
                        f"untraced {comparable(plain.stdout)}")
    if program_stderr(traced.stderr) != program_stderr(plain.stderr):
        problems.append(f"the program's stderr differs: traced {program_stderr(traced.stderr)[:5]}, "
                        f"untraced {program_stderr(plain.stderr)[:5]}")
    return problems


def warning_problems(stderr: str, snapdir: str, err: int | None) -> list[str]:
    """The tracer must say it cannot write a snapshot exactly once, in the
    documented words, with this errno's reason (never, for err None). Its
    other lines (the out-of-memory report) are not this test's business."""
    warned = [line for line in stderr.splitlines()
              if line.startswith("gpumemtrace:") and "cannot write a snapshot" in line]
    if err is None:
        return [f"the tracer warned: {warned}"] if warned else []
    if len(warned) != 1:
        return [f"{len(warned)} 'cannot write' warnings, exactly 1 expected: {warned}"]
    want = (snapdir, os.strerror(err))
    match = WARNING.match(warned[0])
    if match is None or match.groups() != want:
        return [f"the warning says {warned[0]!r}, directory and reason {want} in the words of "
                f"{WARNING.pattern!r} expected"]
    return []


def leftover_problems(snapdir: str, allowed: set[str]) -> list[str]:
    """Every entry of snapdir but the allowed ones is a leftover; temporary
    files (".gpumemtrace.*.tmp", src/report/snapshot.c) are named as such."""
    left = sorted(set(os.listdir(snapdir)) - allowed)
    temps = [n for n in left if n.startswith(".gpumemtrace") or n.endswith(".tmp")]
    problems = []
    if temps:
        problems.append(f"temporary files left in {snapdir}: {temps}")
    if [n for n in left if n not in temps]:
        problems.append(f"files left in {snapdir}: {[n for n in left if n not in temps]}")
    return problems


def snapshots(snapdir: str, pid: int, reason: str) -> dict[int, str]:
    """The snapshots of pid for reason by their number."""
    found = glob.glob(os.path.join(glob.escape(snapdir), f"gpumemtrace.{pid}.{reason}.*.json"))
    return {int(p.rsplit(".", 2)[1]): p for p in found}


def load(path: str) -> dict[str, Any]:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def schema_problems(setup: Setup, paths: list[str]) -> list[str]:
    """Every snapshot in paths against docs/snapshot.schema.json; the count
    goes into the notes."""
    problems = schema_check.validate(paths)
    if not problems:
        setup.notes.append(f"schema: {len(paths)} snapshots valid")
    return problems


def pid_problems(outcome: Outcome) -> list[str]:
    said = [line.split()[1] for line in outcome.stdout.splitlines()
            if line.startswith("PID ") and line.endswith(" main")]
    if said != [str(outcome.pid)]:
        return [f"the program printed PID lines {said}, pid {outcome.pid} expected"]
    return []


def report_problems(stderr: str, ooms: int, err: int) -> list[str]:
    """The out-of-memory report must not depend on the file: one per episode
    (as many as oom snapshots when they can be written), each with its
    verdict, and ending in "snapshot: not written (REASON)"."""
    lines = stderr.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("gpumemtrace: out of memory: ")]
    problems = [] if len(starts) == ooms else [f"{len(starts)} out-of-memory reports, {ooms} expected "
                                               "(one per episode, written or not)"]
    for i in starts:
        body = []
        for line in lines[i + 1:]:
            if not line.startswith("gpumemtrace:   "):
                break
            body.append(line)
        if not any(line.startswith("gpumemtrace:   verdict: ") for line in body):
            problems.append(f"an out-of-memory report without its verdict: {lines[i:i + len(body) + 1]}")
        want = f"gpumemtrace:   snapshot: not written ({os.strerror(err)})"
        if not body or body[-1] != want:
            problems.append(f"an out-of-memory report ends in {body[-1:] or lines[i:i + 1]}, {want!r} expected")
    return problems


def baseline(setup: Setup) -> tuple[int, list[str]]:
    """Runs the program traced into a writable directory: how many snapshots
    it writes when nothing is in the way (at least two oom and one exit, or
    the cases that count warnings prove nothing)."""
    snapdir = os.path.join(setup.workdir, "baseline")
    os.mkdir(snapdir)
    outcome = run(setup.command, traced_env(setup, snapdir), setup.workdir)
    ooms, exits = snapshots(snapdir, outcome.pid, "oom"), snapshots(snapdir, outcome.pid, "exit")
    invalid = schema_problems(setup, schema_check.snapshot_files(snapdir))
    shutil.rmtree(snapdir)
    if invalid:
        return 0, [f"baseline: {line}" for line in invalid]
    if outcome.status != 0 or len(ooms) < 2 or len(exits) != 1:
        return 0, [f"baseline: with a writable directory the program exits {outcome.status} and writes "
                   f"{len(ooms)} oom and {len(exits)} exit snapshots; 0, at least 2 and 1 are needed "
                   f"(stderr: {outcome.stderr.splitlines()[-3:]})"]
    setup.ooms = len(ooms)
    return len(ooms) + len(exits), []


def unwritable_case(setup: Setup, snapdir: str, err: int, *, as_nobody: bool = False,
                    fsize: int | None = None, xfsz_ignored: bool = False,
                    allowed: frozenset[str] = frozenset()) -> list[str]:
    """The checks shared by the cases where every snapshot fails with err."""
    attempts, problems = baseline(setup)
    if problems:
        return problems
    plain = run(setup.command, setup.env, setup.workdir, as_nobody=as_nobody, fsize=fsize,
                xfsz_ignored=xfsz_ignored)
    traced = run(setup.command, traced_env(setup, snapdir), setup.workdir, as_nobody=as_nobody, fsize=fsize,
                 xfsz_ignored=xfsz_ignored)
    problems += behaviour_problems(traced, plain)
    problems += warning_problems(traced.stderr, snapdir, err)
    problems += report_problems(traced.stderr, setup.ooms, err)
    problems += leftover_problems(snapdir, set(allowed))
    warned = [line for line in traced.stderr.splitlines() if "cannot write a snapshot" in line]
    setup.notes.append(f"{attempts} snapshots failed with {errno.errorcode[err]}: "
                       f"{len(warned)} warning: {warned[:1]}")
    return problems


def case_read_only_dir(setup: Setup) -> list[str]:
    snapdir = os.path.join(setup.workdir, "snapshots")
    os.mkdir(snapdir)
    os.chmod(snapdir, 0o555)
    # NOTE: root passes DAC checks (CAP_DAC_OVERRIDE): only another uid sees
    # the directory read-only; setresuid to it drops the capabilities.
    as_nobody = os.geteuid() == 0
    return unwritable_case(setup, snapdir, errno.EACCES, as_nobody=as_nobody)


def case_file_size_limit(setup: Setup) -> list[str]:
    snapdir = os.path.join(setup.workdir, "snapshots")
    os.mkdir(snapdir)
    return unwritable_case(setup, snapdir, errno.EFBIG, fsize=FSIZE_LIMIT)


def case_file_size_limit_ignored(setup: Setup) -> list[str]:
    snapdir = os.path.join(setup.workdir, "snapshots")
    os.mkdir(snapdir)
    return unwritable_case(setup, snapdir, errno.EFBIG, fsize=FSIZE_LIMIT, xfsz_ignored=True)


def silent_stderr_case(setup: Setup, snapdir: str, stderr_fd: Callable[[], int], fsize: int | None) -> list[str]:
    """The program traced and untraced with stderr on a descriptor that
    takes no write: the same exit status and stdout, nothing left."""
    _, problems = baseline(setup)
    if problems:
        return problems
    outcomes = []
    for env in (setup.env, traced_env(setup, snapdir)):
        fd = stderr_fd()
        try:
            outcomes.append(run(setup.command, env, setup.workdir, fsize=fsize, stderr_fd=fd))
        finally:
            os.close(fd)
    plain, traced = outcomes
    problems += behaviour_problems(traced, plain)
    if os.path.isdir(snapdir):
        problems += leftover_problems(snapdir, set())
    setup.notes.append(f"exit status {traced.status} traced, {plain.status} untraced")
    return problems


def case_stderr_over_limit(setup: Setup) -> list[str]:
    snapdir = os.path.join(setup.workdir, "snapshots")
    os.mkdir(snapdir)
    full = os.path.join(setup.workdir, "stderr.txt")

    def stderr_fd() -> int:
        with open(full, "wb") as f:
            f.write(b"x" * FSIZE_LIMIT)
        return os.open(full, os.O_WRONLY | os.O_APPEND)
    problems = silent_stderr_case(setup, snapdir, stderr_fd, FSIZE_LIMIT)
    if os.path.getsize(full) != FSIZE_LIMIT:
        problems.append(f"stderr grew past the file-size limit: {os.path.getsize(full)} bytes")
    return problems


def case_stderr_closed(setup: Setup) -> list[str]:
    def stderr_fd() -> int:
        r, w = os.pipe()
        os.close(r)  # before the program starts: its first write to stderr raises SIGPIPE
        return w
    # A directory that cannot be made: the tracer has something to say.
    return silent_stderr_case(setup, os.path.join(setup.workdir, "absent", "snapshots"), stderr_fd, None)


def full_stderr(kind: str) -> tuple[int, int]:
    """A pipe (shrunk to one page) or a socket pair with no room left: the
    (reading, writing) ends. Nobody reads it until the program has ended."""
    if kind == "pipe":
        r, w = os.pipe()
        fcntl.fcntl(w, F_SETPIPE_SZ, 4096)
    else:
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        b.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        a.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        r, w = a.detach(), b.detach()
    os.set_blocking(w, False)
    try:
        while True:
            os.write(w, b"x" * 512)
    except BlockingIOError:
        pass
    os.set_blocking(w, True)
    return r, w


def unread_stderr_case(setup: Setup, kind: str) -> list[str]:
    """The program with stderr on a pipe or socket that is full and read
    only after the program ended (the wait-then-read pattern): traced, it
    must end as untraced does (the same status and stdout) instead of
    waiting on a line of the tracer's; the lines that found no room are
    counted in the exit snapshot (stats.log_lines_dropped), and whatever the
    tracer did write is whole lines."""
    problems: list[str] = []
    snapdir = os.path.join(setup.workdir, "snapshots")
    os.mkdir(snapdir)
    outcomes = []
    for env in (setup.env, traced_env(setup, snapdir)):
        r, w = full_stderr(kind)
        proc = subprocess.Popen(setup.command, env=env, cwd=setup.workdir, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=w, text=True, preexec_fn=child_setup(False, None, False))
        os.close(w)
        try:
            stdout, _ = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            os.close(r)
            return problems + [f"the program did not end in 60 s with its stderr ({kind}) full and unread"]
        os.set_blocking(r, False)
        data = b""
        try:
            while chunk := os.read(r, 65536):
                data += chunk
        except BlockingIOError:
            pass
        os.close(r)
        outcomes.append(Outcome(proc.pid, proc.returncode, stdout, data.decode("utf-8", "replace")))
    plain, traced = outcomes
    problems += behaviour_problems(traced, plain)
    ours = traced.stderr.lstrip("x")
    if ours and (not ours.endswith("\n") or any(not line.startswith("gpumemtrace: ") for line in ours.splitlines())):
        problems.append(f"the tracer wrote something other than whole lines: {ours[:200]!r}")
    exits = snapshots(snapdir, traced.pid, "exit")
    if len(exits) != 1:
        return problems + [f"{len(exits)} exit snapshots, expected 1"]
    dropped = load(exits[min(exits)]).get("stats", {}).get("log_lines_dropped", 0)
    if dropped < 2:
        problems.append(f"stats.log_lines_dropped is {dropped}: the reports of two episodes found no room")
    setup.notes.append(f"{kind}: exit status {traced.status} traced, {plain.status} untraced; "
                       f"{dropped} lines not written")
    return problems + schema_problems(setup, schema_check.snapshot_files(snapdir))


def case_stderr_unread_pipe(setup: Setup) -> list[str]:
    return unread_stderr_case(setup, "pipe")


def case_stderr_unread_socket(setup: Setup) -> list[str]:
    return unread_stderr_case(setup, "socket")


def fill(path: str) -> None:
    """Writes to path until its filesystem is full."""
    chunk = b"\0" * 4096
    with open(path, "wb", buffering=0) as f:
        try:
            while True:
                f.write(chunk)
        except OSError as e:
            if e.errno != errno.ENOSPC:
                raise
    with open(path, "ab", buffering=0) as f:
        try:
            while True:
                f.write(b"\0")
        except OSError as e:
            if e.errno != errno.ENOSPC:
                raise


def mount_tmpfs(path: str, size: str) -> bool:
    """Whether a tmpfs of that size could be mounted at path (root may)."""
    if shutil.which("mount") is None:
        return False
    return subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "gmt-full", path],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False).returncode == 0


def case_full_disk(setup: Setup) -> list[str]:
    snapdir = os.path.join(setup.workdir, "snapshots")
    os.mkdir(snapdir)
    if not mount_tmpfs(snapdir, "64k"):
        setup.notes.append(f"no tmpfs could be mounted: a file-size limit of {FSIZE_LIMIT} bytes instead")
        return unwritable_case(setup, snapdir, errno.EFBIG, fsize=FSIZE_LIMIT)
    try:
        fill(os.path.join(snapdir, "filler"))
        setup.notes.append(f"a 64 KiB tmpfs, {os.statvfs(snapdir).f_bavail} blocks left free")
        return unwritable_case(setup, snapdir, errno.ENOSPC, allowed=frozenset({"filler"}))
    finally:
        if subprocess.run(["umount", snapdir], check=False).returncode != 0:
            subprocess.run(["umount", "-l", snapdir], check=False)


def case_errors_counted(setup: Setup) -> list[str]:
    snapdir = os.path.join(setup.workdir, "snapshots")
    os.mkdir(snapdir)
    os.chmod(snapdir, 0o555)
    as_nobody = os.geteuid() == 0

    def open_up(line: str) -> None:
        # The first oom snapshot is written in the failing call, before the
        # program goes on (then 1.2 s to its second episode in triggers storm).
        if "cannot write a snapshot" in line:
            os.chmod(snapdir, 0o777)

    traced = run(setup.command, traced_env(setup, snapdir), setup.workdir, as_nobody=as_nobody,
                 on_stderr_line=open_up)
    problems = [f"exit status {traced.status}"] if traced.status != 0 else []
    problems += warning_problems(traced.stderr, snapdir, errno.EACCES)
    ooms, exits = snapshots(snapdir, traced.pid, "oom"), snapshots(snapdir, traced.pid, "exit")
    if len(exits) != 1:
        return problems + [f"{len(exits)} exit snapshots once the directory was writable, 1 expected"]
    if len(ooms) < 1:
        problems.append("no oom snapshot of a later episode once the directory was writable")
    stats = load(next(iter(exits.values())))["stats"]
    # The first write fails; the directory opens when the test reads the
    # warning, and a loaded machine may let the episode's next rewrites (at
    # most 8 and its end) and the second episode's first write fail before.
    if not 1 <= (stats.get("snapshot_errors") or 0) <= 10:
        problems.append(f"stats.snapshot_errors is {stats.get('snapshot_errors')}, 1 to 10 expected "
                        "(the writes before the directory opened)")
    if stats.get("snapshots") != len(ooms):
        problems.append(f"stats.snapshots is {stats.get('snapshots')}, {len(ooms)} oom snapshots were written")
    names = {os.path.basename(p) for p in list(ooms.values()) + list(exits.values())}
    problems += leftover_problems(snapdir, names)
    problems += schema_problems(setup, sorted(list(ooms.values()) + list(exits.values())))
    setup.notes.append(f"stats: snapshot_errors {stats.get('snapshot_errors')}, "
                       f"snapshots {stats.get('snapshots')}")
    return problems


def planted_case(setup: Setup, plant: Callable[[str, str], tuple[str, Callable[[], list[str]]]]) -> list[str]:
    """Runs the program from a shell that plants something at the name of its
    first oom snapshot (gpumemtrace.$$.oom.1.json: exec keeps the pid) before
    it execs the program with the tracer; then checks that the first episode
    was written under seq 2 and the planted thing is untouched (the check
    plant returns)."""
    snapdir = os.path.join(setup.workdir, "snapshots")
    outside = os.path.join(setup.workdir, "outside")
    os.mkdir(snapdir)
    os.mkdir(outside)
    shell_line, untouched = plant(snapdir, outside)
    script = shell_line + ' && export LD_PRELOAD="$GMT_PRELOAD" && exec "$@"'
    env = traced_env(setup, snapdir)
    env["GMT_PRELOAD"] = env.pop("LD_PRELOAD")
    plain = run(setup.command, setup.env, setup.workdir)
    traced = run(["sh", "-c", script, "sh"] + setup.command, env, setup.workdir)
    problems = behaviour_problems(traced, plain) + pid_problems(traced)
    problems += warning_problems(traced.stderr, snapdir, None)
    problems += untouched()
    ooms, exits = snapshots(snapdir, traced.pid, "oom"), snapshots(snapdir, traced.pid, "exit")
    ooms.pop(1, None)  # the planted name: untouched() has checked it
    seqs = sorted(ooms)
    # Without the retry the first episode is lost and the second takes seq 2:
    # require both episodes, the first one under 2.
    if len(seqs) < 2 or seqs[0] != 2:
        return problems + [f"oom snapshots numbered {seqs} (a name was planted at 1): "
                           f"[2, 3, ...] expected"]
    first = ooms[2]
    st = os.lstat(first)
    if not stat.S_ISREG(st.st_mode):
        problems.append(f"{first} is not a regular file")
    if stat.S_IMODE(st.st_mode) != 0o600:
        problems.append(f"{first} has mode {oct(stat.S_IMODE(st.st_mode))}, 0o600 expected")
    try:
        doc = load(first)
    except (OSError, ValueError) as e:
        return problems + [f"{first} is no JSON document: {e}"]
    if doc.get("reason") != "oom" or doc.get("seq") != 2 or doc.get("pid") != traced.pid:
        problems.append(f"{first} says reason {doc.get('reason')!r}, seq {doc.get('seq')}, pid {doc.get('pid')}")
    episodes = [(load(p).get("episode") or {}).get("id") for _, p in sorted(ooms.items())]
    if episodes != sorted(episodes) or episodes[0] != 1:
        problems.append(f"the oom snapshots are of episodes {episodes}: the first episode "
                        "must be under seq 2")
    if len(exits) != 1:
        problems.append(f"{len(exits)} exit snapshots, 1 expected")
    else:
        stats = load(next(iter(exits.values())))["stats"]
        if stats.get("snapshot_errors") != 0:
            problems.append(f"stats.snapshot_errors is {stats.get('snapshot_errors')}: "
                            "a taken name is no error")
    names = {os.path.basename(p) for p in list(ooms.values()) + list(exits.values())}
    problems += leftover_problems(snapdir, names | {f"gpumemtrace.{traced.pid}.oom.1.json"})
    # (ooms no longer holds the planted name)
    problems += schema_problems(setup, sorted(list(ooms.values()) + list(exits.values())))
    setup.notes.append(f"oom snapshots numbered {seqs}, exit snapshots {sorted(exits)}")
    return problems


def planted_name(snapdir: str) -> str:
    return f'"{snapdir}/gpumemtrace.$$.oom.1.json"'


def symlink_untouched(link_glob: str, target: str, want: str | None) -> list[str]:
    """The one symlink matching link_glob still points to target, whose
    content is still want (None: target still does not exist)."""
    links = glob.glob(link_glob)
    problems = []
    if len(links) != 1 or not os.path.islink(links[0]):
        problems.append(f"the planted symlink is gone or replaced: {links}")
    elif os.readlink(links[0]) != target:
        problems.append(f"the planted symlink now points to {os.readlink(links[0])!r}")
    if want is None and os.path.lexists(target):
        problems.append(f"{target} was created through the dangling symlink")
    elif want is not None:
        with open(target, encoding="utf-8", errors="replace") as f:
            got = f.read()
        if got != want:
            problems.append(f"the symlink's target {target} was written: {got[:80]!r}")
    return problems


def case_symlink(setup: Setup) -> list[str]:
    def plant(snapdir: str, outside: str) -> tuple[str, Callable[[], list[str]]]:
        victim = os.path.join(outside, "victim")
        with open(victim, "w", encoding="utf-8") as f:
            f.write(VICTIM_TEXT)
        return (f'ln -s "{victim}" {planted_name(snapdir)}',
                lambda: symlink_untouched(os.path.join(snapdir, "gpumemtrace.*.oom.1.json"), victim,
                                          VICTIM_TEXT))
    return planted_case(setup, plant)


def case_dangling_symlink(setup: Setup) -> list[str]:
    def plant(snapdir: str, outside: str) -> tuple[str, Callable[[], list[str]]]:
        victim = os.path.join(outside, "absent")
        return (f'ln -s "{victim}" {planted_name(snapdir)}',
                lambda: symlink_untouched(os.path.join(snapdir, "gpumemtrace.*.oom.1.json"), victim, None))
    return planted_case(setup, plant)


def case_existing_file(setup: Setup) -> list[str]:
    def plant(snapdir: str, outside: str) -> tuple[str, Callable[[], list[str]]]:
        line = f"printf %s '{VICTIM_TEXT.strip()}' > {planted_name(snapdir)}"

        def untouched() -> list[str]:
            files = glob.glob(os.path.join(snapdir, "gpumemtrace.*.oom.1.json"))
            if len(files) != 1 or not stat.S_ISREG(os.lstat(files[0]).st_mode):
                return [f"the planted file is gone or no longer a regular file: {files}"]
            with open(files[0], encoding="utf-8", errors="replace") as f:
                got = f.read()
            if got != VICTIM_TEXT.strip():
                return [f"the planted file {files[0]} was replaced: {got[:80]!r}"]
            return []
        return line, untouched
    return planted_case(setup, plant)


CASES: dict[str, Callable[[Setup], list[str]]] = {
    "read-only-dir": case_read_only_dir,
    "full-disk": case_full_disk,
    "file-size-limit": case_file_size_limit,
    "file-size-limit-ignored": case_file_size_limit_ignored,
    "stderr-over-limit": case_stderr_over_limit,
    "stderr-closed": case_stderr_closed,
    "stderr-unread-pipe": case_stderr_unread_pipe,
    "stderr-unread-socket": case_stderr_unread_socket,
    "errors-counted": case_errors_counted,
    "symlink": case_symlink,
    "dangling-symlink": case_dangling_symlink,
    "existing-file": case_existing_file,
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("case", choices=sorted(CASES))
    ap.add_argument("--lib", required=True)
    ap.add_argument("--env", action="append", default=[], metavar="VAR=VALUE")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    ap.add_argument("command", nargs="+", help="the program and its arguments (after --)")
    args = ap.parse_args()

    workdir = tempfile.mkdtemp(prefix="gmt-files-")
    # Reachable by the other uid of the read-only cases.
    os.chmod(workdir, 0o755)
    setup = Setup(command=[os.path.abspath(args.command[0])] + args.command[1:],
                  env=base_env(dict(kv.split("=", 1) for kv in args.env)),
                  preload=preload_list(os.path.abspath(args.lib)), workdir=workdir)
    try:
        problems = CASES[args.case](setup)
    finally:
        for root, dirs, _ in os.walk(workdir):
            for d in dirs:
                os.chmod(os.path.join(root, d), 0o755)
    for note in setup.notes:
        print(note)
    if problems:
        for p in problems:
            print(f"FAIL {args.case}: {p}")
        print(f"work directory kept: {workdir}")
        return 1
    print(f"ok: {args.case}")
    if not args.keep:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
