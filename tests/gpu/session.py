#!/usr/bin/env python3
"""A lent GPU's session in one command (docs/gpu-suite.md, "A lent GPU in one
call"): what the open work needs of a real GPU, most wanted first, inside a
budget of seconds, every phase's output kept in the results folder.

  1. torch     the suite's PyTorch tests of the tensor level (OUT/run --only
               torch-loss-kept ... --keep)
  2. suite     every other test of the suite (OUT/run --only ...)
  3. overhead  the overhead runs (overhead.py), shortened
  4. golden    the replay's golden traces (whatif_golden.py record, then
               check): the fixtures in RESULTS/golden/*.json.gz
  5. history   the cost of PyTorch's history (history_cost.py)

Each phase runs with what is left of the budget as its limit; one that
reaches it is stopped (its process group killed) and said "cut off", and the
phases after it "not started". Nothing is retried, nothing is claimed that
did not run: RESULTS/session.txt has a line per phase (done with its exit
status and last line, cut off, or not started) and each phase's output is in
RESULTS/PHASE.log.

--archive FILE: the results folder, once every phase is over, as one gzip
tar file (the device tool brings back a few files, not a folder's
hundreds); where it would pass 15 MiB, PyTorch's own snapshots (*.pickle)
are left out of it, and the session says so.

--sim runs the same on the simulated GPU the bundle carries (its own proof,
not a GPU result): the golden phase records the PyTorch double, which the
bundle does not carry, so it runs only where --double names its
site-packages (PATH[:PATH]), else it is skipped.

Usage: session.py --bundle OUT --results DIR [--archive FILE] [--python PY]
                  [--budget SECONDS] [--sim [--double PYTHONPATH]] [--only PHASE]...
Exit status 0 when every phase that ran ended well, 1 otherwise, 2 for a
usage error.
"""
from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tarfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gpu_suite  # noqa: E402
from bundle_run import Parser, UsageError  # noqa: E402 - one-line usage errors, as OUT/run's

PHASES = ["torch", "suite", "overhead", "golden", "history"]
TORCH_TESTS = ["torch-loss-kept", "torch-train-oom", "torch-fragment", "torch-fragment-expandable", "torch-fraction"]
# Seconds kept back from the budget for writing the session's own summary.
MARGIN = 5
# The most an archive may hold with PyTorch's snapshots in it.
ARCHIVE_MAX = 15 << 20
# Exit status of a phase whose subject cannot run here (the suite's SKIP).
SKIPPED = 77


def parse(argv: list[str]) -> argparse.Namespace:
    ap = Parser(prog="session.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--bundle", required=True, help="the bundle (scripts/gpu-bundle OUT)")
    ap.add_argument("--results", required=True, help="where every phase's output goes (made if missing)")
    ap.add_argument("--archive", metavar="FILE", help="the results folder as one .tar.gz at the end")
    ap.add_argument("--python", default="python3", help="an interpreter that imports torch")
    ap.add_argument("--budget", type=int, default=540, help="seconds for all the phases (default 540)")
    ap.add_argument("--sim", action="store_true", help="on the bundle's simulated GPU")
    ap.add_argument("--double", metavar="PYTHONPATH", help="with --sim: the PyTorch double's site-packages")
    ap.add_argument("--only", action="append", choices=PHASES, help="this phase only (repeatable)")
    args = ap.parse_args(argv)
    if args.budget <= MARGIN:
        ap.error(f"--budget must be more than {MARGIN} seconds")
    if args.double and not args.sim:
        ap.error("--double goes with --sim (a real GPU runs PyTorch itself)")
    if args.archive:
        args.archive = os.path.abspath(args.archive)
        results = os.path.abspath(args.results)
        if args.archive == results or args.archive.startswith(results + os.sep):
            ap.error(f"--archive {args.archive}: inside the results folder it archives")
    args.bundle = os.path.abspath(args.bundle)
    if not os.path.isfile(os.path.join(args.bundle, "run")):
        ap.error(f"{args.bundle}: not a bundle (no run in it; make one with scripts/gpu-bundle)")
    return args


def commands(args: argparse.Namespace, results: str) -> dict[str, list[list[str]]]:
    """Each phase's commands, run one after the other."""
    out, py = args.bundle, args.python
    launcher = os.path.join(out, "bin", "gpumemtrace")
    golden_py = os.path.join(out, "tests", "gpu", "whatif_golden.py")
    fixtures = os.path.join(results, "golden")
    mode = ["--sim"] if args.sim else []
    others = [c.name for c in gpu_suite.CASES if c.name not in TORCH_TESTS]
    record = [py, golden_py, "record", "--launcher", launcher, "--out", fixtures]
    return {
        "golden": [record + (["--double"] if args.sim else []),
                   [py, golden_py, "check", "--launcher", launcher, fixtures]],
        "torch": [[os.path.join(out, "run"), *mode, "--python", py, "--keep", "--results",
                   os.path.join(results, "suite-torch")] + [x for t in TORCH_TESTS for x in ("--only", t)]],
        "history": [[py, os.path.join(out, "tests", "gpu", "history_cost.py"), "--mode", "sim" if args.sim else "gpu",
                     "--bundle", out, "--python", py, "--reps", "3", "--steps", "100"]],
        "suite": [[os.path.join(out, "run"), *mode, "--python", py, "--results", os.path.join(results, "suite")]
                  + [x for t in others + ["torch-memviz"] for x in ("--only", t)]],
        "overhead": [[py, os.path.join(out, "tests", "gpu", "overhead.py"), "--mode", "sim" if args.sim else "gpu",
                      "--bundle", out, "--python", py, "--pairs", "5000", "--steps", "50", "--reps", "3"]],
    }


def phase_env(args: argparse.Namespace, name: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    if name == "golden" and args.sim:
        # The double on the bundle's simulated driver.
        env["PYTHONPATH"] = args.double or ""
        env["LD_LIBRARY_PATH"] = os.path.join(args.bundle, "sim", "lib")
        env.setdefault("GMTSIM_MEMORY", "1G")
    return env


def run_one(cmd: list[str], env: dict[str, str], log, limit: float) -> tuple[int | None, float]:
    """One command, its output appended to log: its exit status (None when
    it reached limit and was stopped) and the seconds it took."""
    began = time.monotonic()
    log.write(f"$ {' '.join(cmd)}\n")
    log.flush()
    p = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                         start_new_session=True)
    try:
        rc: int | None = p.wait(timeout=max(limit, 0.1))
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        rc = None
    return rc, time.monotonic() - began


def last_line(path: str) -> str:
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = [ln.strip() for ln in f if ln.strip() and not ln.startswith("$ ")]
    return lines[-1][:200] if lines else "(no output)"


def skipped(path: str) -> bool:
    """Whether the output says its subject could not run here: a SKIP
    line of its own, or a suite run whose every test was skipped."""
    line = last_line(path)
    return re.match(r"(?i)(\S+: )?skip\b", line) is not None or \
        re.fullmatch(r"0 passed, 0 failed, \d+ skipped", line) is not None


def archive(results: str, path: str) -> str:
    """The results folder as one gzip tar file at path; what was left out,
    if anything, said in the returned line."""
    def pack(keep_pickles: bool) -> None:
        with tarfile.open(path + ".part", "w:gz") as tar:
            tar.add(results, arcname=os.path.basename(results),
                    filter=lambda t: t if keep_pickles or not t.name.endswith(".pickle") else None)
        os.replace(path + ".part", path)

    pack(True)
    left = ""
    if os.path.getsize(path) > ARCHIVE_MAX:
        pack(False)
        left = ", PyTorch's snapshots (*.pickle) left out (over 15 MiB with them)"
    return f"archive: {path}, {os.path.getsize(path):,} bytes{left}"


def session(args: argparse.Namespace) -> int:
    results = os.path.abspath(args.results)
    os.makedirs(results, exist_ok=True)
    deadline = time.monotonic() + args.budget - MARGIN
    plan = commands(args, results)
    lines, bad = [], 0
    for name in PHASES:
        if args.only and name not in args.only:
            continue
        if name == "golden" and args.sim and not args.double:
            lines.append(f"{name}: skipped (--sim without --double: the bundle carries no PyTorch double)")
            print(lines[-1], flush=True)
            continue
        log_path = os.path.join(results, f"{name}.log")
        status = ""
        spent = 0.0
        with open(log_path, "w", encoding="utf-8") as log:
            for k, cmd in enumerate(plan[name]):
                left = deadline - time.monotonic()
                if left <= 0:
                    status = (f"cut off after {spent:.0f} s, before its command {k + 1} of {len(plan[name])} "
                              "(the budget)" if k else "not started: the budget was spent")
                    break
                rc, took = run_one(cmd, phase_env(args, name), log, left)
                spent += took
                if rc is None:
                    status = f"cut off after {spent:.0f} s (the budget)"
                    break
                if rc == SKIPPED or skipped(log_path):
                    status = f"skipped in {spent:.0f} s"
                    break
                if rc != 0:
                    status = f"exit {rc} in {spent:.0f} s"
                    break
            else:
                status = f"done in {spent:.0f} s"
        if not status.startswith(("done", "skipped")):
            bad += 1
        if status.startswith("not started"):
            os.unlink(log_path)
            lines.append(f"{name}: {status}")
        else:
            lines.append(f"{name}: {status}: {last_line(log_path)}")
        print(lines[-1], flush=True)
    text = "\n".join(lines) + f"\nsession: {args.budget} s budget, {'sim' if args.sim else 'gpu'}, results in {results}\n"
    with open(os.path.join(results, "session.txt"), "w", encoding="utf-8") as f:
        f.write(text)
    print(text.splitlines()[-1])
    if args.archive:
        try:
            print(archive(results, args.archive), flush=True)
        except (OSError, tarfile.TarError) as e:
            print(f"archive: {args.archive}: not written: {e}", flush=True)
            bad += 1
    return 1 if bad else 0


def main(argv: list[str]) -> int:
    try:
        args = parse(argv)
    except UsageError as e:
        print(f"session.py: {e} (--help lists the options)", file=sys.stderr)
        return 2
    try:
        return session(args)
    except OSError as e:
        print(f"session.py: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
