"""The command line of the viewer: read the snapshots, pick the view (one
snapshot, a diff of two of one process, a merge of several processes), print
the terminal summary and write the files asked for. Exit status: 0, 1 when an
input or output fails (one line on stderr naming it), 2 for a usage error."""

from __future__ import annotations

import argparse
import errno
import os
import pickle
import re
import stat
import sys
import tempfile
from typing import Any, Dict, List, Optional, Sequence

from . import load as loader
from .load import ViewError

PROG = "gpumemtrace view"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Summarise gpumemtrace snapshots in the terminal, write a self-contained "
                    "HTML report, or export them for Perfetto, speedscope or PyTorch's memory "
                    "viewer. One snapshot: its summary. Two of the same process: what grew "
                    "from the first to the second. Snapshots of several processes (ranks): "
                    "one merged report with a per-process breakdown. docs/viewer.md has more.")
    p.add_argument("files", nargs="+", metavar="FILE",
                   help="snapshot (JSON); - reads standard input; a directory stands for the newest snapshot of "
                        "each process in it (gpumemtrace.<pid>.<reason>.<seq>[.rank<R>].json)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--diff", action="store_true",
                      help="compare two snapshots (older first) even of different processes")
    mode.add_argument("--merge", action="store_true",
                      help="merge the snapshots even when two are of one process")
    p.add_argument("--html", metavar="OUT", help="write the HTML report to OUT")
    p.add_argument("--perfetto", "--chrome-trace", dest="perfetto", metavar="OUT",
                   help="write Chrome trace JSON (Perfetto, chrome://tracing) to OUT")
    p.add_argument("--speedscope", metavar="OUT", help="write speedscope JSON (live bytes by stack) to OUT")
    p.add_argument("--pytorch", metavar="OUT",
                   help="write a PyTorch memory snapshot pickle (for pytorch.org/memory_viz) to OUT")
    p.add_argument("--level", choices=("tensors", "driver"), default="tensors",
                   help="the sites of a snapshot whose framework handed over its tensors (PyTorch): its "
                        "tensors and the memory outside its segments (tensors, the default), or the driver's "
                        "allocations, its segments among them (driver)")
    p.add_argument("--top", type=_positive, default=10, metavar="N",
                   help="sites and items listed in the terminal (default 10)")
    p.add_argument("--frames", type=_positive, default=3, metavar="N",
                   help="frames shown for each of the largest sites and the failed request: the site's own "
                        "and its callers in the program's code (default 3)")
    p.add_argument("--color", choices=("auto", "always", "never"), default="auto",
                   help="colour the terminal summary (auto: when standard output is a terminal "
                        "and NO_COLOR is not set)")
    p.add_argument("--width", type=_positive, metavar="COLS",
                   help="terminal width (default: the terminal's, or 80)")
    p.add_argument("-q", "--quiet", action="store_true", help="no terminal summary")
    p.add_argument("--summary", action="store_true",
                   help="the terminal summary also when writing files (--html and the exports write only "
                        "their files by default)")
    return p


def _positive(s: str) -> int:
    try:
        n = int(s, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: '{s}'") from None
    if n < 1 or n > 1_000_000:
        raise argparse.ArgumentTypeError(f"out of range (1..1000000): {n}")
    return n


def choose_mode(docs: Sequence[Dict[str, Any]], diff: bool, merge: bool) -> str:
    """"single", "diff" or "merge" for these snapshots (ViewError when none fits)."""
    if diff:
        if len(docs) != 2:
            raise ViewError(f"--diff compares two snapshots, not {len(docs)}")
        return "diff"
    if merge or len(docs) == 1:
        return "merge" if len(docs) > 1 else "single"
    procs = {(d["process"].get("host"), d["pid"], d["process"].get("rank")) for d in docs}
    if len(procs) == len(docs):
        return "merge"
    if len(docs) == 2:
        return "diff"
    raise ViewError(f"{len(docs)} snapshots, some of one process: give two of one process "
                    "(older first) for a diff, or add --merge")


def separate_runs(docs: Sequence[Dict[str, Any]]) -> bool:
    """Whether these snapshots, of different processes, are of separate runs
    of one command rather than processes of one job: none has a rank, all are
    of one host and one command line, none is another's parent, and each
    process began (its first event, series.start_ns) after the one before had
    written its snapshot. What `gpumemtrace view gpumemtrace.*.oom.1.json`
    matches after a program was run twice in one directory."""
    if len(docs) < 2:
        return False
    pids = {d["pid"] for d in docs}
    for d in docs:
        p = d["process"]
        if p.get("rank") is not None or p.get("world_size") is not None or p.get("ppid") in pids:
            return False
        if (p.get("host"), d["argv"]) != (docs[0]["process"].get("host"), docs[0]["argv"]):
            return False
        if (d.get("series") or {}).get("start_ns") is None:
            return False
    ordered = sorted(docs, key=lambda d: d["time_ns"])
    return all(b["series"]["start_ns"] > a["time_ns"] for a, b in zip(ordered, ordered[1:]))


def write_file(path: str, data: bytes) -> None:
    """data into path: "-" is standard output; a FIFO or a character device
    (/dev/stdout, a terminal) is written into, never replaced; another file
    that is not a regular one (a directory, a socket) is refused; a regular
    file or a new name through a temporary file and a rename (a full disk or
    a failed write leaves no half file). ViewError naming path."""
    if path == "-":
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
        return
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        mode = None
    except OSError as e:
        raise ViewError(f"{path}: cannot write: {e.strerror or e}") from None
    if mode is not None and (stat.S_ISFIFO(mode) or stat.S_ISCHR(mode)):
        _write_into(path, data)
        return
    if mode is not None and not stat.S_ISREG(mode):
        what = "a directory" if stat.S_ISDIR(mode) else "a socket" if stat.S_ISSOCK(mode) else "a block device"
        raise ViewError(f"{path}: cannot write: not a regular file ({what})")
    d = os.path.dirname(os.path.abspath(path))
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=".gpumemtrace-view.", dir=d)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644 & ~_umask())
        os.replace(tmp, path)
        tmp = None
    except OSError as e:
        raise ViewError(f"{path}: cannot write: {e.strerror or e}") from None
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass


def _write_into(path: str, data: bytes) -> None:
    """data written into the FIFO or device at path, which stays what it is
    (a FIFO nobody reads is refused, never waited on)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as e:
        why = "nobody reads it (a FIFO)" if e.errno == errno.ENXIO else (e.strerror or str(e))
        raise ViewError(f"{path}: cannot write: {why}") from None
    try:
        os.set_blocking(fd, True)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    except OSError as e:
        raise ViewError(f"{path}: cannot write: {e.strerror or e}") from None
    finally:
        os.close(fd)


def _umask() -> int:
    m = os.umask(0)
    os.umask(m)
    return m


def _color(choice: str) -> bool:
    if choice == "always":
        return True
    if choice == "never":
        return False
    return sys.stdout.isatty() and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"


def _width(arg: Optional[int]) -> int:
    if arg:
        return arg
    if sys.stdout.isatty():
        try:
            return max(40, os.get_terminal_size(sys.stdout.fileno()).columns)
        except OSError:
            pass
    return 80


# A snapshot's file name (docs/guide.md): the process, why, its number in
# the process, and the rank where one was known.
SNAPSHOT_NAME = re.compile(r"^gpumemtrace\.(\d+)\.([a-z]+)\.(\d+)(\.rank\d+)?\.json$")


def expand(paths: Sequence[str]) -> List[str]:
    """The files named, a directory replaced by the newest snapshot of each
    process in it (the highest <seq> of each <pid> and rank), in order of
    pid; a directory with none is an error naming it."""
    out: List[str] = []
    for p in paths:
        if p == "-" or not os.path.isdir(p):
            out.append(p)
            continue
        try:
            names = os.listdir(p)
        except OSError as e:
            raise ViewError(f"{p}: cannot read the directory: {e.strerror}") from None
        newest: Dict[tuple, tuple] = {}
        for name in names:
            m = SNAPSHOT_NAME.match(name)
            if m is None:
                continue
            key, seq = (int(m.group(1)), m.group(4) or ""), int(m.group(3))
            if key not in newest or seq > newest[key][0]:
                newest[key] = (seq, os.path.join(p, name))
        if not newest:
            raise ViewError(f"{p}: no snapshot in this directory (gpumemtrace.<pid>.<reason>.<seq>.json)")
        out += [newest[k][1] for k in sorted(newest)]
    return out


def run(argv: Sequence[str]) -> int:
    args = _parser().parse_args(argv)
    args.files = expand(args.files)
    if args.files.count("-") > 1:
        raise ViewError("standard input (-) given more than once")
    # A merge printed in the terminal reads no device allocation: its
    # snapshots are read lean, many of them in parallel (load.load_all).
    exports = args.html or args.perfetto or args.speedscope or args.pytorch
    lean = not exports and not args.diff and (args.merge or len(args.files) > 2)
    docs = loader.load_all(args.files, lean_docs=lean)
    mode = choose_mode(docs, args.diff, args.merge)
    if mode == "merge" and not args.merge and separate_runs(docs):
        # Runs of one command one after the other (a glob that matched an
        # earlier run's file too): the newest, unless a merge is asked for.
        newest = max(range(len(docs)), key=lambda i: docs[i]["time_ns"])
        note = (f"{PROG}: {len(docs)} snapshots of {len(docs)} separate runs of this command "
                f"(pids {', '.join(str(d['pid']) for d in sorted(docs, key=lambda d: d['time_ns']))}): the newest "
                f"shown, pid {docs[newest]['pid']} ({args.files[newest]}); --merge shows them together")
        print(_printable(note), file=sys.stderr if args.quiet else sys.stdout)
        args.files = [args.files[newest]]
        docs = loader.load_all(args.files) if lean else [docs[newest]]
        mode = "single"

    # The modules of each output are imported only when asked for.
    outputs: List[tuple] = []
    if args.html:
        def html_bytes() -> bytes:
            from . import html
            return html.report(docs, mode, args.files).encode("utf-8")
        outputs.append((args.html, html_bytes))
    if args.perfetto:
        def trace_bytes() -> bytes:
            from . import export
            return export.dumps(export.chrome_trace(docs))
        outputs.append((args.perfetto, trace_bytes))
    if args.speedscope:
        def speedscope_bytes() -> bytes:
            from . import export
            return export.dumps(export.speedscope(docs))
        outputs.append((args.speedscope, speedscope_bytes))
    if args.pytorch:
        def pytorch_bytes() -> bytes:
            from . import export
            return pickle.dumps(export.pytorch_snapshot(docs), protocol=2)
        outputs.append((args.pytorch, pytorch_bytes))

    to_stdout = [path for path, _ in outputs if path == "-"]
    if len(to_stdout) > 1:
        raise ViewError("standard output (-) given to more than one output")
    # Files asked for are the answer: the summary only on request then.
    if not args.quiet and not to_stdout and (args.summary or not outputs):
        color, width = _color(args.color), _width(args.width)
        if mode == "single":
            from . import summary
            text = summary.summary(docs[0], width=width, color=color, top=args.top, frames=args.frames,
                                   level=args.level)
        elif mode == "diff":
            from . import diff_view
            text = diff_view.diff_text(docs[0], docs[1], width=width, color=color, top=args.top, level=args.level)
        else:
            from . import merge_view
            text = merge_view.merge_text(docs, width=width, color=color, top=args.top, level=args.level)
        # A locale that cannot encode "←" or "—" gets escapes, not a traceback.
        if hasattr(sys.stdout, "reconfigure"):
            sys.stdout.reconfigure(errors="backslashreplace")
        sys.stdout.write(text)
        sys.stdout.flush()
    for path, make in outputs:
        write_file(path, make())
        print(f"{PROG}: wrote {'standard output' if path == '-' else _printable(path)}", file=sys.stderr)
    return 0


def _printable(s: str) -> str:
    """s with control and bidi characters escaped: one line that cannot drive
    the terminal (a key or file name in a message comes from the input)."""
    from .text import clean
    return clean(s)


def main(argv: Sequence[str]) -> int:
    try:
        return run(argv)
    except ViewError as e:
        print(f"{PROG}: {_printable(str(e))}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        # `gpumemtrace view … | head`: stop quietly, as other tools do.
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return 0
    except KeyboardInterrupt:
        return 130

