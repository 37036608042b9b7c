#!/usr/bin/env python3
"""The checker of the real-GPU suite (docs/gpu-suite.md): compares what a
program of tests/gpu (or a framework script) printed about itself with the
snapshots the tracer wrote while it ran, and with the device's own free
bytes (cudaMemGetInfo).

A program prints one fact per line, each starting with a keyword (other
lines are ignored):

    TEST <name> <pid>                   first: the test, and the process whose
                                        snapshots count
    SKIP <reason>                       it cannot check here: skipped
    CHECKPOINT <label> <where>          a snapshot to check: the path gmt_dump
                                        gave, @oom (the out-of-memory snapshot
                                        of the process's last episode: the one
                                        the program was told of; earlier ones
                                        ended with a successful retry), @exit,
                                        or - (gmt_dump failed: not traced)
    COVER <label> <kinds|all>           compare the snapshot's allocations of
                                        these kinds (comma list) with the LIVE
                                        lines of the label, exactly
    LIVE <label> <addr> <size> <kind> <device>
    MEMINFO <label> <device> <free> <total>   cudaMemGetInfo right after
    EXTRA <label> <device> <bytes>      resident bytes the snapshot's
                                        footprint rightly leaves out
    POOL <label> <device> <reserved>    devices[].pools.reserved_bytes
    BYTES <label> <device> <kinds> <bytes>    live bytes of those kinds
    HAS <label> <addr> <kinds> <device> <min-size>   an allocation there
                                        (kind "mapped": a VMM mapping there)
    PYFRAME <label> <addr> <function> <file> <line>   the allocation there has
                                        this as its innermost Python frame
                                        (file: a base name)
    GONE <label> <addr>                 no allocation there
    RESERVATION <label> <min-size>      a VMM address reservation that large
    OOM <label> <api|*> <size> <device> <exact|min>   the failed request
    VERDICT <label> <name> [primary]    a verdict of the diagnosis
    NOVERDICT <label> <name>            a verdict the diagnosis must not list
    GROWTHSITE <label> <file> <line> [<steps>]   the diagnosis's growing
                                        site (numbers.growth_top_stack) is at
                                        this line of this file (a base name):
                                        its site label's first "(file:line)";
                                        with steps, it grew over at least that
                                        many marked steps
    REMEDY <label> <name> [first]       a remedy of the diagnosis (the first)
    REPLAY <label> <fits|nofit>         the diagnosis's replay of PyTorch's
                                        history with expandable segments
                                        answered (the replay under the run's
                                        own settings reproduced the run), and
                                        said this of the failing request
    RECOVERED                           out-of-memory snapshots are expected
                                        without an @oom checkpoint: failures
                                        the framework recovered from (released
                                        its cache, retried), none reaching the
                                        program
    LEAKS <label> <count> <bytes>       leaks.totals.counted
    FRAMEWORK <label> <device> <allocated> <reserved>   the snapshot's framework
                                        section (PyTorch's state): exactly these
                                        allocated and reserved bytes, equal to
                                        its active blocks and its segments, every
                                        segment joined to a driver allocation
    LIMIT <label> <device> <bytes>      the framework's own limit on the
                                        device (framework.devices[].limit_bytes:
                                        PyTorch's allowed maximum under its
                                        memory fraction), exactly these bytes
    GRANULARITY <device> <bytes>        the driver's minimum granularity
    NOTE <text>                         shown in the table

The checks, for each checkpoint:

- the live set: exactly the LIVE lines (address, size, kind, device) for the
  kinds COVER names;
- the snapshot's free bytes (asked by the tracer) against the program's
  cudaMemGetInfo right after: equal within the tolerance, totals equal;
- the footprint delta: from the first checkpoint of a device with MEMINFO
  (the baseline) to each later one, the device's free bytes fell by what the
  snapshot's footprint grew (plus the EXTRA bytes), within the tolerance.
  The footprint is what the tracer says the process holds on the device: the
  pages of its device-kind memory (devices[].pages: pages x granularity), its
  VMM handles, its pools' reserved bytes (devices[].pools, else its
  stream-ordered bytes in whole pages), and its arrays in whole pages;
  managed memory counts nothing (not resident until touched);
- the snapshot's own page count against the pages its allocations cover;
- the other facts (POOL, BYTES, HAS, PYFRAME, GONE, RESERVATION, OOM, VERDICT, LEAKS)
  exactly as stated.

And for the run: an out-of-memory snapshot exists exactly when the program
expected one (@oom), one exit snapshot where it named @exit, the exit status,
and no message from the tracer but its out-of-memory reports (and its leak
report, with the leak check on).

Tolerance: 0 on the simulated GPU (its driver is exact); on a real GPU 4 MiB
by default (--tolerance), for the driver's own bookkeeping allocations,
which the tracer cannot see (docs/gpu-suite.md says which).

Usage: check_gpu.py STDOUT-FILE SNAPSHOT-DIR [--stderr FILE] [--status N]
         [--expect-status N] [--tolerance BYTES] [--leak-check]
Exit status 0 when every check passes, 1 otherwise, 77 for a skip.
"""
from __future__ import annotations

import argparse
import collections
import glob
import json
import os
import re
import sys
from dataclasses import dataclass, field
from typing import Any

MIB = 1 << 20
DEFAULT_TOLERANCE = 4 * MIB
HOST_KINDS = {"host", "registered"}
ALL_KINDS = {"device", "async", "managed", "host", "registered", "vmm", "array"}

Entry = tuple[int, int, str, int]  # address, size, kind, device


@dataclass
class Expectations:
    """Everything a program printed about itself."""
    test: str | None = None
    pid: int | None = None
    skip: str | None = None
    checkpoints: dict[str, str] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)
    cover: dict[str, set[str]] = field(default_factory=dict)
    live: dict[str, list[Entry]] = field(default_factory=lambda: collections.defaultdict(list))
    meminfo: dict[tuple[str, int], tuple[int, int]] = field(default_factory=dict)
    extra: dict[tuple[str, int], int] = field(default_factory=dict)
    pools: list[tuple[str, int, int]] = field(default_factory=list)
    byte_sums: list[tuple[str, int, set[str], int]] = field(default_factory=list)
    has: list[tuple[str, int, set[str], int, int]] = field(default_factory=list)
    pyframes: list[tuple[str, int, str, str, int]] = field(default_factory=list)
    gone: list[tuple[str, int]] = field(default_factory=list)
    reservations: list[tuple[str, int]] = field(default_factory=list)
    ooms: list[tuple[str, str, int, int, str]] = field(default_factory=list)
    verdicts: list[tuple[str, str, bool]] = field(default_factory=list)
    no_verdicts: list[tuple[str, str]] = field(default_factory=list)
    growth_sites: list[tuple[str, str, int, int]] = field(default_factory=list)
    remedies: list[tuple[str, str, bool]] = field(default_factory=list)
    replays: list[tuple[str, bool]] = field(default_factory=list)
    recovered: bool = False
    leaks: list[tuple[str, int, int]] = field(default_factory=list)
    frameworks: list[tuple[str, int, int, int]] = field(default_factory=list)
    limits: list[tuple[str, int, int]] = field(default_factory=list)
    granularity: dict[int, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


@dataclass
class Outcome:
    """The verdict on one run: status is pass, fail or skip."""
    status: str
    problems: list[str]
    summary: str
    notes: list[str] = field(default_factory=list)


def _int(text: str) -> int:
    return int(text, 0)


def _kinds(text: str) -> set[str]:
    return set(ALL_KINDS) if text == "all" else set(text.split(","))


def parse(output: str) -> Expectations:
    """The facts in a program's standard output; malformed lines become
    problems, so that a misprinted expectation cannot pass unchecked."""
    exp = Expectations()
    for n, line in enumerate(output.splitlines(), 1):
        word, _, rest = line.partition(" ")
        f = rest.split()
        try:
            if word == "TEST":
                exp.test, exp.pid = f[0], _int(f[1])
            elif word == "SKIP":
                exp.skip = rest.strip() or "no reason given"
            elif word == "NOTE":
                exp.notes.append(rest.strip())
            elif word == "CHECKPOINT":
                label, where = f[0], rest.split(" ", 1)[1].strip()
                if label in exp.checkpoints:
                    exp.problems.append(f"line {n}: checkpoint {label!r} printed twice")
                exp.checkpoints[label] = where
                exp.order.append(label)
            elif word == "COVER":
                exp.cover[f[0]] = _kinds(f[1])
            elif word == "LIVE":
                if f[3] not in ALL_KINDS:
                    raise ValueError(f"unknown kind {f[3]!r}")
                exp.live[f[0]].append((_int(f[1]), _int(f[2]), f[3], _int(f[4])))
            elif word == "MEMINFO":
                exp.meminfo[(f[0], _int(f[1]))] = (_int(f[2]), _int(f[3]))
            elif word == "EXTRA":
                exp.extra[(f[0], _int(f[1]))] = _int(f[2])
            elif word == "POOL":
                exp.pools.append((f[0], _int(f[1]), _int(f[2])))
            elif word == "BYTES":
                exp.byte_sums.append((f[0], _int(f[1]), _kinds(f[2]), _int(f[3])))
            elif word == "HAS":
                exp.has.append((f[0], _int(f[1]), _kinds(f[2]), _int(f[3]), _int(f[4])))
            elif word == "PYFRAME":
                exp.pyframes.append((f[0], _int(f[1]), f[2], f[3], _int(f[4])))
            elif word == "GONE":
                exp.gone.append((f[0], _int(f[1])))
            elif word == "RESERVATION":
                exp.reservations.append((f[0], _int(f[1])))
            elif word == "OOM":
                if f[4] not in ("exact", "min"):
                    raise ValueError(f"OOM takes exact or min, not {f[4]!r}")
                exp.ooms.append((f[0], f[1], _int(f[2]), _int(f[3]), f[4]))
            elif word == "VERDICT":
                exp.verdicts.append((f[0], f[1], len(f) > 2 and f[2] == "primary"))
            elif word == "NOVERDICT":
                exp.no_verdicts.append((f[0], f[1]))
            elif word == "GROWTHSITE":
                exp.growth_sites.append((f[0], f[1], _int(f[2]), _int(f[3]) if len(f) > 3 else 0))
            elif word == "REMEDY":
                if len(f) > 2 and f[2] != "first":
                    raise ValueError(f"REMEDY takes first or nothing, not {f[2]!r}")
                exp.remedies.append((f[0], f[1], len(f) > 2))
            elif word == "REPLAY":
                if f[1] not in ("fits", "nofit"):
                    raise ValueError(f"REPLAY takes fits or nofit, not {f[1]!r}")
                exp.replays.append((f[0], f[1] == "fits"))
            elif word == "RECOVERED":
                exp.recovered = True
            elif word == "LEAKS":
                exp.leaks.append((f[0], _int(f[1]), _int(f[2])))
            elif word == "FRAMEWORK":
                exp.frameworks.append((f[0], _int(f[1]), _int(f[2]), _int(f[3])))
            elif word == "LIMIT":
                exp.limits.append((f[0], _int(f[1]), _int(f[2])))
            elif word == "GRANULARITY":
                exp.granularity[_int(f[0])] = _int(f[1])
        except (IndexError, ValueError) as e:
            exp.problems.append(f"line {n}: malformed {word} line {line!r}: {e}")
    labels = set(exp.checkpoints)
    used = ({k for k in exp.live} | set(exp.cover) | {k for k, _ in exp.meminfo}
            | {k for k, _ in exp.extra} | {x[0] for x in exp.pools + exp.byte_sums + exp.has
                                          + exp.pyframes + exp.gone + exp.reservations + exp.ooms
                                          + exp.verdicts + exp.leaks + exp.frameworks + exp.limits
                                          + exp.no_verdicts + exp.growth_sites + exp.remedies
                                          + exp.replays})
    for label in sorted(used - labels):
        exp.problems.append(f"facts about {label!r}, which is no checkpoint")
    return exp


def load(path: str) -> dict[str, Any]:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def snapshots_of(snapdir: str, pid: int, reason: str) -> list[str]:
    """The process's snapshots of a reason, in the order written."""
    paths = glob.glob(os.path.join(glob.escape(snapdir), f"gpumemtrace.{pid}.{reason}.*.json"))
    return sorted(paths, key=lambda p: int(os.path.basename(p).split(".")[3]))


def resolve(exp: Expectations, snapdir: str) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """The snapshot of each checkpoint, and what kept some from being found."""
    snaps: dict[str, dict[str, Any]] = {}
    problems: list[str] = []
    for label in exp.order:
        where = exp.checkpoints[label]
        path: str | None = None
        if where == "-":
            problems.append(f"{label}: gmt_dump wrote no snapshot: was the program traced?")
            continue
        if where == "@oom":
            # The latest episode's: a caching allocator's failures it
            # recovered from (a retry after freeing its cache succeeded) are
            # episodes of their own before the one the program saw.
            ooms = snapshots_of(snapdir, exp.pid, "oom")
            path = ooms[-1] if ooms else None
            if path is None:
                problems.append(f"{label}: no out-of-memory snapshot was written")
                continue
        elif where == "@exit":
            exits = snapshots_of(snapdir, exp.pid, "exit")
            if len(exits) != 1:
                problems.append(f"{label}: {len(exits)} exit snapshots, 1 expected")
                continue
            path = exits[0]
        else:
            path = where if os.path.isabs(where) else os.path.join(snapdir, where)
        try:
            snaps[label] = load(path)
        except (OSError, ValueError) as e:
            problems.append(f"{label}: cannot read {path}: {e}")
    return snaps, problems


def fmt_bytes(n: int) -> str:
    sign = "-" if n < 0 else ""
    n = abs(n)
    for unit, size in (("GiB", 1 << 30), ("MiB", MIB), ("KiB", 1 << 10)):
        if n >= size:
            return f"{sign}{n / size:.2f} {unit}"
    return f"{sign}{n} B"


def fmt_entry(e: Entry) -> str:
    return f"{hex(e[0])} {e[1]} {e[2]} dev {e[3]}"


def snapshot_entries(snap: dict[str, Any]) -> list[Entry]:
    return [(int(a["address"], 16), a["size"], a["kind"], a["device"]) for a in snap["allocations"]]


def framework_problems(snap: dict[str, Any], label: str, device: int, allocated: int, reserved: int) -> list[str]:
    """A FRAMEWORK fact against the snapshot's framework section."""
    fw = snap.get("framework")
    if not isinstance(fw, dict):
        return [f"{label}: no framework section (the framework's state) in the snapshot"]
    out = []
    dev = next((d for d in fw.get("devices") or [] if d.get("device") == device), {})
    segs = [s for s in fw.get("segments") or [] if s.get("device") == device]
    active = sum(b.get("size", 0) for s in segs for b in s.get("blocks") or [] if b.get("state") == "active_allocated")
    total = sum(s.get("total_size", 0) for s in segs)
    if (dev.get("allocated_bytes"), dev.get("reserved_bytes")) != (allocated, reserved):
        out.append(f"{label}: the framework says allocated {dev.get('allocated_bytes')} and reserved "
                   f"{dev.get('reserved_bytes')} on device {device}; the program saw {allocated} and {reserved}")
    # PyTorch lists its segments and blocks; CuPy's pool says none.
    if fw.get("name") == "torch" and (active, total) != (allocated, reserved) and not fw.get("truncated"):
        out.append(f"{label}: its active blocks add up to {active} and its segments to {total}, "
                   f"not {allocated} and {reserved}")
    unjoined = [s.get("address") for s in segs if s.get("allocation") is not True]
    if unjoined:
        out.append(f"{label}: {len(unjoined)} of {len(segs)} segments joined to no driver allocation "
                   f"({[hex(a) for a in unjoined[:4] if isinstance(a, int)]})")
    return out


def site_label(snap: dict[str, Any], stack_id: Any) -> str:
    """The site label of a stack of the snapshot ("" when none)."""
    st = next((s for s in snap.get("stacks") or [] if s.get("id") == stack_id), None)
    return ((st or {}).get("site") or {}).get("label") or ""


def growth_site_problems(snap: dict[str, Any], label: str, file: str, line: int, steps: int) -> list[str]:
    """The diagnosis's growing site is at file:line (its label's first
    "(file:line)"), and grew over at least `steps` marked steps."""
    numbers = (snap.get("diagnosis") or {}).get("numbers") or {}
    stack = numbers.get("growth_top_stack")
    if not stack:
        return [f"{label}: the diagnosis names no growing site, {file}:{line} expected"]
    site = site_label(snap, stack)
    m = re.search(r"\(([^()]*):(\d+)\)", site)
    if m is None or (os.path.basename(m.group(1)), int(m.group(2))) != (file, line):
        return [f"{label}: the growing site is {site!r}, {file}:{line} expected"]
    got = numbers.get("growth_top_steps") or 0
    if got < steps:
        return [f"{label}: the growing site grew over {got} marked steps, at least {steps} expected"]
    return []


def mapped_entries(snap: dict[str, Any]) -> list[Entry]:
    """The VMM mappings (vmm.mappings), as entries of kind "mapped": where a
    framework maps a handle of its own for each buffer (JAX 0.11's platform
    allocator on CUDA 13), the buffer's address is the mapping's."""
    rows = (snap.get("vmm") or {}).get("mappings") or []
    return [(int(m["address"], 16), m["size"], "mapped", m["device"]) for m in rows]


def device_of(snap: dict[str, Any], device: int) -> dict[str, Any] | None:
    return next((d for d in snap.get("devices") or [] if d.get("index") == device), None)


def granularity_of(snap: dict[str, Any], device: int) -> int:
    dev = device_of(snap, device)
    pages = (dev or {}).get("pages") or {}
    return pages.get("granularity") or 2 * MIB


def covered_pages(entries: list[Entry], device: int, g: int) -> int:
    """The pages of granularity g that the device-kind allocations touch."""
    pages: set[int] = set()
    for addr, size, kind, dev in entries:
        if kind == "device" and dev == device and size > 0:
            pages.update(range(addr // g, (addr + size - 1) // g + 1))
    return len(pages)


def footprint(snap: dict[str, Any], device: int) -> int:
    """What the snapshot says the process holds of the device's memory."""
    dev = device_of(snap, device)
    g = granularity_of(snap, device)
    entries = [e for e in snapshot_entries(snap) if e[3] == device]
    pages = ((dev or {}).get("pages") or {}).get("pages")
    total = (pages if pages is not None else covered_pages(entries, device, g)) * g
    total += sum(size for _, size, kind, _ in entries if kind == "vmm")
    total += sum(-(-size // g) * g for _, size, kind, _ in entries if kind == "array")
    pools = (dev or {}).get("pools")
    if pools is not None:
        total += pools["reserved_bytes"]
    else:
        total += sum(-(-size // g) * g for _, size, kind, _ in entries if kind == "async")
    return total


def check_live(label: str, want: list[Entry], kinds: set[str], snap: dict[str, Any]) -> list[str]:
    got = collections.Counter(e for e in snapshot_entries(snap) if e[2] in kinds)
    want_c = collections.Counter(want)
    bad = [e for e in want if e[2] not in kinds]
    if bad:
        return [f"{label}: LIVE lines of kinds COVER leaves out: {[fmt_entry(e) for e in bad[:3]]}"]
    if got == want_c:
        return []
    missing = list((want_c - got).elements())
    extra = list((got - want_c).elements())
    return [f"{label}: live set differs ({sum(want_c.values())} expected, {sum(got.values())} in the "
            f"snapshot); missing: {[fmt_entry(e) for e in missing[:5]]}"
            f"{' ...' if len(missing) > 5 else ''}; not expected: {[fmt_entry(e) for e in extra[:5]]}"
            f"{' ...' if len(extra) > 5 else ''}"]


def check_pages(label: str, snap: dict[str, Any]) -> list[str]:
    problems = []
    entries = snapshot_entries(snap)
    for dev in snap.get("devices") or []:
        pages = dev.get("pages") or {}
        if not pages:
            continue
        mine = covered_pages(entries, dev["index"], pages["granularity"])
        if pages.get("pages") != mine:
            problems.append(f"{label}: device {dev['index']} pages.pages is {pages.get('pages')}, "
                            f"its device allocations cover {mine} pages of {fmt_bytes(pages['granularity'])}")
    return problems


def check_unknown_frees(label: str, snap: dict[str, Any]) -> list[str]:
    """No program of the suite frees what it did not allocate: a free the
    tracer could not match is one it missed an allocation of (a free of NULL,
    cudaFree(0), frees nothing and is no such free)."""
    n = (snap.get("stats") or {}).get("unknown_frees", 0)
    return [f"{label}: stats.unknown_frees is {n}: the tracer saw frees of memory it never saw allocated"] if n else []


def check_meminfo(label: str, device: int, free: int, total: int, snap: dict[str, Any],
                  tolerance: int) -> list[str]:
    dev = device_of(snap, device)
    if dev is None or dev.get("free_bytes") is None:
        return []
    problems = []
    if dev.get("total_bytes") is not None and dev["total_bytes"] != total:
        problems.append(f"{label}: the snapshot says device {device} has {dev['total_bytes']} bytes, "
                        f"cudaMemGetInfo {total}")
    if abs(dev["free_bytes"] - free) > tolerance:
        problems.append(f"{label}: the snapshot says {fmt_bytes(dev['free_bytes'])} free on device "
                        f"{device}, cudaMemGetInfo right after {fmt_bytes(free)} "
                        f"(tolerance {fmt_bytes(tolerance)})")
    return problems


@dataclass
class Delta:
    label: str
    device: int
    observed: int
    traced: int


def deltas(exp: Expectations, snaps: dict[str, dict[str, Any]]) -> list[Delta]:
    """Free-bytes deltas from each device's baseline, against the footprint
    deltas of the snapshots."""
    out: list[Delta] = []
    devices = sorted({d for _, d in exp.meminfo})
    for device in devices:
        labels = [lb for lb in exp.order if (lb, device) in exp.meminfo and lb in snaps]
        if len(labels) < 2:
            continue
        base = labels[0]
        base_free = exp.meminfo[(base, device)][0]
        base_fp = footprint(snaps[base], device) + exp.extra.get((base, device), 0)
        for label in labels[1:]:
            observed = base_free - exp.meminfo[(label, device)][0]
            traced = footprint(snaps[label], device) + exp.extra.get((label, device), 0) - base_fp
            out.append(Delta(label, device, observed, traced))
    return out


def tracer_messages(stderr: str, leak_check: bool) -> list[str]:
    """Lines from the tracer other than its out-of-memory reports (and, with
    the leak check on, its leak report)."""
    bad = []
    in_report = False
    for line in stderr.splitlines():
        if not line.startswith("gpumemtrace:"):
            in_report = False
            continue
        if line.startswith(("gpumemtrace: out of memory:", "gpumemtrace: out of memory, recovered:")):
            in_report = True
            continue
        if in_report and line.startswith("gpumemtrace:   "):
            continue
        in_report = False
        if leak_check:
            continue
        bad.append(line)
    return bad


def check(exp: Expectations, snapdir: str, tolerance: int = DEFAULT_TOLERANCE,
          status: int | None = None, expect_status: int = 0, stderr: str = "",
          leak_check: bool = False) -> Outcome:
    """Every check of one run; a run that printed SKIP is skipped."""
    problems = list(exp.problems)
    if status is not None and status != expect_status:
        tail = "\n".join(stderr.splitlines()[-8:])
        problems.append(f"exit status {status}, {expect_status} expected; stderr ends:\n{tail}")
    if exp.skip is not None:
        if problems:
            return Outcome("fail", problems, f"skip: {exp.skip}", exp.notes)
        return Outcome("skip", [], exp.skip, exp.notes)
    if exp.test is None or exp.pid is None:
        problems.append("no TEST line: the program did not start, or printed nothing")
        return Outcome("fail", problems, "no output", exp.notes)
    if not exp.order:
        problems.append("no checkpoint: nothing was checked")
    snaps, more = resolve(exp, snapdir)
    problems += more

    oom_expected = any(w == "@oom" for w in exp.checkpoints.values())
    oom_files = snapshots_of(snapdir, exp.pid, "oom")
    if oom_files and not oom_expected and not exp.recovered:
        problems.append(f"{len(oom_files)} out-of-memory snapshot(s), none expected: "
                        f"{[os.path.basename(p) for p in oom_files]}")

    matched = 0
    for label in exp.order:
        snap = snaps.get(label)
        if snap is None:
            continue
        if label in exp.cover:
            problems += check_live(label, exp.live.get(label, []), exp.cover[label], snap)
            matched += len(exp.live.get(label, []))
        problems += check_pages(label, snap)
        problems += check_unknown_frees(label, snap)
        for (lb, device), (free, total) in exp.meminfo.items():
            if lb == label:
                problems += check_meminfo(label, device, free, total, snap, tolerance)

    worst = None
    for d in deltas(exp, snaps):
        if abs(d.observed - d.traced) > tolerance:
            problems.append(f"{d.label}: device {d.device}'s free bytes fell by {fmt_bytes(d.observed)} "
                            f"since the first checkpoint, the snapshots' footprint grew by "
                            f"{fmt_bytes(d.traced)} (off by {fmt_bytes(d.observed - d.traced)}, "
                            f"tolerance {fmt_bytes(tolerance)})")
        if worst is None or abs(d.observed) > abs(worst.observed):
            worst = d

    for label, device, reserved in exp.pools:
        snap = snaps.get(label)
        pools = (device_of(snap, device) or {}).get("pools") if snap else None
        if snap is not None and (pools is None or pools.get("reserved_bytes") != reserved):
            problems.append(f"{label}: device {device}'s pools say "
                            f"{None if pools is None else pools.get('reserved_bytes')} reserved, "
                            f"the program's pool {reserved}")
    for label, device, kinds, want in exp.byte_sums:
        snap = snaps.get(label)
        if snap is None:
            continue
        got = sum(s for _, s, k, d in snapshot_entries(snap) if k in kinds and d == device)
        if got != want:
            problems.append(f"{label}: {'+'.join(sorted(kinds))} bytes on device {device} are {got} "
                            f"in the snapshot, {want} expected ({fmt_bytes(got)} vs {fmt_bytes(want)})")
    for label, addr, kinds, device, least in exp.has:
        snap = snaps.get(label)
        if snap is None:
            continue
        at = [e for e in snapshot_entries(snap) + mapped_entries(snap) if e[0] == addr]
        if not any(k in kinds and d == device and s >= least for _, s, k, d in at):
            problems.append(f"{label}: no allocation of {'/'.join(sorted(kinds))} at {hex(addr)} on "
                            f"device {device} of at least {least} bytes (there: {[fmt_entry(e) for e in at]})")
    for label, addr, function, file, line in exp.pyframes:
        snap = snaps.get(label)
        if snap is None:
            continue
        stacks = {st["id"]: st for st in snap.get("stacks", [])}
        at = [a for a in snap.get("allocations", []) if int(a["address"], 16) == addr]
        frames = stacks.get(at[0]["stack"], {}).get("frames", []) if at else []
        py = [fr for fr in frames if fr.get("python") is True]
        got = (py[0].get("function"), os.path.basename(py[0].get("file") or ""), py[0].get("line")) if py else None
        if got != (function, file, line):
            problems.append(f"{label}: the innermost Python frame of the allocation at {hex(addr)} is "
                            f"{got if at else 'missing: no allocation there'}, {(function, file, line)} expected")
    for label, addr in exp.gone:
        snap = snaps.get(label)
        if snap is not None and any(e[0] == addr for e in snapshot_entries(snap) + mapped_entries(snap)):
            problems.append(f"{label}: {hex(addr)} is still live in the snapshot")
    for label, least in exp.reservations:
        snap = snaps.get(label)
        if snap is None:
            continue
        rows = (snap.get("vmm") or {}).get("reservations") or []
        if not any(r.get("size", 0) >= least for r in rows):
            problems.append(f"{label}: no VMM reservation of at least {fmt_bytes(least)} "
                            f"(reservations: {[(r.get('address'), r.get('size')) for r in rows]})")
    oom_note = ""
    for label, api, size, device, mode in exp.ooms:
        snap = snaps.get(label)
        if snap is None:
            continue
        fr = snap.get("failed_request") or {}
        if snap.get("reason") != "oom":
            problems.append(f"{label}: the snapshot's reason is {snap.get('reason')!r}, not oom")
        if api != "*" and fr.get("api") != api:
            problems.append(f"{label}: failed_request.api is {fr.get('api')!r}, {api!r} expected")
        if fr.get("device") != device:
            problems.append(f"{label}: failed_request.device is {fr.get('device')!r}, {device} expected")
        got = fr.get("size")
        if not isinstance(got, int) or (got != size if mode == "exact" else got < size):
            problems.append(f"{label}: failed_request.size is {got!r}, "
                            f"{'' if mode == 'exact' else 'at least '}{size} expected")
        verdict = (snap.get("diagnosis") or {}).get("verdict")
        oom_note = f"oom: {fr.get('api')} of {fmt_bytes(got or 0)} failed, verdict {verdict}"
    for label, name, primary in exp.verdicts:
        snap = snaps.get(label)
        if snap is None:
            continue
        diagnosis = snap.get("diagnosis") or {}
        names = [v.get("name") for v in diagnosis.get("verdicts", [])]
        if name not in names or (primary and diagnosis.get("verdict") != name):
            problems.append(f"{label}: verdict {name}{' (primary)' if primary else ''} expected, the "
                            f"diagnosis says {names}: {diagnosis.get('summary')}")
    for label, name in exp.no_verdicts:
        snap = snaps.get(label)
        if snap is None:
            continue
        diagnosis = snap.get("diagnosis") or {}
        if name in [v.get("name") for v in diagnosis.get("verdicts", [])]:
            problems.append(f"{label}: verdict {name} not expected, the diagnosis lists it: "
                            f"{diagnosis.get('summary')}")
    for label, file, line, steps in exp.growth_sites:
        snap = snaps.get(label)
        if snap is not None:
            problems += growth_site_problems(snap, label, file, line, steps)
    for label, name, first in exp.remedies:
        snap = snaps.get(label)
        if snap is None:
            continue
        names = [r.get("name") for r in (snap.get("diagnosis") or {}).get("remedies") or []]
        if name not in names or (first and names[0] != name):
            problems.append(f"{label}: remedy {name}{' (first)' if first else ''} expected, the "
                            f"diagnosis offers {names}")
    for label, fits in exp.replays:
        snap = snaps.get(label)
        if snap is None:
            continue
        rp = (snap.get("diagnosis") or {}).get("replay") or {}
        if rp.get("replayed") is not True:
            problems.append(f"{label}: the diagnosis's replay did not answer: {rp.get('why') or 'no replay'}")
        elif rp.get("fits") is not fits:
            problems.append(f"{label}: the replay with expandable segments says the request "
                            f"{'does not fit' if fits else 'fits'} (peak reserved {rp.get('peak_reserved_bytes')} "
                            f"of {rp.get('device_bytes')}), {'fits' if fits else 'does not fit'} expected")
    for label, device, allocated, reserved in exp.frameworks:
        snap = snaps.get(label)
        if snap is None:
            continue
        problems += framework_problems(snap, label, device, allocated, reserved)
    for label, device, nbytes in exp.limits:
        snap = snaps.get(label)
        if snap is None:
            continue
        fw = snap.get("framework")
        dev = next((d for d in (fw or {}).get("devices") or [] if d.get("device") == device), None) \
            if isinstance(fw, dict) else None
        if dev is None:
            problems.append(f"{label}: no framework section for device {device} in the snapshot")
        elif dev.get("limit_bytes") != nbytes:
            problems.append(f"{label}: the framework's limit on device {device} is {dev.get('limit_bytes')}, "
                            f"{nbytes} expected")
    for label, count, nbytes in exp.leaks:
        snap = snaps.get(label)
        if snap is None:
            continue
        counted = (((snap.get("leaks") or {}).get("totals") or {}).get("counted")) or {}
        if (counted.get("count"), counted.get("bytes")) != (count, nbytes):
            problems.append(f"{label}: the leak check counts {counted.get('count')} leaks of "
                            f"{counted.get('bytes')} bytes, {count} of {nbytes} expected")
    for device, g in exp.granularity.items():
        for label, snap in snaps.items():
            pages = (device_of(snap, device) or {}).get("pages") or {}
            if pages.get("granularity_known") and pages.get("granularity") != g:
                problems.append(f"{label}: the snapshot's granularity on device {device} is "
                                f"{pages.get('granularity')}, the driver's {g}")
                break

    bad = tracer_messages(stderr, leak_check)
    if bad:
        problems.append(f"unexpected messages from the tracer: {bad[:3]}")

    parts = [f"{len(snaps)} snapshots, {matched} live entries"]
    if worst is not None:
        parts.append(f"Δfree {fmt_bytes(worst.observed)} = footprint {fmt_bytes(worst.traced)}"
                     if worst.observed == worst.traced else
                     f"Δfree {fmt_bytes(worst.observed)} ~ footprint {fmt_bytes(worst.traced)}")
    if oom_note:
        parts.append(oom_note)
    for label, count, nbytes in exp.leaks:
        parts.append(f"leaks {count} of {fmt_bytes(nbytes)}")
    return Outcome("fail" if problems else "pass", problems, "; ".join(parts), exp.notes)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("stdout", help="the program's standard output, saved")
    ap.add_argument("snapdir", help="GPUMEMTRACE_DIR of the run")
    ap.add_argument("--stderr", help="the program's standard error, saved")
    ap.add_argument("--status", type=int, help="the program's exit status")
    ap.add_argument("--expect-status", type=int, default=0)
    ap.add_argument("--tolerance", type=int, default=DEFAULT_TOLERANCE)
    ap.add_argument("--leak-check", action="store_true")
    args = ap.parse_args(argv)
    with open(args.stdout, encoding="utf-8") as f:
        exp = parse(f.read())
    stderr = ""
    if args.stderr:
        with open(args.stderr, encoding="utf-8") as f:
            stderr = f.read()
    out = check(exp, args.snapdir, args.tolerance, args.status, args.expect_status, stderr,
                args.leak_check)
    print(f"{out.status}: {out.summary}")
    for p in out.problems:
        print(f"- {p}")
    return {"pass": 0, "skip": 77}.get(out.status, 1)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
