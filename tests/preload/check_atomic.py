#!/usr/bin/env python3
"""Snapshot atomicity: the final name of a snapshot never holds a partial
document. snap_writer keeps thousands of allocations live (snapshots of a few
megabytes) and writes api snapshots one after another while a reader polls
the directory and parses every file under a final name
(gpumemtrace.<pid>.<reason>.<seq>.json) as soon as it appears; the writer is
killed (SIGKILL) at a random moment of its run, ROUNDS times. Every file seen
under a final name, during the run and after the kill, must be one whole
JSON document. A writer that wrote straight to the final name fails this.
Then the sweep: the next writer into a directory removes a dead writer's
temporary file once it is old (planted with its time set an hour back),
and leaves a recent one, one of a live pid and a symlink.

Usage: check_atomic.py PROGRAM --lib LIBGPUMEMTRACE [--rounds N] [--seed S]
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

FINAL = re.compile(r"^gpumemtrace\.\d+\.[a-z]+\.\d+(\.rank\d+)?\.json$")


def parse_problem(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as f:
            json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        return f"{os.path.basename(path)} ({os.path.getsize(path) if os.path.exists(path) else '?'} bytes): {e}"
    return None


def traced_env(a: argparse.Namespace, snapdir: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GMTSIM_", "GPUMEMTRACE_"))}
    preload = [a.lib]
    if os.environ.get("GMT_TEST_ASAN_RUNTIME"):
        preload.insert(0, os.environ["GMT_TEST_ASAN_RUNTIME"])
        env["ASAN_OPTIONS"] = env.get("ASAN_OPTIONS", "") + ":detect_leaks=0"
    env.update(LD_PRELOAD=" ".join(preload), GPUMEMTRACE_DIR=snapdir, GPUMEMTRACE_SNAPSHOT_ON="none",
               GPUMEMTRACE_STACK_DEPTH="8", GMTSIM_MEMORY="4G")
    return env


def sweep_problems(a: argparse.Namespace, work: str) -> list[str]:
    """A killed writer's temporary file is removed by the next process that
    writes into the directory, once it is old and its pid is gone; a recent
    one, one of a live pid, and a symlink stay."""
    snapdir = os.path.join(work, "sweep")
    os.mkdir(snapdir)
    dead = subprocess.Popen(["true"])
    dead.wait()
    old = time.time() - 3600

    def plant(pid: int, when: float, tag: str, link: bool = False) -> str:
        name = f".gpumemtrace.{pid}.api.1.json.{tag}.tmp"
        path = os.path.join(snapdir, name)
        if link:
            os.symlink("/nonexistent", path)
            os.utime(path, (when, when), follow_symlinks=False)
        else:
            with open(path, "w", encoding="utf-8") as f:
                f.write('{"partial": ')
            os.utime(path, (when, when))
        return name
    gone = plant(dead.pid, old, "0000dead")
    stay = [plant(dead.pid, time.time(), "00000new"), plant(os.getpid(), old, "000alive"),
            plant(dead.pid, old, "000alink", link=True)]
    r = subprocess.run([a.program, "10", "1"], env=traced_env(a, snapdir), stdin=subprocess.DEVNULL,
                       capture_output=True, text=True, timeout=60)
    names = set(os.listdir(snapdir))
    problems = [] if r.returncode == 0 else [f"sweep: the writer exits {r.returncode}: {r.stderr[-300:]!r}"]
    if gone in names:
        problems.append(f"sweep: the dead writer's old temporary file {gone} is still there")
    problems += [f"sweep: {name} was removed (recent, of a live pid, or a symlink)" for name in stay
                 if name not in names]
    if not problems:
        print("sweep: the dead writer's old temporary file removed; the others stay")
    return problems


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("program")
    ap.add_argument("--lib", required=True)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--seed", type=int, default=int(time.time()))
    a = ap.parse_args()
    rng = random.Random(a.seed)
    print(f"seed {a.seed}")
    problems: list[str] = []
    seen: set[str] = set()
    work = tempfile.mkdtemp(prefix="gmt-atomic-")
    try:
        for rnd in range(a.rounds):
            snapdir = os.path.join(work, f"round{rnd}")
            os.mkdir(snapdir)
            env = traced_env(a, snapdir)
            stop = threading.Event()

            def poll() -> None:
                while not stop.is_set():
                    for name in os.listdir(snapdir):
                        if FINAL.match(name):
                            path = os.path.join(snapdir, name)
                            if path not in seen:
                                bad = parse_problem(path)
                                seen.add(path)
                                if bad:
                                    problems.append(f"round {rnd}, while writing: {bad}")
            reader = threading.Thread(target=poll)
            reader.start()
            proc = subprocess.Popen([a.program, "20000", "0"], env=env, stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            assert proc.stdout is not None
            first = proc.stdout.readline()  # the first snapshot is whole: now kill at a random moment
            time.sleep(rng.uniform(0.0, 0.6))
            proc.send_signal(signal.SIGKILL)
            rest, err = proc.communicate(timeout=60)
            stop.set()
            reader.join()
            if not first.startswith("DUMPED"):
                problems.append(f"round {rnd}: the writer wrote no snapshot: {err[-300:]!r}")
            finals = [p for p in glob.glob(os.path.join(snapdir, "*")) if FINAL.match(os.path.basename(p))]
            for path in finals:
                bad = parse_problem(path)
                if bad:
                    problems.append(f"round {rnd}, after the kill: {bad}")
            dumped = 1 + sum(1 for line in rest.splitlines() if line.startswith("DUMPED"))
            print(f"round {rnd}: {dumped} snapshots reported, {len(finals)} under final names, all whole"
                  if not problems else f"round {rnd}: {len(finals)} under final names")
        if not seen:
            problems.append("the reader saw no snapshot: the test proved nothing")
        problems += sweep_problems(a, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for p in problems[:10]:
        print(f"FAIL {p}")
    if not problems:
        print(f"ok: {len(seen)} snapshots read under their final names, every one whole")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
