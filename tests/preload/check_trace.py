#!/usr/bin/env python3
"""Runs one test program of tests/programs under LD_PRELOAD=libgpumemtrace.so and
compares the tracer's snapshots with the simulator's ledgers written at the same
moments (ground truth, docs/simulator.md):

- for every process, its exit snapshot holds exactly the exit ledger's live set
  (address, size, kind, device), and its totals of allocations and frees;
- for every out-of-memory episode, its oom snapshot holds exactly the live set
  of the ledger of the failure it names (failed_request.failure: the
  episode's last written one), and the failed request (api, size, device);
  every failure of the run is in exactly one episode (the episodes' failure
  counts add up to the ledgers'), each failure an episode lists has the
  request of its ledger, and the bytes and allocations it says were freed
  since the failure before are those that left the ledger's live set
  between the two (on the episode's device), all of them summed in
  episode.freed;
- a ledger the program wrote with gmtsim_ledger_write (reason "api") right
  after gmt_dump (or once its signal snapshot exists) holds exactly the live
  set of the api (or signal) snapshot; one it wrote at its peak under the name
  ledger.PID.peak.json holds exactly the live set of the last peak snapshot,
  whose live_bytes and peak_bytes are that set's bytes;
- VMM reservations and mappings match;
- every snapshot the run wrote is valid against docs/snapshot.schema.json
  (tests/schema/schema_check.py says which interpreter checks it);
- the program behaves as without the tracer: its exit code is the one its
  expectation file gives (the program checks every CUDA result itself);
- an allocation the program prints as "RELEASED <address>" was freed after the
  driver's teardown (CUDA_ERROR_DEINITIALIZED): the ledger, written at the
  teardown, lists it, and the exit snapshot must count it freed instead.

Usage: check_trace.py PROGRAM EXPECT.json --lib LIBGPUMEMTRACE [--python PY]
         [--compare-untraced] [--env VAR=VALUE]... [--stderr-has REGEX]...
         [--no-ledger] [--frame-has FILE:LINE]... [--python-stack SIZE=CHAIN]...
         [--site SIZE=LABEL]...
         [--python-chain SIZE=CHAIN]... [--output-has REGEX]...
         [--stack-has SIZE=FUNCTION]... [--stack-lacks SIZE=FUNCTION]...
         [--tags SIZE=TAG,...]... [--live REASON=SIZES[;SIZES]...]...
         [--precondition REGEX]...

--compare-untraced also runs the program without the tracer and requires the
same output (lines "PID" and "LIVE" aside, which hold pids and addresses);
--env adds to the traced run's environment; --stderr-has requires a line of the
traced run's stderr to match; --no-ledger is for programs that make no CUDA call;
--frame-has requires a frame of an exit snapshot with that file (base name) and
line, whose module "modules" lists with a build-id (LINE a number, or a word W:
the number the program printed on a line "W <n>"); --python-stack requires
the one live allocation of SIZE bytes in the exit snapshot to have exactly the
Python frames CHAIN names first (innermost first; empty: no Python frame at
all): a comma list of FUNCTION or FUNCTION@LINE (LINE as for --frame-has, in
the program's own file; a qualified FUNCTION also matches its last part);
a prefix "3.12+:" or "3.9-3.11:" limits it to the Python versions named.
--python-chain is --python-stack without the placement checks below (a
subinterpreter's: the native stack holds two interpreters' loops).
--printed-stacks N requires every line "PYSTACK <address> <chain>" the
program printed (its own Python frames at the call, function@file:line
innermost first) to be exactly the Python frames of the live allocation at
that address, and at least N such lines.
--tags requires the allocation of SIZE bytes in the exit snapshot to carry
exactly these region tags, outermost first (empty: none). --live requires the
main process's snapshots of REASON, in the order written, to hold exactly the
live allocation sizes given ('+' between sizes, ';' between snapshots, an
empty list for an empty snapshot). Its Python frames must stand where the interpreter's
were: after a native frame, and no evaluation-loop frame left in the stack.
--precondition names what the test needs of the machine rather than of the
tracer (where the loader put a module): a line of the traced run's stdout
must match, else the program is run again, up to 3 runs; when none matched,
the last run is checked as usual and, with nothing else wrong, the test is
skipped (exit status 77) saying which precondition was not met — never
failed for it.
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

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "schema"))
import schema_check  # noqa: E402  (tests/schema: every snapshot against docs/snapshot.schema.json)


def run(program: str, expect: dict[str, Any], lib: str | None, python: str, workdir: str,
        extra_env: dict[str, str], extra_args: list[str] = (), timeout: int = 120) -> tuple[int, str, str]:
    """Runs the program, traced unless lib is None; returns its exit status,
    standard output and standard error."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("GMTSIM_") and not k.startswith("GPUMEMTRACE_")}
    env.update(expect.get("env", {}))
    env["GMTSIM_LEDGER_DIR"] = os.path.join(workdir, "ledgers")
    env["GPUMEMTRACE_DIR"] = os.path.join(workdir, "snapshots")
    env["GPUMEMTRACE_SNAPSHOT_ON"] = "oom,exit"
    os.makedirs(env["GMTSIM_LEDGER_DIR"])
    os.makedirs(env["GPUMEMTRACE_DIR"])
    env.update(extra_env)
    preload = [lib] if lib else []
    asan = os.environ.get("GMT_TEST_ASAN_RUNTIME", "")
    if asan and (preload or program.endswith(".py")):
        # NOTE: an instrumented preload (or an instrumented library in an
        # uninstrumented python) needs the ASan runtime first in the list.
        preload.insert(0, asan)
        env["ASAN_OPTIONS"] = env.get("ASAN_OPTIONS", "") + ":detect_leaks=0"
    if preload:
        env["LD_PRELOAD"] = " ".join(preload)
    cmd = ([python, program] if program.endswith(".py") else [program]) + list(extra_args)
    proc = subprocess.run(cmd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=timeout)
    return proc.returncode, proc.stdout, proc.stderr


def comparable(output: str) -> list[str]:
    return [line for line in output.splitlines() if not line.startswith(("PID ", "LIVE ", "PYSTACK "))]


def load(path: str) -> dict[str, Any]:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def ledger_live(ledger: dict[str, Any]) -> list[tuple[Any, ...]]:
    """Address, size, kind, device and, for stream-ordered memory, the stream."""
    return sorted((int(e["address"], 16), e["size"], e["kind"], e["device"], e.get("stream"))
                  for e in ledger["live"])


def snapshot_live(snap: dict[str, Any]) -> list[tuple[Any, ...]]:
    return sorted((int(a["address"], 16), a["size"], a["kind"], a["device"], a.get("stream"))
                  for a in snap["allocations"])


def diff(what: str, expected: list[Any], actual: list[Any]) -> list[str]:
    if expected == actual:
        return []
    missing = [e for e in expected if e not in actual]
    extra = [a for a in actual if a not in expected]
    return [f"{what}: {len(expected)} in the ledger, {len(actual)} in the snapshot; "
            f"missing from the snapshot: {[fmt(m) for m in missing[:5]]}; "
            f"not in the ledger: {[fmt(x) for x in extra[:5]]}"]


def fmt(t: Any) -> str:
    if isinstance(t, tuple) and t and isinstance(t[0], int):
        return "(" + ", ".join([hex(t[0])] + [str(x) for x in t[1:]]) + ")"
    return str(t)


def vmm_rows(doc: dict[str, Any], key: str) -> list[tuple[int, ...]]:
    rows = doc.get("vmm", {}).get(key, [])
    out = []
    for r in rows:
        t = [int(r["address"], 16), r["size"]]
        if key == "mappings":
            t += [int(r["handle"], 16), r["offset"]]
        out.append(tuple(t))
    return sorted(out)


def compare(ledger: dict[str, Any], snap: dict[str, Any], name: str,
            released: set[int] = frozenset()) -> list[str]:
    problems = []
    truth = ledger_live(ledger)
    if ledger["reason"] == "exit" and released:
        missing = released - {t[0] for t in truth}
        if missing:
            problems.append(f"{name}: released addresses not live in the ledger: {sorted(map(hex, missing))}")
        truth = [t for t in truth if t[0] not in released]
    problems += diff(f"{name}: live set", truth, snapshot_live(snap))
    for key in ("reservations", "mappings"):
        problems += diff(f"{name}: vmm {key}", vmm_rows(ledger, key), vmm_rows(snap, key))
    if ledger["reason"] == "exit":
        t, s = ledger["totals"], snap["summary"]
        want = {"total_allocs": t["allocs"], "total_frees": t["frees"] + len(released)}
        for mine, value in want.items():
            if s[mine] != value:
                problems.append(f"{name}: summary.{mine} is {s[mine]}, {value} expected from the ledger")
    if ledger["reason"] == "oom":
        want = ledger["failed_request"]
        got = snap.get("failed_request") or {}
        for k in ("api", "size", "device"):
            if got.get(k) != want[k]:
                problems.append(f"{name}: failed_request.{k} is {got.get(k)!r}, the ledger says {want[k]!r}")
        problems += diagnosis_problems(ledger, snap, name)
    problems += fragmentation_problems(ledger, snap, name, released)
    return problems


def episode_problems(snap: dict[str, Any], name: str, workdir: str, pid: str) -> list[str]:
    """An oom snapshot's episode against the ledgers of its failures."""
    ep = snap.get("episode")
    if ep is None:
        return [f"{name}: no episode"]
    problems = []
    listed = ep["listed"]
    if len(listed) != min(ep["failures"], 32):
        problems.append(f"{name}: episode lists {len(listed)} of {ep['failures']} failures")
    if ep["described"] and snap["failed_request"]["failure"] != listed[-1]["failure"]:
        problems.append(f"{name}: the snapshot describes failure {snap['failed_request']['failure']}, "
                        f"the episode's latest is {listed[-1]['failure']}")
    ledgers = {}
    for f in listed:
        path = os.path.join(workdir, "ledgers", f"ledger.{pid}.oom.{f['failure']}.json")
        if not os.path.exists(path):
            problems.append(f"{name}: the episode lists failure {f['failure']}, which has no ledger")
            continue
        ledgers[f["failure"]] = led = load(path)
        want = led["failed_request"]
        if (f["api"], f["size"]) != (want["api"], want["size"]):
            problems.append(f"{name}: failure {f['failure']} is {f['api']} of {f['size']}, the ledger says "
                            f"{want['api']} of {want['size']}")
    for prev, f in zip(listed, listed[1:]):
        if f["failure"] != prev["failure"] + 1 or prev["failure"] not in ledgers or f["failure"] not in ledgers:
            continue  # not consecutive in the process (a failure of another episode's thread between)
        before = [t for t in ledger_live(ledgers[prev["failure"]]) if t[3] == ep["device"]]
        after = set(ledger_live(ledgers[f["failure"]]))
        gone = [t for t in before if t not in after]
        if (f["freed_bytes"], f["freed_count"]) != (sum(t[1] for t in gone), len(gone)):
            problems.append(f"{name}: failure {f['failure']} says {f['freed_bytes']} bytes in "
                            f"{f['freed_count']} freed since failure {prev['failure']}; the ledgers say "
                            f"{sum(t[1] for t in gone)} in {len(gone)}")
    if len(listed) == ep["failures"]:
        total = (sum(f["freed_bytes"] for f in listed[1:]), sum(f["freed_count"] for f in listed[1:]))
        if (ep["freed"]["bytes"], ep["freed"]["count"]) != total:
            problems.append(f"{name}: episode.freed is {ep['freed']['bytes']} bytes in {ep['freed']['count']}, "
                            f"its failures add up to {total[0]} in {total[1]}")
        by_sites = (sum(x["bytes"] for x in ep["freed"]["sites"]) + ep["freed"]["other_bytes"],
                    sum(x["count"] for x in ep["freed"]["sites"]) + ep["freed"]["other_count"])
        if by_sites != total:
            problems.append(f"{name}: episode.freed.sites add up to {by_sites}, not {total}")
    return problems


def largest_hole(allocs: list[tuple[int, int]], g: int) -> int:
    """The largest free run inside a partly used page of size g, from the
    allocations (address, size) of one device: each page's covered pieces,
    and the gaps between them and the page's ends."""
    pages: dict[int, list[tuple[int, int]]] = {}
    for addr, size in allocs:
        for page in range(addr // g, (addr + size - 1) // g + 1):
            pages.setdefault(page, []).append((max(addr, page * g), min(addr + size, (page + 1) * g)))
    best = 0
    for page, pieces in pages.items():
        if sum(hi - lo for lo, hi in pieces) >= g:
            continue
        at = page * g
        for lo, hi in sorted(pieces):
            best = max(best, lo - at)
            at = hi
        best = max(best, (page + 1) * g - at)
    return best


def fragmentation_problems(ledger: dict[str, Any], snap: dict[str, Any], name: str,
                           released: set[int]) -> list[str]:
    """devices[].fragmentation against the ledger's live set: the size
    classes, the largest hole in a partly used page, and (where the driver was
    asked) what fits."""
    problems = []
    live = [t for t in ledger_live(ledger) if t[0] not in released]
    for dev in snap["devices"]:
        frag = dev.get("fragmentation")
        if frag is None:
            problems.append(f"{name}: device {dev['index']} has no fragmentation")
            continue
        mine = [t for t in live if t[3] == dev["index"]]
        want: dict[int, list[int]] = {}
        for _, size, *_ in mine:
            if size > 0:
                c = want.setdefault(size.bit_length() - 1, [0, 0])
                c[0] += 1
                c[1] += size
        got = {c["min"].bit_length() - 1: [c["count"], c["bytes"]] for c in frag["size_classes"]}
        if got != want:
            problems.append(f"{name}: device {dev['index']} size classes {got}, the ledger's live set gives {want}")
        g = dev["pages"]["granularity"]
        hole = largest_hole(sorted((a, sz) for a, sz, kind, *_ in mine if kind == "device"), g)
        if frag["largest_hole_bytes"] != hole:
            problems.append(f"{name}: device {dev['index']} largest_hole_bytes {frag['largest_hole_bytes']}, expected {hole}")
        if frag["stranded_bytes"] != dev["pages"]["stranded_bytes"]:
            problems.append(f"{name}: device {dev['index']} fragmentation.stranded_bytes differs from pages")
        free = dev["free_bytes"]
        if frag["free_bytes"] != free:
            problems.append(f"{name}: device {dev['index']} fragmentation.free_bytes {frag['free_bytes']}, device says {free}")
        whole = None if free is None else free // g * g
        fit = None if free is None else max(whole, hole)
        if (frag["free_in_whole_pages"], frag["largest_fit_bytes"]) != (whole, fit):
            problems.append(f"{name}: device {dev['index']} free_in_whole_pages/largest_fit_bytes "
                            f"{frag['free_in_whole_pages']}/{frag['largest_fit_bytes']}, expected {whole}/{fit}")
    return problems


def diagnosis_problems(ledger: dict[str, Any], snap: dict[str, Any], name: str) -> list[str]:
    """The numbers an oom snapshot's diagnosis rests on, against the
    simulator's own account of the device at the same instant."""
    device = ledger["failed_request"]["device"]
    truth = next((d for d in ledger["devices"] if d["index"] == device), None)
    numbers = (snap.get("diagnosis") or {}).get("numbers")
    if truth is None or numbers is None:
        return [f"{name}: no diagnosis numbers for device {device}"]
    page = truth["page_size"]
    others_known = numbers["other_processes_bytes"] is not None
    # Used memory the tracer cannot see: the context, and other processes
    # when NVML does not say what they hold.
    unseen = truth["pages_context"] + (0 if others_known else truth["pages_other_processes"])
    want = {
        "total_bytes": truth["total_bytes"],
        "free_bytes": truth["free_bytes"],
        "used_bytes": truth["total_bytes"] - truth["free_bytes"],
        "pool_reserved_bytes": truth["pool_reserved_bytes"],
        "pool_used_bytes": truth["pool_used_bytes"],
        "untracked_bytes": unseen * page,
        "granularity": page,
    }
    if others_known:
        want["other_processes_bytes"] = truth["pages_other_processes"] * page
    problems = []
    for key, value in want.items():
        if numbers.get(key) != value:
            problems.append(f"{name}: diagnosis.numbers.{key} is {numbers.get(key)!r}, the ledger says {value!r}")
    return problems


def snapshots_of(workdir: str, pid: str, reason: str) -> list[str]:
    """The snapshots of one process and reason, in the order they were written
    (the number in the name counts every snapshot of the process)."""
    paths = glob.glob(os.path.join(workdir, "snapshots", f"gpumemtrace.{pid}.{reason}.*.json"))
    # gpumemtrace.<pid>.<reason>.<seq>[.rank<R>].json
    return sorted(paths, key=lambda p: int(os.path.basename(p).split(".")[3]))


def check(workdir: str, released: set[int] = frozenset()) -> tuple[list[str], int]:
    problems: list[str] = []
    compared = 0
    ledgers = glob.glob(os.path.join(workdir, "ledgers", "ledger.*.json"))
    if not ledgers:
        return ["the simulator wrote no ledger"], 0
    pids = sorted({os.path.basename(p).split(".")[1] for p in ledgers})
    for pid in pids:
        ooms = sorted(glob.glob(os.path.join(workdir, "ledgers", f"ledger.{pid}.oom.*.json")),
                      key=lambda p: int(p.rsplit(".", 2)[1]))
        exits = snapshots_of(workdir, pid, "exit")
        pairs = [(os.path.join(workdir, "ledgers", f"ledger.{pid}.exit.json"), exits)]
        # One oom snapshot per episode, naming the failure it was taken at;
        # every failure is in one episode.
        episodes = [(p, load(p)) for p in snapshots_of(workdir, pid, "oom")]
        by_failure = {d["failed_request"]["failure"]: p for p, d in episodes
                      if (d.get("episode") or {}).get("described", 1) != 0}
        counted = sum((d.get("episode") or {}).get("failures", 1) for _, d in episodes)
        if counted != len(ooms):
            problems.append(f"pid {pid}: {len(ooms)} out-of-memory results in the ledgers, "
                            f"{counted} in the {len(episodes)} episodes' snapshots")
        for p, d in episodes:
            problems += episode_problems(d, os.path.basename(p), workdir, pid)
        api_ledger = os.path.join(workdir, "ledgers", f"ledger.{pid}.api.json")
        if os.path.exists(api_ledger):
            pairs.append((api_ledger, snapshots_of(workdir, pid, "api") or snapshots_of(workdir, pid, "signal")))
        # The run's peak (the ledger the program wrote there, "peak"): the
        # last peak snapshot holds its live set, and says so in its summary.
        peak_ledger = os.path.join(workdir, "ledgers", f"ledger.{pid}.peak.json")
        if os.path.exists(peak_ledger):
            peaks = snapshots_of(workdir, pid, "peak")
            pairs.append((peak_ledger, peaks[-1:]))
            if peaks:
                summary = load(peaks[-1])["summary"]
                truth = sum(e["size"] for e in load(peak_ledger)["live"])
                if (summary["live_bytes"], summary["peak_bytes"]) != (truth, truth):
                    problems.append(f"{os.path.basename(peaks[-1])}: live_bytes {summary['live_bytes']} and "
                                    f"peak_bytes {summary['peak_bytes']}, the peak ledger's {truth} expected")
        for failure, snap in sorted(by_failure.items()):
            ledger = os.path.join(workdir, "ledgers", f"ledger.{pid}.oom.{failure}.json")
            if ledger not in ooms:
                problems.append(f"pid {pid}: an oom snapshot names failure {failure}, which has no ledger")
            else:
                pairs.append((ledger, [snap]))
        for ledger, snaps in pairs:
            name = os.path.basename(ledger)
            if not os.path.exists(ledger):
                problems.append(f"{name}: the simulator wrote no exit ledger for pid {pid}")
                continue
            if len(snaps) != 1:
                problems.append(f"{name}: expected one snapshot to compare, found {len(snaps)}")
                continue
            problems += compare(load(ledger), load(snaps[0]), name, released)
            compared += 1
    return problems, compared


def frame_problems(snaps: list[dict[str, Any]], want: str, output: str) -> list[str]:
    """What is wrong with the exit snapshots snaps for one --frame-has FILE:LINE."""
    file, _, word = want.rpartition(":")
    line = word_line(word, output)
    if line is None:
        return [f"--frame-has {want}: the program printed no line {word!r} with a number"]
    frames = [(snap, fr) for snap in snaps for st in snap["stacks"] for fr in st["frames"]]
    hits = [(snap, fr) for snap, fr in frames
            if fr.get("file") and os.path.basename(fr["file"]) == file and fr.get("line") == int(line)]
    if not hits:
        seen = sorted({f"{os.path.basename(fr['file'])}:{fr.get('line')}" for _, fr in frames if fr.get("file")})
        return [f"no frame of an exit snapshot is at {file}:{line} (frames with a file: {seen[:10]})"]
    snap, fr = hits[0]
    ids = {m["path"]: m.get("build_id") for m in snap.get("modules", [])}
    if fr["module"] not in ids:
        return [f"the module {fr['module']!r} of the frame at {file}:{line} is not in \"modules\""]
    if not ids[fr["module"]]:
        return [f"\"modules\" lists {fr['module']!r} without a build_id"]
    return []


def word_line(word: str, output: str) -> int | None:
    """LINE of --frame-has/--python-stack: a number, or what the program
    printed after WORD."""
    if word.isdigit():
        return int(word)
    said = [ln.split()[1] for ln in output.splitlines()
            if ln.startswith(word + " ") and len(ln.split()) == 2 and ln.split()[1].isdigit()]
    return int(said[0]) if said else None


def stack_of_size(snaps: list[dict[str, Any]], size: int) -> tuple[dict[str, Any], str | None]:
    """The stack of the one live allocation of `size` bytes in snaps (empty
    when it has none), or what is wrong."""
    found = [(snap, a) for snap in snaps for a in snap["allocations"] if a["size"] == size]
    if len(found) != 1:
        return {}, f"{len(found)} live allocations of {size} bytes, 1 expected"
    stacks = {st["id"]: st for st in found[0][0]["stacks"]}
    return stacks.get(found[0][1]["stack"], {}), None


def per_episode(option: str, spec: str | None, n: int, problems: list[str]) -> list[str | None]:
    """What `option` wants of each of n episodes' oom snapshots: one list
    for every episode, or one per episode (in order) split by ';'."""
    wanted = spec.split(";") if spec else []
    if len(wanted) > 1 and len(wanted) != n:
        problems.append(f"{option} {spec}: {n} episodes' oom snapshots")
    return [wanted[0] if len(wanted) == 1 else wanted[i] if i < len(wanted) else None for i in range(n)]


def remedy_problems(ooms: list[dict[str, Any]], remedies: str | None, numbers: list[str],
                    sites: list[str], texts: list[str]) -> list[str]:
    """--remedies, --number, --remedy-site and --remedy-text against the oom snapshots."""
    if not ooms:
        return ["no oom snapshot to read remedies from"] if remedies or numbers or sites or texts else []
    problems: list[str] = []
    wanted = per_episode("--remedies", remedies, len(ooms), problems)
    for i, snap in enumerate(ooms):
        got = [r["name"] for r in (snap.get("diagnosis") or {}).get("remedies", [])]
        want = wanted[i]
        if want is not None and got != [w for w in want.split(",") if w not in ("", "-")]:
            problems.append(f"--remedies {want}: the oom snapshot of episode {i + 1} offers {got}")
    last = ooms[-1].get("diagnosis") or {}
    for item in numbers:
        name, _, value = item.partition("=")
        want_value = {"null": None, "true": True, "false": False}.get(value, value)
        if isinstance(want_value, str):
            want_value = int(want_value)
        got_value = (last.get("numbers") or {}).get(name, "(absent)")
        if got_value != want_value or type(got_value) is not type(want_value):
            problems.append(f"--number {item}: diagnosis.numbers.{name} is {got_value!r}")
    for item in texts:
        name, _, words = item.partition("=")
        remedy = next((r for r in last.get("remedies", []) if r["name"] == name), None)
        if remedy is None or words not in remedy["text"]:
            problems.append(f"--remedy-text {item}: the remedy says {remedy and remedy['text']!r}")
    for item in sites:
        name, _, size = item.partition("=")
        remedy = next((r for r in last.get("remedies", []) if r["name"] == name), None)
        owners = {a["stack"] for a in ooms[-1]["allocations"] if a["size"] == int(size)}
        if remedy is None or remedy["stack"] not in owners or len(owners) != 1:
            problems.append(f"--remedy-site {item}: the remedy names stack "
                            f"{remedy and remedy['stack']}, the allocations of {size} bytes have {sorted(owners)}")
    return problems


def python_version(python: str) -> tuple[int, int]:
    out = subprocess.run([python, "-c", "import sys; print(*sys.version_info[:2])"], stdout=subprocess.PIPE,
                         text=True, check=True).stdout.split()
    return int(out[0]), int(out[1])


def version_in(version: tuple[int, int], versions: str) -> bool:
    """Whether a Python version is in "3.12+" or "3.9-3.11"."""
    def parse(text: str) -> tuple[int, int]:
        major, _, minor = text.partition(".")
        return int(major), int(minor)
    if versions.endswith("+"):
        return version >= parse(versions[:-1])
    low, _, high = versions.partition("-")
    return parse(low) <= version <= parse(high)


def python_stack_problems(snaps: list[dict[str, Any]], want: str, output: str, program: str,
                          placed: bool = True) -> list[str]:
    """What is wrong with the exit snapshot for one --python-stack SIZE=CHAIN
    (placed: also where the frames stand among the native ones)."""
    size, _, chain = want.partition("=")
    found = [(snap, a) for snap in snaps for a in snap["allocations"] if a["size"] == int(size)]
    if len(found) != 1:
        return [f"--python-stack {want}: {len(found)} live allocations of {size} bytes, 1 expected"]
    snap, alloc = found[0]
    stacks = {st["id"]: st for st in snap["stacks"]}
    frames = stacks[alloc["stack"]]["frames"] if alloc["stack"] in stacks else []
    py = [(i, fr) for i, fr in enumerate(frames) if fr.get("python") is True]
    got = [f"{fr['function']}@{os.path.basename(fr['file'] or '?')}:{fr['line']}" for _, fr in py]
    items = [item for item in chain.split(",") if item]
    if not items:
        return [f"--python-stack {want}: Python frames {got}, none expected"] if py else []
    problems = []
    for k, item in enumerate(items):
        function, _, word = item.partition("@")
        if k >= len(py):
            problems.append(f"--python-stack {want}: only {len(py)} Python frames: {got}")
            break
        fr = py[k][1]
        # Before 3.11 code objects have no qualified name: "thread_main"
        # for "main.<locals>.thread_main".
        if fr["function"] not in (function, function.rpartition(".")[2]):
            problems.append(f"--python-stack {want}: Python frame {k} is {got[k]}, {function} expected")
        if word:
            line = word_line(word, output)
            if line is None:
                problems.append(f"--python-stack {want}: the program printed no line {word!r}")
            elif (fr["line"], os.path.basename(fr["file"] or "")) != (line, os.path.basename(program)):
                problems.append(f"--python-stack {want}: Python frame {k} is {got[k]}, "
                                f"{os.path.basename(program)}:{line} expected")
        if fr.get("address") is not None or fr.get("module") is not None:
            problems.append(f"--python-stack {want}: Python frame {k} has an address or module: {fr}")
    if not placed:
        return problems
    if py and (py[0][0] == 0 or frames[py[0][0] - 1].get("python") is not False):
        problems.append(f"--python-stack {want}: no native frame before the Python frames")
    if any(i != py[0][0] + k for k, (i, _) in enumerate(py)):
        problems.append(f"--python-stack {want}: the Python frames are not one run")
    loops = [fr for fr in frames if (fr.get("function") or "").startswith("_PyEval_EvalFrameDefault")]
    if loops:
        problems.append(f"--python-stack {want}: {len(loops)} evaluation-loop frames left beside the Python frames")
    return problems


def printed_label(label: str, output: str) -> tuple[str, str | None]:
    """A site label with each upper-case WORD in it replaced by the line the
    program printed for it, or what is missing."""
    for word in set(re.findall(r"\b[A-Z][A-Z_]+\b", label)):
        line = word_line(word, output)
        if line is None:
            return label, f"the program printed no line {word!r}"
        label = re.sub(r"\b" + word + r"\b", str(line), label)
    return label, None


EPISODE_LISTED = 32  # GMT_EPISODE_LISTED: an episode lists its first 31 failures and the latest


def failure_numbers(spec: str) -> list[int]:
    """A comma list of failure numbers and ranges A-B (inclusive)."""
    out: list[int] = []
    for item in spec.split(","):
        first, _, last = item.partition("-")
        out += range(int(first), int(last or first) + 1)
    return out


def episodes_problems(paths: list[str], spec: str, output: str, viewer: str | None) -> list[str]:
    """--episodes: the main process's oom snapshots, in the order written,
    are of these episodes (';' between them), each FAILURES[@END][=LABEL]:
    its failures are FAILURES (a comma list of numbers and ranges A-B, in
    order), of which it lists all — or, past 32, the first 31 and the latest
    (docs/snapshot-format.md, "episode") —, and it was taken at the last of
    them (failed_request.failure, episode.described) or, with @END, when the
    episode ended (described 0) as END says (episode.end: success, gap, ...)
    and still of the last; the failed request's stack's site is labelled
    LABEL (upper-case words as for --site). With --viewer, the viewer's
    summary of each names that failure and, for an episode of several, says
    it is the last of them, the one the program was told of; for an episode
    of one, no such line."""
    wanted = [part.partition("=") for part in spec.split(";")]
    problems = []
    if len(paths) != len(wanted):
        problems.append(f"--episodes {spec}: {len(paths)} oom snapshots, {len(wanted)} expected")
    for path, (failures, _, label) in zip(paths, wanted):
        name, snap = os.path.basename(path), load(path)
        failures, _, end = failures.partition("@")
        want = failure_numbers(failures)
        listed = want if len(want) <= EPISODE_LISTED else want[:EPISODE_LISTED - 1] + want[-1:]
        ep, req = snap.get("episode") or {}, snap.get("failed_request") or {}
        got = [f["failure"] for f in ep.get("listed", [])]
        if got != listed or ep.get("failures") != len(want):
            problems.append(f"{name}: its episode lists failures {got} of {ep.get('failures')}, {listed} of "
                            f"{len(want)} expected")
        described = 0 if end else len(want)
        if req.get("failure") != want[-1] or ep.get("described") != described:
            problems.append(f"{name}: it describes failure {req.get('failure')} (episode.described "
                            f"{ep.get('described')}), failure {want[-1]} (described {described}) expected")
        if end and ep.get("end") != end:
            problems.append(f"{name}: taken when its episode ended by {ep.get('end')!r}, {end!r} expected")
        if label:
            label, problem = printed_label(label, output)
            stacks = {st["id"]: st for st in snap["stacks"]}
            site = (stacks.get(req.get("stack")) or {}).get("site") or {}
            if problem or site.get("label") != label:
                problems.append(f"{name}: the failed request's site is {site.get('label')!r}, "
                                f"{label!r} expected{f' ({problem})' if problem else ''}")
        if viewer:
            problems += viewer_episode_problems(viewer, path, want)
    return problems


def viewer_episode_problems(viewer: str, path: str, failures: list[int]) -> list[str]:
    """What the viewer's summary of an oom snapshot says of its episode:
    the failure it describes, and which of the episode's failures that is."""
    proc = subprocess.run([sys.executable, viewer, "--color", "never", "--width", "1000", path],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, check=False)
    name, lines = os.path.basename(path), [ln.strip() for ln in proc.stdout.splitlines()]
    if proc.returncode != 0:
        return [f"{name}: the viewer exited with {proc.returncode}: {proc.stderr.strip()}"]
    problems = []
    requests = [ln for ln in lines if ln.startswith("request:")]
    if len(requests) != 1 or not requests[0].endswith(f"failure #{failures[-1]})"):
        problems.append(f"{name}: the viewer's request line is {requests}, of failure #{failures[-1]} expected")
    said = [ln for ln in lines if ln.startswith("this snapshot is of failure")]
    n = len(failures)
    want = [f"this snapshot is of failure {n} of {n}, the last the program was told of"] if n > 1 else []
    if said != want:
        problems.append(f"{name}: the viewer says {said}, {want} expected")
    return problems


def site_problems(snaps: list[dict[str, Any]], want: str, output: str) -> list[str]:
    """--site SIZE=LABEL: the site the tracer named for the one live
    allocation of SIZE bytes is the program's own code, its frame is marked
    so and every frame before it is not, and its label is LABEL, each
    upper-case WORD in it replaced by the line the program printed for it."""
    size, _, label = want.partition("=")
    stack, problem = stack_of_size(snaps, int(size))
    if problem:
        return [f"--site {want}: {problem}"]
    label, problem = printed_label(label, output)
    if problem:
        return [f"--site {want}: {problem}"]
    site, frames = stack.get("site"), stack.get("frames", [])
    if not isinstance(site, dict):
        return [f"--site {want}: the stack has no site"]
    problems = []
    if site.get("label") != label:
        problems.append(f"--site {want}: the site is {site.get('label')!r}, {label!r} expected")
    at = site.get("frame")
    if not site.get("user") or not isinstance(at, int) or frames[at].get("role") != "user":
        problems.append(f"--site {want}: the site's frame is not the program's own: {site}")
    elif any(fr.get("role") == "user" for fr in frames[:at]):
        problems.append(f"--site {want}: a frame of the program's own before the site's frame {at}")
    return problems


def printed_stack_problems(snaps: list[dict[str, Any]], output: str, least: int) -> list[str]:
    """--printed-stacks: each "PYSTACK <address> <chain>" line the program
    printed (its Python frames at the call, as the interpreter reports them)
    names a live allocation of the exit snapshot whose Python frames are
    exactly the chain, in one run after a native frame; at least `least`."""
    by_addr = {}
    for snap in snaps:
        stacks = {st["id"]: st for st in snap["stacks"]}
        for a in snap["allocations"]:
            by_addr[int(a["address"], 16)] = stacks.get(a["stack"], {"frames": []})["frames"]
    printed = [line.split(" ", 2) for line in output.splitlines() if line.startswith("PYSTACK ")]
    problems = [] if len(printed) >= least else [f"--printed-stacks: {len(printed)} PYSTACK lines, {least} expected"]
    wrong = []
    for _, addr, chain in printed:
        frames = by_addr.get(int(addr, 16))
        if frames is None:
            wrong.append(f"{addr}: no live allocation there")
            continue
        py = [i for i, fr in enumerate(frames) if fr.get("python") is True]
        got = ",".join(f"{frames[i]['function']}@{os.path.basename(frames[i]['file'] or '?')}:{frames[i]['line']}"
                       for i in py)
        if got != chain:
            wrong.append(f"{addr}: Python frames {got!r}, the program saw {chain!r}")
        elif py and (py[0] == 0 or py != list(range(py[0], py[0] + len(py)))):
            wrong.append(f"{addr}: the Python frames are not one run after a native frame")
    if wrong:
        problems.append(f"--printed-stacks: {len(wrong)} of {len(printed)} allocations wrong, e.g. {wrong[:3]}")
    return problems


PRECONDITION_RUNS = 3


def unmet_preconditions(patterns: list[str], output: str) -> list[str]:
    """The --precondition patterns no line of output matches."""
    return [p for p in patterns if not any(re.search(p, line) for line in output.splitlines())]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("program")
    ap.add_argument("expect")
    ap.add_argument("--lib", required=True)
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    ap.add_argument("--compare-untraced", action="store_true")
    ap.add_argument("--env", action="append", default=[], metavar="VAR=VALUE")
    ap.add_argument("--stderr-has", action="append", default=[], metavar="REGEX")
    ap.add_argument("--no-ledger", action="store_true")
    ap.add_argument("--runtime-call", action="append", default=[], metavar="NAME",
                    help="some stack of an exit snapshot must name this runtime call")
    ap.add_argument("--frame-has", action="append", default=[], metavar="FILE:LINE",
                    help="some frame of an exit snapshot must be at this file (base name) and line")
    ap.add_argument("--python-stack", action="append", default=[], metavar="SIZE=CHAIN",
                    help="the allocation of SIZE bytes has these Python frames first")
    ap.add_argument("--python-chain", action="append", default=[], metavar="SIZE=CHAIN",
                    help="as --python-stack, where they stand among the native frames unchecked")
    ap.add_argument("--history-steps", metavar="N,N...",
                    help="the exit snapshot's history holds these steps (gmt_step), in order, after the "
                         "allocations before them")
    ap.add_argument("--site", action="append", default=[], metavar="SIZE=LABEL",
                    help="the site of the allocation of SIZE bytes is the program's own code, so labelled "
                         "(upper-case words: the lines the program printed)")
    ap.add_argument("--output-has", action="append", default=[], metavar="REGEX",
                    help="a line of the traced run's stdout matches")
    ap.add_argument("--precondition", action="append", default=[], metavar="REGEX",
                    help="a line of the traced run's stdout matches, else the run is repeated (3 runs), "
                         "then the test is skipped (77)")
    ap.add_argument("--stack-has", action="append", default=[], metavar="SIZE=FUNCTION",
                    help="the allocation of SIZE bytes has a frame named FUNCTION")
    ap.add_argument("--stack-lacks", action="append", default=[], metavar="SIZE=FUNCTION",
                    help="the allocation of SIZE bytes has no frame named FUNCTION")
    ap.add_argument("--printed-stacks", type=int, metavar="N",
                    help="every PYSTACK line the program printed must match its allocation's Python "
                         "frames exactly; at least N such lines")
    ap.add_argument("--tags", action="append", default=[], metavar="SIZE=TAG,...",
                    help="the allocation of SIZE bytes carries exactly these tags")
    ap.add_argument("--live", action="append", default=[], metavar="REASON=SIZES;...",
                    help="the snapshots of REASON hold exactly these sizes")
    ap.add_argument("--episodes", metavar="FAILURES[@END][=LABEL][;...]",
                    help="the oom snapshots, in order, are of episodes of exactly these failures (comma list, "
                         "ranges A-B) and describe the last — taken at it, or when the episode ended by END —, "
                         "whose site is LABEL")
    ap.add_argument("--viewer", metavar="GPUMEMTRACE_VIEW",
                    help="with --episodes: the viewer's summary of each oom snapshot names its failure "
                         "and says which of the episode's it is")
    ap.add_argument("--verdict", metavar="NAME[,NAME...][;...]",
                    help="every oom snapshot's verdicts, the primary first, are exactly these; "
                         "with ';', one list per episode in order")
    ap.add_argument("--remedies", metavar="NAME[,NAME...][;...]",
                    help="every oom snapshot's remedies, in order, are exactly these ('-': none); "
                         "with ';', one list per episode in order")
    ap.add_argument("--number", action="append", default=[], metavar="NAME=VALUE",
                    help="the last oom snapshot's diagnosis.numbers NAME is VALUE (an integer, or null)")
    ap.add_argument("--remedy-site", action="append", default=[], metavar="NAME=SIZE",
                    help="the last oom snapshot's remedy NAME names the stack of the live allocations of SIZE bytes")
    ap.add_argument("--remedy-text", action="append", default=[], metavar="NAME=WORDS",
                    help="the last oom snapshot's remedy NAME says WORDS")
    ap.add_argument("--others-known", choices=["yes", "no"],
                    help="whether the oom snapshots know other processes' memory (NVML)")
    ap.add_argument("--others-why", metavar="WORDS",
                    help="every oom snapshot's failing device says WORDS of why other processes are not known")
    ap.add_argument("--rank", type=int, metavar="R",
                    help="every snapshot is named ...rank<R>.json and says process.rank R")
    ap.add_argument("--timeout", type=int, default=120, help="seconds the traced run may take")
    ap.add_argument("--skip-under-asan", metavar="WHY",
                    help="skip (77) in a build under AddressSanitizer, for this reason")
    ap.add_argument("--stat-max", action="append", default=[], metavar="NAME=N",
                    help="the exit snapshots must count at most N in stats.NAME")
    ap.add_argument("--stat-min", action="append", default=[], metavar="NAME=N",
                    help="the main process's exit snapshot must count at least N in stats.NAME")
    argv = sys.argv[1:]
    program_args = argv[argv.index("--") + 1:] if "--" in argv else []
    args = ap.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    args.args = program_args
    if args.skip_under_asan and os.environ.get("GMT_TEST_ASAN_RUNTIME"):
        print(f"SKIP: {args.skip_under_asan}")
        return 77

    expect = load(args.expect)
    extra_env = dict(kv.split("=", 1) for kv in args.env)
    for attempt in range(1, PRECONDITION_RUNS + 1):
        workdir = tempfile.mkdtemp(prefix="gmt-preload-")
        status, output, errors = run(args.program, expect, args.lib, args.python, workdir, extra_env, args.args,
                                     args.timeout)
        unmet = unmet_preconditions(args.precondition, output)
        if not unmet or attempt == PRECONDITION_RUNS:
            break
        print(f"run {attempt}: precondition not met ({', '.join(unmet)}); running again")
        subprocess.run(["rm", "-rf", workdir], check=False)
    problems = []
    want = expect.get("exit_code", 0)
    if status != want:
        problems.append(f"exit status {status} under the tracer, {want} expected")
    for pattern in args.stderr_has:
        if not any(re.search(pattern, line) for line in errors.splitlines()):
            problems.append(f"no line of stderr matches {pattern!r}")
    bad = []
    in_report = False
    for line in errors.splitlines():
        # An out-of-memory report: its first line, then indented ones.
        if line.startswith("gpumemtrace: out of memory:"):
            in_report = True
            continue
        if in_report and line.startswith("gpumemtrace:   "):
            continue
        in_report = False
        if line.startswith("gpumemtrace:") and not any(re.search(p, line) for p in args.stderr_has):
            bad.append(line)
    if bad:
        problems.append(f"unexpected messages from the tracer: {bad[:3]}")
    if args.compare_untraced:
        plain_dir = tempfile.mkdtemp(prefix="gmt-untraced-")
        plain_status, plain_output, _ = run(args.program, expect, None, args.python, plain_dir, {}, args.args)
        subprocess.run(["rm", "-rf", plain_dir], check=False)
        if plain_status != status:
            problems.append(f"exit status {status} traced, {plain_status} untraced")
        for traced_line, plain_line in zip(comparable(output), comparable(plain_output)):
            if traced_line != plain_line:
                problems.append(f"output differs: traced {traced_line!r}, untraced {plain_line!r}")
        if len(comparable(output)) != len(comparable(plain_output)):
            problems.append("traced and untraced output differ in length")
    compared = 0
    if not args.no_ledger:
        released = {int(line.split()[1], 16) for line in output.splitlines() if line.startswith("RELEASED ")}
        more, compared = check(workdir, released)
        problems += more
    exits = [load(p) for p in glob.glob(os.path.join(workdir, "snapshots", "*.exit.*.json"))]
    calls = {st.get("runtime_call") for snap in exits for st in snap["stacks"]}
    for name in args.runtime_call:
        if name not in calls:
            problems.append(f"no stack names the runtime call {name!r} (named: {sorted(c for c in calls if c)})")
    for want_frame in args.frame_has:
        problems += frame_problems(exits, want_frame, output)
    wanted = [(w, True) for w in args.python_stack] + [(w, False) for w in args.python_chain]
    version = python_version(args.python) if any(":" in w for w, _ in wanted) else (0, 0)
    for want_stack, placed in wanted:
        versions, _, spec = want_stack.rpartition(":")
        if not versions or version_in(version, versions):
            problems += python_stack_problems(exits, spec, output, args.program, placed)
    for want_site in args.site:
        problems += site_problems(exits, want_site, output)
    if args.history_steps:
        want_steps = [int(x) for x in args.history_steps.split(",")]
        for snap in exits:
            events = snap["history"]["events"]
            got = [e.get("step") for e in events if e["op"] == "step"]
            if got != want_steps:
                problems.append(f"--history-steps: the history's steps are {got}, {want_steps} expected")
            seqs = [e["seq"] for e in events if e["op"] != "oom"]
            if seqs != sorted(seqs):
                problems.append(f"--history-steps: the history is not in sequence order: {seqs}")
    for pattern in args.output_has:
        if not any(re.search(pattern, line) for line in output.splitlines()):
            problems.append(f"no line of the program's output matches {pattern!r}")
    for item, want_it in [(i, True) for i in args.stack_has] + [(i, False) for i in args.stack_lacks]:
        size, _, function = item.partition("=")
        stack, problem = stack_of_size(exits, int(size))
        if problem:
            problems.append(f"{item}: {problem}")
            continue
        names = [fr.get("function") for fr in stack.get("frames", [])]
        if (function in names) != want_it:
            problems.append(f"--stack-{'has' if want_it else 'lacks'} {item}: the frames are {names}")
    if args.printed_stacks is not None:
        problems += printed_stack_problems(exits, output, args.printed_stacks)
    for item in args.tags:
        size, _, names = item.partition("=")
        want_tags = [t for t in names.split(",") if t]
        stack, problem = stack_of_size(exits, int(size))
        if problem:
            problems.append(f"--tags {item}: {problem}")
            continue
        got = stack.get("tags", [])
        if got != want_tags:
            problems.append(f"--tags {item}: the allocation carries {got}")
    pid = next((ln.split()[1] for ln in output.splitlines() if ln.startswith("PID ") and ln.endswith(" main")), "")
    for item in args.live:
        reason, _, spec = item.partition("=")
        want_live = [sorted(int(x) for x in part.split("+") if x) for part in spec.split(";")]
        got_live = [sorted(a["size"] for a in load(p)["allocations"]) for p in snapshots_of(workdir, pid, reason)]
        if got_live != want_live:
            problems.append(f"--live {item}: the {reason} snapshots hold {got_live}")
    if args.episodes:
        problems += episodes_problems(snapshots_of(workdir, pid, "oom"), args.episodes, output, args.viewer)
    ooms = [load(p) for p in snapshots_of(workdir, pid, "oom")]
    if (args.verdict or args.others_known) and not ooms:
        problems.append("no oom snapshot to read a verdict from")
    wanted = per_episode("--verdict", args.verdict, len(ooms), problems)
    for i, snap in enumerate(ooms):
        diagnosis = snap.get("diagnosis") or {}
        got = [v["name"] for v in diagnosis.get("verdicts", [])]
        want = wanted[i]
        if want is not None and got != want.split(","):
            problems.append(f"--verdict {want}: the oom snapshot of episode {i + 1} says {got} "
                            f"({diagnosis.get('summary')})")
        if got and diagnosis.get("verdict") != got[0]:
            problems.append(f"diagnosis.verdict {diagnosis.get('verdict')!r} is not the first of {got}")
        known = (diagnosis.get("numbers") or {}).get("other_processes_bytes") is not None
        if args.others_known and known != (args.others_known == "yes"):
            problems.append(f"--others-known {args.others_known}: other_processes_bytes is "
                            f"{(diagnosis.get('numbers') or {}).get('other_processes_bytes')!r}")
        failed = (snap.get("failed_request") or {}).get("device")
        why = next((d.get("other_processes", {}).get("why") for d in snap.get("devices", [])
                    if d.get("index") == failed), None)
        if args.others_why and args.others_why not in (why or ""):
            problems.append(f"--others-why {args.others_why}: the failing device's other_processes.why is {why!r}")
    problems += remedy_problems(ooms, args.remedies, args.number, args.remedy_site, args.remedy_text)
    everything = glob.glob(os.path.join(workdir, "snapshots", "gpumemtrace.*.json"))
    if args.rank is not None:
        if not everything:
            problems.append("--rank: no snapshot")
        for path in everything:
            name, process = os.path.basename(path), load(path).get("process") or {}
            if not name.endswith(f".rank{args.rank}.json") or process.get("rank") != args.rank:
                problems.append(f"--rank {args.rank}: {name} says process {process}")
    elif any(".rank" in os.path.basename(p) for p in everything):
        problems.append("a snapshot name carries a rank, but none was set")
    exit_paths = glob.glob(os.path.join(workdir, "snapshots", "*.exit.*.json"))
    for item in args.stat_min:
        name, least = item.split("=", 1)
        counted = max((load(p)["stats"].get(name, 0) for p in exit_paths), default=0)
        if counted < int(least):
            problems.append(f"stats.{name} is {counted}, at least {least} expected")
    for item in args.stat_max:
        name, most = item.split("=", 1)
        counted = max((load(p)["stats"].get(name, 0) for p in exit_paths), default=0)
        if counted > int(most) or not exit_paths:
            problems.append(f"stats.{name} is {counted}, at most {most} expected")
    # Every snapshot the run wrote, whatever the checks above looked at.
    written = schema_check.snapshot_files(os.path.join(workdir, "snapshots"))
    problems += schema_check.validate(written)
    print(output, end="")
    print(errors, end="", file=sys.stderr)
    if problems:
        for p in problems:
            print("FAIL:", p)
        print(f"work directory kept: {workdir}")
        return 1
    print(f"ok: {compared} snapshots equal their ledgers; schema: {len(written)} snapshots valid")
    if not args.keep:
        subprocess.run(["rm", "-rf", workdir], check=False)
    if unmet:
        print(f"SKIP: precondition not met in {PRECONDITION_RUNS} runs: no output line matches "
              f"{', '.join(repr(p) for p in unmet)}")
        return 77
    return 0


if __name__ == "__main__":
    sys.exit(main())
