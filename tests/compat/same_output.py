#!/usr/bin/env python3
"""What the tracer writes, compared between two builds of libgpumemtrace.so:
the snapshots and the stderr reports of the simulator's test programs must be
the same, so that a change meant to keep behaviour (a restructuring) changed
nothing by accident.

Each case runs the same program, on the same simulated driver, with the
reference library and with the library under test preloaded, under
`setarch -R` (no address randomisation). What may differ between two runs of
one library is found by running the reference library three times: a key or
line that differs there is not compared, nor are times, the series and
growth windows (buckets of time), the counters of the tracer's own waits,
and what the leak scan read and where it found a reference (the process's
memory map; the class is compared). Addresses are compared by rank among
those of their kind of memory, not by value (the two libraries differ in
size, so later mappings move): each distinct address of a document becomes
"@KIND.N", N its place in ascending order (class Numbering).
The live allocations are compared in the order of their kind, then address
(the order of two kinds' addresses is the mappings'). Keys the library under
test adds (--new-key PATH, e.g. "stacks[*].site": the key and everything under
it) are ignored, and so are stderr lines that a change under test rewrites on
purpose (--changed-line REGEX: a line matching it in both runs) or moves
(--moved-line REGEX: lines matching it are left out of both runs' stderr
before the rest is compared line by line).

The reference library is a file (--ref LIB), or built here from a commit of
this repository (--ref-commit COMMIT --ref-build DIR: `git archive` of the
commit into DIR, then meson and ninja for the library alone; kept for the
next run). Without git, or in a clone that lacks the commit (a shallow one),
the test is skipped (exit status 77), saying why.

Usage: same_output.py (--ref LIB | --ref-commit COMMIT --ref-build DIR)
                      --lib LIB --build BUILD_DIR [--new-key PATH]...
                      [--changed-line REGEX]... [--moved-line REGEX]... [--skip-case NAME]...
                      [--case NAME]... [--keep DIR]
Exit status 0 when every case matches, 1 when one differs (each difference
printed with its path), 2 on a usage or set-up error, 77 when skipped.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from typing import Any

# name: (program under BUILD_DIR, arguments, GMTSIM_* settings, GPUMEMTRACE_* settings)
CASES: dict[str, tuple[str, list[str], dict[str, str], dict[str, str]]] = {
    "oom_exhaust": ("tests/programs/oom_exhaust", [], {}, {}),
    "oom_fragment": ("tests/programs/oom_fragment", [], {}, {}),
    "oom_pool": ("tests/programs/oom_pool", [], {}, {}),
    "oom_growth": ("tests/programs/oom_growth", [], {}, {}),
    "oom_elsewhere": ("tests/programs/oom_elsewhere", [], {}, {}),
    "oom_retry": ("tests/programs/oom_retry", [], {}, {}),
    "oom_never_fits": ("tests/programs/oom_never_fits", [], {}, {}),
    "exit_no_free": ("tests/programs/exit_no_free", [], {}, {}),
    "vmm_expandable": ("tests/programs/vmm_expandable", [], {}, {}),
    "pools": ("tests/programs/pools", [], {}, {}),
    "driver_link": ("tests/programs/driver_link", [], {}, {}),
    "api_calls": ("tests/programs/api_calls", [], {}, {}),
    "leak_classes": ("tests/preload/leak_classes", [], {},
                     {"GPUMEMTRACE_LEAK_CHECK": "1", "GPUMEMTRACE_LEAK_SCAN": "1"}),
    "train_loop": ("demo/train_loop", [], {}, {}),
}
SIM_ENV_FROM = "tests/programs/{}.expect.json"  # a program's GMTSIM_* settings
# Every case writes its out-of-memory and exit snapshots. The leak scan reads
# the process's memory, where stale copies of pointers lie as the memory map
# happens to fall: off, except for leak_classes, whose references are its own.
TRACER_ENV = {"GPUMEMTRACE_SNAPSHOT_ON": "oom,exit", "GPUMEMTRACE_LEAK_SCAN": "0"}
# Keys that depend on timing, scheduling or the process's memory map, never
# compared: times, the series and a site's windows (buckets of time), the
# counters of the tracer's own waits, what the leak scan read.
TIMING = re.compile(r"(^|\.)(time_ns|[a-z_]*_ns|series|elapsed[a-z_]*|seconds|[a-z_]*windows)($|[.\[])|"
                    r"^leaks\.scan\.(mappings|bytes|excluded_bytes|walked_bytes)$|referenced_from\.(region|what)$|"
                    r"^stats\.(ring_full|producer_drains|consumer_events|consumer_wakeups|"
                    r"gap_waits|gaps_skipped|late_events)$")
REFERENCE_RUNS = 3
HEX = re.compile(r"0x[0-9a-fA-F]+")
# gmt__human_duration's forms (src/util/parse.c): "12 ns", "3.5 µs", "258 ms",
# "1.25 s", "2 min 5 s", "1 h 3 min".
DURATION = re.compile(r"\b\d+(?:\.\d+)?(?:e[+-]?\d+)?(?: h \d+ min| min \d+ s| (?:ns|µs|us|ms|s))\b")


def sim_env(source: str, name: str) -> dict[str, str]:
    path = os.path.join(source, SIM_ENV_FROM.format(name))
    if not os.path.exists(path):
        return {}
    with open(path, encoding="utf-8") as f:
        return json.load(f).get("env", {})


def run(build: str, lib: str, case: str, work: str, source: str) -> dict[str, Any]:
    """One run of a case: its exit status, stderr and snapshots (by reason,
    in the order written)."""
    prog, args, gmtsim, gmt = CASES[case]
    os.makedirs(work)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("GMTSIM_", "GPUMEMTRACE_", "LD_PRELOAD"))}
    env.update(TRACER_ENV)
    env.update(sim_env(source, case))
    env.update(gmtsim)
    env.update(gmt)
    env.update({"LD_LIBRARY_PATH": os.path.join(build, "sim", "driver"), "LD_PRELOAD": lib,
                "GPUMEMTRACE_DIR": work, "GMTSIM_LEDGER_DIR": work + "-ledger"})
    os.makedirs(work + "-ledger")
    with subprocess.Popen(["setarch", "-R", os.path.join(build, prog)] + args, env=env,
                          stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True) as p:
        _, stderr = p.communicate(timeout=300)
    snaps = []
    for name in sorted(os.listdir(work)):
        if name.endswith(".json"):
            with open(os.path.join(work, name), encoding="utf-8") as f:
                doc = json.load(f)
            # gpumemtrace.<pid>.<reason>.<seq>.json: the reason and the order
            snaps.append((name.split(".")[2], doc))
    snaps.sort(key=lambda s: s[1].get("seq", 0))
    # setarch executes the program: its process id is the program's.
    text = re.sub(rf"\b{p.pid}\b", "PID", stderr.replace(work, "DIR"))
    return {"status": p.returncode, "stderr": text, "snapshots": snaps}


class Numbering:
    """Addresses by rank within their kind of memory: each distinct address
    of one document (or of one run's stderr) becomes "@KIND.N", N its place in
    ascending order among the addresses of that kind ("device", "host", ...:
    what an allocation or history event at it says; "stream" for a stream's
    handle; "x" for the rest — code,
    modules). Regions of different kinds come from different mappings, whose
    order the libraries' sizes may change."""

    def __init__(self, text: str, kinds: dict[int, str] | None = None) -> None:
        kinds = kinds or {}
        groups: dict[str, set[int]] = {}
        for h in HEX.findall(text):
            v = int(h, 16)
            groups.setdefault(kinds.get(v, "x"), set()).add(v)
        self.ids = {v: f"@{k}.{i}" for k, vs in groups.items() for i, v in enumerate(sorted(vs))}

    def sub(self, s: str) -> str:
        return HEX.sub(lambda m: self.ids.get(int(m.group(0), 16), m.group(0)), s)


def kinds_of(v: Any, out: dict[int, str]) -> dict[int, str]:
    """address -> kind, from every object with both; a stream's handle (a
    pointer of the driver's) is of kind "stream"."""
    if isinstance(v, dict):
        a, k = v.get("address"), v.get("kind")
        if isinstance(a, str) and isinstance(k, str) and HEX.fullmatch(a):
            out[int(a, 16)] = k
        st = v.get("stream")
        if isinstance(st, str) and HEX.fullmatch(st):
            out[int(st, 16)] = "stream"
        for x in v.values():
            kinds_of(x, out)
    elif isinstance(v, list):
        for x in v:
            kinds_of(x, out)
    return out


def flatten(v: Any, path: str, out: dict[str, Any]) -> None:
    """path -> leaf value; lists indexed."""
    if isinstance(v, dict):
        if not v:
            out[path] = {}
        for k, x in v.items():
            flatten(x, f"{path}.{k}" if path else k, out)
    elif isinstance(v, list):
        if not v:
            out[path] = []
        for i, x in enumerate(v):
            flatten(x, f"{path}[{i}]", out)
    else:
        out[path] = v


def shape(path: str) -> str:
    """A path with its list indices made "*": the key it names."""
    return re.sub(r"\[\d+\]", "[*]", path)


def fixed_key(key: str, new_keys: list[str]) -> bool:
    """Whether a key (its shape, without the snapshot's place) is never
    compared: timing and memory-map dependent, or new."""
    return bool(TIMING.search(key)) or any(key == p or key.startswith((p + ".", p + "["))
                                           for p in new_keys)


def leaves(r: dict[str, Any], new_keys: list[str], moved: list[re.Pattern[str]]) -> dict[str, Any]:
    """The run as path -> value, the keys never compared left out (and the
    stderr lines `moved` matches), and the addresses numbered by rank over
    what is left of each document."""
    out: dict[str, Any] = {"status": r["status"]}
    lines = [line for line in Numbering(r["stderr"]).sub(r["stderr"]).splitlines()
             if not any(x.search(line) for x in moved)]
    # The process id in snapshot file names; the durations a report gives
    # (an episode's "3 failures over 258 ms"), which are the clock's, not
    # the tracer's: a busy machine stretches them.
    for i, line in enumerate(lines):
        line = re.sub(r"gpumemtrace\.\d+\.", "gpumemtrace.PID.", line)
        out[f"stderr[{i}]"] = DURATION.sub("DURATION", line)
    for i, (reason, doc) in enumerate(r["snapshots"]):
        if isinstance(doc.get("allocations"), list):
            doc = dict(doc, allocations=sorted(doc["allocations"], key=lambda a: (
                str(a.get("kind")), int(a["address"], 16) if HEX.fullmatch(str(a.get("address"))) else 0)))
        flat: dict[str, Any] = {}
        flatten(doc, "", flat)
        kept = {k: v for k, v in flat.items() if not fixed_key(shape(k), new_keys)}
        n = Numbering(" ".join(v for v in kept.values() if isinstance(v, str)), kinds_of(doc, {}))
        for k, v in kept.items():
            out[f"snapshot[{i}:{reason}].{k}"] = n.sub(v) if isinstance(v, str) else v
    return out


def compare(refs: list[dict[str, Any]], new: dict[str, Any], new_keys: list[str],
            changed: list[str] | None = None, moved: list[str] | None = None) -> list[str]:
    gone = [re.compile(x) for x in moved or []]
    ref = [leaves(r, new_keys, gone) for r in refs]
    a, c = ref[0], leaves(new, new_keys, gone)
    unstable = {k for b in ref[1:] for k in a.keys() | b.keys() if a.get(k, KeyError) != b.get(k, KeyError)}
    unstable_shapes = {shape(k) for k in unstable}
    rewritten = [re.compile(x) for x in changed or []]

    def ignored(k: str) -> bool:
        if k.startswith("stderr[") and any(x.search(str(a.get(k, ""))) and x.search(str(c.get(k, "")))
                                           for x in rewritten):
            return True
        return k in unstable or shape(k) in unstable_shapes

    problems = []
    for k in sorted(a.keys() | c.keys()):
        if ignored(k):
            continue
        if k not in c:
            problems.append(f"{k}: {a[k]!r} in the reference, missing now")
        elif k not in a:
            problems.append(f"{k}: new, {c[k]!r}")
        elif a[k] != c[k]:
            problems.append(f"{k}: {a[k]!r} in the reference, {c[k]!r} now")
    return problems


def build_reference(source: str, commit: str, where: str) -> str | int:
    """The library of `commit`, built in `where` (again when `where` holds
    another commit's); or an exit status."""
    lib = os.path.join(where, "build", "src", "libgpumemtrace.so")
    stamp = os.path.join(where, "commit")
    try:
        with open(stamp, encoding="utf-8") as f:
            built = f.read().strip()
    except OSError:
        built = ""
    if os.path.isfile(lib) and built == commit:
        return lib
    if shutil.which("git") is None:
        print("same_output.py: skipped: git is not installed, so the reference cannot be built")
        return 77
    ok = subprocess.run(["git", "-C", source, "cat-file", "-e", commit + "^{commit}"],
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0
    if not ok:
        print(f"same_output.py: skipped: this clone lacks the reference commit {commit}")
        return 77
    shutil.rmtree(where, ignore_errors=True)
    tree = os.path.join(where, "tree")
    os.makedirs(tree)
    steps = [
        f"git -C '{source}' archive '{commit}' | tar -x -C '{tree}'",
        f"meson setup '{os.path.join(where, 'build')}' '{tree}' >/dev/null",
        f"ninja -C '{os.path.join(where, 'build')}' src/libgpumemtrace.so >/dev/null",
    ]
    for step in steps:
        r = subprocess.run(["bash", "-o", "pipefail", "-c", step], stdin=subprocess.DEVNULL,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if r.returncode != 0:
            print(f"same_output.py: building the reference {commit} failed at: {step}\n{r.stdout[-3000:]}",
                  file=sys.stderr)
            return 2
    with open(stamp, "w", encoding="utf-8") as f:
        f.write(commit + "\n")
    return lib


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ref = ap.add_mutually_exclusive_group(required=True)
    ref.add_argument("--ref", help="the reference libgpumemtrace.so")
    ref.add_argument("--ref-commit", help="build the reference from this commit")
    ap.add_argument("--ref-build", help="where --ref-commit is built (kept)")
    ap.add_argument("--lib", required=True, help="the libgpumemtrace.so under test")
    ap.add_argument("--build", required=True, help="the build directory of the programs")
    ap.add_argument("--source", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    ap.add_argument("--new-key", action="append", default=[], help="a key path the new library adds")
    ap.add_argument("--changed-line", action="append", default=[],
                    help="a stderr line the change under test rewrites on purpose (regex)")
    ap.add_argument("--case", action="append", choices=sorted(CASES), help="only these cases")
    ap.add_argument("--moved-line", action="append", default=[],
                    help="stderr lines a change under test moves (left out of both runs)")
    ap.add_argument("--skip-case", action="append", default=[], choices=sorted(CASES),
                    help="not this case (a program that needs what the reference lacks)")
    ap.add_argument("--keep", help="keep every run's files in this directory")
    a = ap.parse_args()
    if a.ref_commit:
        if not a.ref_build:
            ap.error("--ref-commit needs --ref-build")
        got = build_reference(a.source, a.ref_commit, a.ref_build)
        if isinstance(got, int):
            return got
        a.ref = got
    for lib in (a.ref, a.lib):
        if not os.path.isfile(lib):
            print(f"same_output.py: no library at {lib}", file=sys.stderr)
            return 2
    if shutil.which("setarch") is None:
        print("same_output.py: setarch (util-linux) is not installed", file=sys.stderr)
        return 2
    top = a.keep or tempfile.mkdtemp(prefix="gmt-same-")
    failed = 0
    try:
        for case in [c for c in a.case or sorted(CASES) if c not in a.skip_case]:
            runs = [run(a.build, a.ref, case, os.path.join(top, f"{case}-ref{i}"), a.source)
                    for i in range(REFERENCE_RUNS)]
            new = run(a.build, a.lib, case, os.path.join(top, f"{case}-new"), a.source)
            problems = compare(runs, new, a.new_key, a.changed_line, a.moved_line)
            nsnap = len(runs[0]["snapshots"])
            if problems:
                failed += 1
                print(f"DIFFERS {case}: {len(problems)} differences")
                for p in problems[:40]:
                    print(f"  {p}")
            else:
                print(f"same {case}: exit status {runs[0]['status']}, {nsnap} snapshots, "
                      f"{len(runs[0]['stderr'].splitlines())} stderr lines")
    finally:
        if not a.keep:
            shutil.rmtree(top, ignore_errors=True)
    ran = [c for c in a.case or CASES if c not in a.skip_case]
    print(f"{len(ran) - failed} cases the same, {failed} differ")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
