#!/usr/bin/env python3
"""Out-of-memory failures on three threads at once (threads_oom.c): every
failure is accounted for, each with the thread it came from. They are one
episode or several (tracer/episode.c: failures from one call of the program
with nothing allocated between are one need of memory); whichever, each
failure the program saw is in an oom snapshot — as its failed_request or in
its episode's list — naming its thread's id and name, and each snapshot's
failed_request names the thread of that failure. Every snapshot passes the
schema.

Usage: check_threads_oom.py --lib LIBGPUMEMTRACE PROGRAM
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

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "schema"))
import schema_check  # noqa: E402  (tests/schema: every snapshot against docs/snapshot.schema.json)

import preload_env  # noqa: E402  (beside this file)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("program")
    a = ap.parse_args()
    problems: list[str] = []
    with tempfile.TemporaryDirectory(prefix="gmt-threads-oom-") as d:
        env = preload_env.env_of(os.path.abspath(a.lib), GMTSIM_MEMORY="1G", GPUMEMTRACE_DIR=d, GPUMEMTRACE_LEAK_SCAN="0")
        r = subprocess.run([os.path.abspath(a.program)], env=env, cwd=d, capture_output=True, text=True, timeout=120, check=False)
        failed = {int(t): n for t, n in re.findall(r"^FAILED (\d+) (\S+)$", r.stdout, re.M)}
        if r.returncode != 0 or len(failed) != 3:
            problems.append(f"the program: status {r.returncode}, {len(failed)} failures of 3:\n{r.stdout}{r.stderr}")
        paths = sorted(glob.glob(os.path.join(d, "gpumemtrace.*.oom.*.json")))
        docs = [json.load(open(p, encoding="utf-8")) for p in paths]
        seen: dict[int, dict] = {}
        for path, doc in zip(paths, docs):
            fr = doc.get("failed_request", {})
            th = fr.get("thread")
            if th is None or th.get("tid") not in failed or th.get("name") != failed[th.get("tid")]:
                problems.append(f"{os.path.basename(path)}: failed_request.thread {th} is not a failing thread "
                                f"{failed}")
            ep = doc.get("episode", {})
            listed = ep.get("listed", [])
            if ep.get("failures") != len(listed):
                problems.append(f"{os.path.basename(path)}: {ep.get('failures')} failures, {len(listed)} listed")
            for f in listed + [dict(fr, failure=fr.get("failure"))]:
                t = f.get("thread") or {}
                seen.setdefault(f.get("failure"), t)
                if seen[f.get("failure")] != t:
                    problems.append(f"failure {f.get('failure')}: two threads named {seen[f.get('failure')]}, {t}")
        if sorted(seen) != [1, 2, 3]:
            problems.append(f"failures accounted for: {sorted(seen)}, expected [1, 2, 3] "
                            f"({len(paths)} files: {[os.path.basename(p) for p in paths]})")
        named = sorted((t.get("tid"), t.get("name")) for t in seen.values())
        if named != sorted(failed.items()):
            problems.append(f"threads named {named}, the program's {sorted(failed.items())}")
        problems += schema_check.validate(paths)
    return preload_env.finish(problems, f"3 threads' failures, each with its thread, in {len(paths)} files")


if __name__ == "__main__":
    sys.exit(main())
