#!/usr/bin/env python3
"""gpumemtrace whatif (docs/whatif.md) on runs of the PyTorch double
(fake_torch/, whose allocator follows PyTorch's segment sizes, splitting,
best fit and cache release) on the simulated GPU:

- faithful: a run of mixed sizes, frees and empty_cache() calls to an
  out-of-memory, replayed under its own settings: every segment event of
  its history matched (the count printed is the history's), the failing
  request does not fit, as in the run;
- late: the same with a history of the last 40 entries: still faithful,
  the state before it rebuilt and said (assumed);
- expandable: the same program run with expandable_segments:True (the
  double's expandable segments are PyTorch's): faithful under its own
  settings, every segment_map and segment_unmap matched (the last requests
  reserve a second range of addresses, PyTorch's way when the first has no
  room left), the failing request does not fit;
- fragmentation: freed blocks between live ones, then 128 MiB asked:
  under the run's settings it does not fit; under expandable_segments:True
  the replay says it fits — and the double run with that setting does not
  run out of memory, its max_memory_reserved() the peak the replay
  predicted; under --alloc-conf "" (PyTorch's defaults, named so in its
  heading, not a bare ":") the answers are the run's own; and the exit
  snapshot of that run, which fit, judged on the device bytes PyTorch was
  told at exit, foretells the run under the defaults: it fails at the
  request that run ran out at, with its peak;
- the diagnosis cites the replay: the fragmentation run's snapshot offers
  expandable_segments with the replay's peak reserved and device bytes
  (whatif's); pinned: 5 MiB tensors, every other freed, whose holes leave
  no whole page of an expandable segment to unmap — not offered, the
  verdict says the replay's no, and the double run with the setting runs
  out too;
- random: programs of random requests, frees, caught out-of-memory errors
  and empty_cache() calls, with and without expandable segments, each
  replayed faithfully;
- calls: the program's empty_cache() calls placed in the history by
  PyTorch's counts (the bootstrap's): one that unmapped nothing under
  expandable segments (15 MiB freed beside a live 4 MiB in one page) is
  placed after the free, and the replay under the defaults makes it — 38
  MiB at the peak, the defaults run's own, where without it the cached 16
  MiB segment stays (54); one after a caught out-of-memory is placed after
  its oom entry (the out-of-memory count); one followed by
  reset_accumulated_memory_stats() is not placed (its counts are gone),
  nor one during which a request was served (it could be placed on the
  wrong side of it), nor any where memory_stats() has no num_ooms;
  random programs each predicted exactly from the other setting's run, two
  that were not before: seed 1 under expandable segments (1937768448 bytes
  for 1895825408, a call that unmapped nothing), seed 29 under the
  defaults (2596274176 for 2598371328, before the replay gave freed
  addresses again);
- fraction: a run under set_per_process_memory_fraction (PyTorch refuses
  at its allowed maximum with the device three quarters free): replayed
  with that limit, faithful; expandable segments fit under it, at the peak
  the double's run with them reached, and that run's exit snapshot carries
  the fraction too (under the defaults its 280 MiB fails, as it did); a
  per_process_memory_fraction named in --alloc-conf replaces it;
- larger device: a run under expandable segments whose request is larger
  than the device, asked about 100 GiB (--device-bytes): it fits;
- edited: the snapshot's history with one segment's size changed: not
  faithful, where, and no answers (exit 1);
- bad input: a file that is not JSON, a snapshot without PyTorch's
  history or with one of a device ordinal no machine has, a CONF PyTorch
  would refuse or that names another allocator, an unknown option: one
  line on stderr naming it, exit 2, nothing on stdout.

Usage: test_whatif.py LAUNCHER SOURCE_ROOT"""

from __future__ import annotations

import glob
import json
import os
import re
import subprocess
import sys
import tempfile
from typing import List

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import test_torch_double as td  # noqa: E402 - its environment, runner and checks

check = td.check

MIXED = r'''
import random
import torch
MIB = 1 << 20
random.seed(7)
live = []
for step in range(60):
    n = random.choice([100, 4000, 300 * 1024, 900 * 1024, 2 * MIB + 5, 3 * MIB, 7 * MIB, 12 * MIB + 100,
                       33 * MIB, 64 * MIB])
    live.append(torch.empty(n))
    if len(live) > 6:
        del live[random.randrange(len(live))]
    if step % 17 == 16:
        torch.cuda.empty_cache()
try:
    big = [torch.empty(200 * MIB) for _ in range(8)]
except torch.cuda.OutOfMemoryError:
    pass
'''

# The double's fragmentation (td.FRAGMENTED), saying whether it ran out and
# its peak of reserved bytes.
FRAGMENTED = td.FRAGMENTED.replace("except torch.cuda.OutOfMemoryError:\n    pass\n",
                                   "except torch.cuda.OutOfMemoryError:\n    print('OOM')\n") + \
    "print('PEAK', torch.cuda.max_memory_reserved())\n"


def whatif(launcher: str, env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([launcher, "whatif", *args], env=env, capture_output=True, text=True, timeout=120)


def oom_run(launcher: str, env: dict, tmp: str, text: str, name: str) -> str:
    """The oom snapshot of a run, or "" (a failed check)."""
    r = td.run(launcher, env, tmp, text, name, on="oom")
    ooms = glob.glob(os.path.join(tmp, "gpumemtrace.*.oom.*.json"))
    check(len(ooms) == 1, f"{name}: one oom snapshot", (r.stdout, r.stderr[-400:], ooms))
    return ooms[0] if len(ooms) == 1 else ""


def segment_list(path: str) -> list:
    """The segment events of the snapshot's history up to its last oom."""
    with open(path, encoding="utf-8") as f:
        events = json.load(f)["framework"]["allocator_history"][0]["events"]
    last = max(i for i, e in enumerate(events) if e[0] == "oom")
    return [e for e in events[:last + 1] if e[0].startswith("segment_")]


def segment_events(path: str) -> int:
    return len(segment_list(path))


def section(out: str, title: str) -> str:
    """The lines of one setting's answers."""
    m = re.search(r"^" + re.escape(title) + r"[^\n]*\n((?:  [^\n]*\n)*)", out, re.M)
    return m.group(1) if m else ""


def test_faithful(launcher: str, env: dict) -> None:
    for history, name, conf in (("100000", "mixed", ""), ("40", "late", ""),
                                ("100000", "expandable", "expandable_segments:True")):
        with tempfile.TemporaryDirectory(prefix="gmt-whatif-") as tmp:
            run_env = dict(env, GPUMEMTRACE_HISTORY=history, **({"PYTORCH_CUDA_ALLOC_CONF": conf} if conf else {}))
            path = oom_run(launcher, run_env, tmp, MIXED, f"{name}.py")
            if not path:
                continue
            w = whatif(launcher, env, path)
            own = section(w.stdout, "the run's own settings")
            n = segment_events(path)
            kinds = {e[0] for e in segment_list(path)}
            check(w.returncode == 0 and f"faithful: the run's {n} segment events reproduced" in own and n > 0,
                  f"{name}: faithful, every segment event of the history ({n})", w.stdout + w.stderr)
            check(kinds == ({"segment_map", "segment_unmap"} if conf else {"segment_alloc", "segment_free"}),
                  f"{name}: the history's segment events are {'pages mapped and unmapped' if conf else 'segments'}",
                  kinds)
            check(re.search(r"the failing request \(#\d+, 200 MiB \(209715200 bytes\)\): does not fit", own)
                  is not None, f"{name}: the failing request does not fit, as in the run", own)
            assumed = "assumed: the history does not reach back to PyTorch's start" in own
            check(assumed == (name == "late"), f"{name}: what was assumed is said (only) for a late history",
                  own)


def run_and_replay(launcher: str, env: dict, tmp: str, text: str, name: str) -> tuple:
    """The run's oom snapshot ("" when not one), whatif's answer under
    expandable_segments:True, and that setting's lines."""
    path = oom_run(launcher, env, tmp, text, name)
    if not path:
        return "", None, ""
    w = whatif(launcher, env, path, "--alloc-conf", "expandable_segments:True")
    return path, w, section(w.stdout, "expandable_segments:True:")


def test_fragmentation(launcher: str, env: dict) -> None:
    predicted = own_peak = None
    with tempfile.TemporaryDirectory(prefix="gmt-whatif-") as tmp:
        path, w, exp = run_and_replay(launcher, env, tmp, FRAGMENTED, "frag.py")
        if not path:
            return
        w = whatif(launcher, env, path, "--alloc-conf", "expandable_segments:True", "--alloc-conf", "")
        own = section(w.stdout, "the run's own settings")
        exp = section(w.stdout, "expandable_segments:True:")
        defaults = section(w.stdout, 'PyTorch\'s defaults (--alloc-conf ""):')
        request = "the failing request (#11, 128 MiB (134217728 bytes))"
        check(w.returncode == 0 and "faithful:" in own and f"{request}: does not fit" in own,
              "fragmentation: faithful, the request does not fit under the run's settings", w.stdout + w.stderr)
        own_peak = number(own, "peak reserved")
        check(f"{request}: fits" in exp and "first request that fails: none" in exp,
              "fragmentation: under expandable_segments:True the replay says it fits", exp)
        diagnosis_cites(path, w.stdout, exp, True, "fragmentation")
        m = re.search(r"peak reserved: .* \((\d+) bytes\)", exp)
        predicted = int(m.group(1)) if m else None
        headings = [line for line in w.stdout.splitlines() if line and not line.startswith(" ")]
        check(headings[-2:] == ["expandable_segments:True:", 'PyTorch\'s defaults (--alloc-conf ""):'] and
              ":" not in [line.strip() for line in headings],
              'fragmentation: --alloc-conf "" answered under "PyTorch\'s defaults (--alloc-conf \"\")", not ":"',
              headings)
        check(defaults != "" and defaults == own.replace(own.splitlines()[0] + "\n", "", 1),
              "fragmentation: PyTorch's defaults answer as the run's own settings (which they are)",
              (defaults, own))
    with tempfile.TemporaryDirectory(prefix="gmt-whatif-") as tmp:
        r = td.run(launcher, dict(env, PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True"), tmp, FRAGMENTED,
                   "frag.py", on="oom,exit")
        # (the driver may fail once: the double then releases its cache
        # and maps again, as PyTorch does)
        check(r.returncode == 0 and "STATE" in r.stdout and "OOM" not in r.stdout and "OOM" in FRAGMENTED,
              "fragmentation: the double run with expandable_segments:True fits too (no out-of-memory raised)",
              (r.returncode, r.stdout, r.stderr[-400:]))
        m = re.search(r"^PEAK (\d+)$", r.stdout, re.M)
        check(m is not None and predicted is not None and int(m.group(1)) == predicted,
              "fragmentation: its max_memory_reserved() is the peak the replay predicted", (m and m.group(1), predicted))
        # Its exit snapshot holds the device bytes PyTorch was told at exit:
        # replayed under the defaults, the run that ran out is foretold — the
        # same request, the same peak.
        exits = glob.glob(os.path.join(tmp, "gpumemtrace.*.exit.*.json"))
        w = whatif(launcher, env, *exits[:1], "--alloc-conf", "")
        defaults = section(w.stdout, 'PyTorch\'s defaults (--alloc-conf ""):')
        check(len(exits) == 1 and w.returncode == 0 and
              "PyTorch's reserved bytes and the device's free bytes when it handed over its state" in w.stdout and
              "first request that fails: #11, 128 MiB (134217728 bytes)" in defaults and
              own_peak is not None and own_peak > 0 and number(defaults, "peak reserved") == own_peak,
              "fragmentation: from the exit snapshot of the run that fit, the defaults' run foretold (the request "
              "it ran out at, its peak)", (exits, own_peak, w.stdout + w.stderr))


def number(text: str, label: str) -> int:
    """The bytes whatif printed after label, or -1."""
    m = re.search(re.escape(label) + r"[^\n(]*\((\d+) bytes\)", text)
    return int(m.group(1)) if m else -1


def diagnosis_cites(path: str, out: str, exp: str, fits: bool, name: str) -> None:
    """The snapshot's diagnosis cites the replay whatif prints: the same
    answer, peak reserved and device bytes; expandable_segments offered
    with them where it fits, not offered where it does not."""
    with open(path, encoding="utf-8") as f:
        dg = json.load(f)["diagnosis"]
    rp, nums = dg.get("replay") or {}, dg.get("numbers") or {}
    peak, device = number(exp, "peak reserved:"), number(out, "device bytes of the run:")
    check(dg.get("verdict") == "allocator_fragmentation" and rp.get("replayed") is True and rp.get("fits") is fits and
          rp.get("setting") == "expandable_segments:True" and
          (nums.get("replay_fits"), nums.get("replay_peak_reserved_bytes"), nums.get("replay_device_bytes")) ==
          (fits, peak, device) and peak > 0 and device > 0,
          f"{name}: the diagnosis's replay is whatif's ({'fits' if fits else 'does not fit'}, peak, device bytes)",
          (dg.get("verdict"), rp, peak, device))
    offered = [x for x in dg.get("remedies") or [] if x["name"] == "expandable_segments"]
    if fits:
        def human(b: int) -> str:
            return f"{b >> 20} MiB" if b < 1 << 30 else f"{b / (1 << 30):.2f} GiB"
        want = f"(replayed: fits, peak reserved {human(peak)} of {human(device)})"
        check(len(offered) == 1 and offered[0]["text"].endswith(want) and
              "replay_peak_reserved_bytes" in offered[0]["rests_on"],
              f"{name}: expandable_segments offered with the replay's numbers", (offered, want))
    else:
        detail = dg["verdicts"][0]["detail"]
        check(not offered and "replayed with expandable segments it would not have helped" in detail and
              "replay_fits" in dg["verdicts"][0]["rests_on"],
              f"{name}: expandable_segments not offered, the verdict says the replay's no", (offered, detail))


# 5 MiB tensors fill 20 MiB segments four apiece (1 GiB device: 180 of them,
# 900 MiB), every other one freed: 450 MiB free inside the segments in
# 5 MiB pieces, 128 MiB asked. With expandable segments the same tensors
# lie four to each 20 MiB page, and every page keeps two: nothing to
# unmap, the request fails as well.
PINNED = r'''
import torch
MIB = 1 << 20
keep = [torch.empty(5 * MIB) for _ in range(180)]
del keep[1::2]
try:
    torch.empty(128 * MIB)
except torch.cuda.OutOfMemoryError:
    print('OOM')
'''


def test_no_help(launcher: str, env: dict, source: str) -> None:
    with tempfile.TemporaryDirectory(prefix="gmt-whatif-") as tmp:
        path, w, exp = run_and_replay(launcher, env, tmp, PINNED, "pinned.py")
        if not path:
            return
        check(w.returncode == 0 and "faithful:" in w.stdout and "128 MiB (134217728 bytes)): does not fit" in exp,
              "no help: under expandable_segments:True the replay says it does not fit", w.stdout + w.stderr)
        diagnosis_cites(path, w.stdout, exp, False, "no help")
        td.schema_ok(source, [path], "no help")
        viewer_says(launcher, env, tmp, path)
    with tempfile.TemporaryDirectory(prefix="gmt-whatif-") as tmp:
        r = td.run(launcher, dict(env, PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True"), tmp, PINNED,
                   "pinned.py", on="oom")
        check(r.returncode == 0 and "OOM" in r.stdout,
              "no help: the double run with expandable_segments:True runs out too",
              (r.returncode, r.stdout, r.stderr[-400:]))


def viewer_says(launcher: str, env: dict, tmp: str, path: str) -> None:
    """The viewer shows what the diagnosis's replay said: the verdict's no
    in the terminal; where the replay did not answer, why (terminal and
    HTML); a replay that is not an answer's form, one line naming it."""
    v = subprocess.run([launcher, "view", "--width", "200", path], env=env, capture_output=True, text=True,
                       timeout=120)
    check(v.returncode == 0 and "replayed with expandable segments it would not have helped" in v.stdout and
          "not replayed" not in v.stdout, "no help: the terminal summary gives the replay's no", v.stdout[-1500:])
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    doc["diagnosis"]["replay"].update(replayed=False, why="the device bytes of the run are not known", fits=None)
    edited = os.path.join(tmp, "not-replayed.json")
    with open(edited, "w", encoding="utf-8") as f:
        json.dump(doc, f)
    html = os.path.join(tmp, "report.html")
    subprocess.run([launcher, "view", "--html", html, edited], env=env, capture_output=True, timeout=120)
    page = open(html, encoding="utf-8").read() if os.path.exists(html) else ""
    v = subprocess.run([launcher, "view", "--width", "200", edited], env=env, capture_output=True, text=True,
                       timeout=120)
    why = "expandable_segments:True: the device bytes of the run are not known"
    check(v.returncode == 0 and f"not replayed: {why}" in v.stdout and
          "Not replayed (expandable_segments:True): the device bytes of the run are not known" in page,
          "not replayed: the viewer says why, terminal and HTML", v.stdout[-1500:])
    doc["diagnosis"]["replay"]["replayed"] = "yes"
    with open(edited, "w", encoding="utf-8") as f:
        json.dump(doc, f)
    v = subprocess.run([launcher, "view", edited], env=env, capture_output=True, text=True, timeout=120)
    lines = v.stderr.strip().splitlines()
    check(v.returncode != 0 and len(lines) == 1 and "/diagnosis/replay/replayed" in lines[0] and
          "not-replayed.json" in lines[0], "a replay not of its form: one line naming it", v.stderr[-600:])


# Random programs on the double: tensors of many sizes made and freed, an
# out-of-memory caught now and then and the program going on, empty_cache()
# calls (EMPTY), then more than the device. The seeds below were not
# replayed faithfully before three fixes: an empty_cache() followed by a
# request the cache served taken for that request's release (defaults:
# 2, 15, 16); under expandable segments the reservation a failed request
# makes placed inside another (1, 2, 3; with empty_cache() 9, 13) or not
# moved to where the run maps into it (17; with empty_cache() 7); with
# empty_cache() the unmaps before a request that needed one page more
# taken for its release, as its segment would not have fitted (28), and a
# reservation the release freed made again elsewhere than the driver's
# freed address (59).
RANDOM = r'''
import random, sys
import torch
MIB = 1 << 20
rng = random.Random(int(sys.argv[1]))
EMPTY = sys.argv[2] == "empty"
live = []
sizes = [1, 100, 513, 4000, 300 * 1024, 1 << 20, (1 << 20) + 1, 900 * 1024, 2 * MIB + 5, 3 * MIB, 7 * MIB,
         12 * MIB + 100, 19 * MIB, 20 * MIB, 21 * MIB, 33 * MIB, 64 * MIB, 130 * MIB, 250 * MIB]
for step in range(300):
    r = rng.random()
    if r < 0.55:
        try:
            live.append(torch.empty(rng.choice(sizes)))
        except torch.cuda.OutOfMemoryError:
            pass
    elif r < 0.95 and live:
        del live[rng.randrange(len(live))]
    elif r >= 0.95 and EMPTY:
        torch.cuda.empty_cache()
try:
    big = [torch.empty(300 * MIB) for _ in range(8)]
except torch.cuda.OutOfMemoryError:
    pass
'''


def test_random(launcher: str, env: dict) -> None:
    for seed, mode, conf in ((2, "empty", ""), (15, "empty", ""), (16, "empty", ""),
                             (1, "keep", "expandable_segments:True"), (2, "keep", "expandable_segments:True"),
                             (3, "keep", "expandable_segments:True"), (17, "keep", "expandable_segments:True"),
                             (7, "empty", "expandable_segments:True"), (9, "empty", "expandable_segments:True"),
                             (13, "empty", "expandable_segments:True"), (28, "empty", "expandable_segments:True"),
                             (59, "empty", "expandable_segments:True")):
        name = f"random {seed} {mode}{' ' + conf if conf else ''}"
        with tempfile.TemporaryDirectory(prefix="gmt-whatif-") as tmp:
            script = os.path.join(tmp, "random.py")
            with open(script, "w", encoding="utf-8") as f:
                f.write(RANDOM)
            run_env = dict(env, PYTORCH_CUDA_ALLOC_CONF=conf) if conf else env
            subprocess.run([launcher, "run", "--dir", tmp, "--snapshot-on", "oom", "--", sys.executable, script,
                            str(seed), mode], env=run_env, cwd=tmp, capture_output=True, timeout=300)
            ooms = sorted(glob.glob(os.path.join(tmp, "gpumemtrace.*.oom.*.json")), key=os.path.getmtime)
            if not ooms:
                check(False, f"{name}: an oom snapshot")
                continue
            w = whatif(launcher, env, ooms[-1])
            check(w.returncode == 0 and "  faithful: " in w.stdout, f"{name}: replayed faithfully",
                  w.stdout[-600:] + w.stderr[-300:])


# The bootstrap's places for the program's empty_cache() calls
# (tests/unit/test_replay.c's `unseen`, on the double): 15 MiB and 4 MiB,
# the 15 freed, a call, 18 MiB; then whatever argv[1] says.
CALLS = r'''
import sys
import torch
MIB = 1 << 20
c = torch.empty(15 * MIB)
a = torch.empty(4 * MIB)
del c
torch.cuda.empty_cache()
d = torch.empty(18 * MIB)
if sys.argv[1] == "oom":
    try:
        torch.empty(2000 * MIB)
    except torch.cuda.OutOfMemoryError:
        pass
    torch.cuda.empty_cache()
elif sys.argv[1] == "reset":
    torch.cuda.empty_cache()
    torch.cuda.reset_accumulated_memory_stats()
    for _ in range(8):
        e = torch.empty(MIB)
        del e
elif sys.argv[1] == "race":
    # Another thread's request in the middle of the call (the double's
    # lock lets the same thread in).
    allocator = torch.cuda._allocator()
    release = allocator.release_cached

    def racing():
        global r
        r = torch.empty(MIB)
        release()
    allocator.release_cached = racing
    torch.cuda.empty_cache()
print("PEAK", torch.cuda.max_memory_reserved())
'''


def calls_run(launcher: str, env: dict, tmp: str, text: str, args: List[str], conf: str) -> tuple:
    """(the exit snapshot's PyTorch history of device 0, its path, the
    peak the program printed) of a run under conf."""
    script = os.path.join(tmp, "calls.py")
    with open(script, "w", encoding="utf-8") as f:
        f.write(text)
    d = os.path.join(tmp, conf or "defaults")
    os.mkdir(d)
    r = subprocess.run([launcher, "run", "--dir", d, "--snapshot-on", "exit", "--", sys.executable, script, *args],
                       env=dict(env, PYTORCH_CUDA_ALLOC_CONF=conf, GPUMEMTRACE_HISTORY="1000000"), cwd=d,
                       capture_output=True, text=True, timeout=300)
    peak = re.search(r"^PEAK (\d+)$", r.stdout, re.M)
    paths = glob.glob(os.path.join(d, "gpumemtrace.*.exit.*.json"))
    check(peak is not None and len(paths) == 1 and "not counted" not in r.stderr,
          f"calls {args} {conf}: the run's peak and exit snapshot, no warning", (r.stdout, r.stderr[-600:], paths))
    if peak is None or len(paths) != 1:
        return {}, "", 0
    with open(paths[0], encoding="utf-8") as f:
        history = json.load(f)["framework"]["allocator_history"][0]
    return history, paths[0], int(peak.group(1))


def predicted_peak(launcher: str, env: dict, path: str, conf: str, calls: int = -1) -> int:
    """The peak whatif predicts under conf; where calls is given, its first
    line must say that many calls placed (none: nothing said)."""
    w = whatif(launcher, env, path, "--alloc-conf", conf)
    if calls >= 0:
        said = re.search(r"; the program's empty_cache\(\) calls placed in them: (\d+)$", w.stdout.split("\n")[0])
        check((int(said.group(1)) if said else 0) == calls, f"{path}: {calls} calls placed, said so", w.stdout[:300])
    peak = number(section(w.stdout, conf + ":"), "peak reserved")
    check(w.returncode == 0 and peak >= 0, f"{path}: replayed under {conf}", w.stdout[-800:] + w.stderr[-300:])
    return peak


def without_places(path: str, tmp: str) -> str:
    """A copy of the snapshot at path with its calls' places taken out (as
    a tracer that did not place them wrote it)."""
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    del doc["framework"]["allocator_history"][0]["empty_cache"]
    edited = os.path.join(tmp, "without.json")
    with open(edited, "w", encoding="utf-8") as f:
        json.dump(doc, f)
    return edited


def test_placed_calls(launcher: str, env: dict, source: str) -> None:
    with tempfile.TemporaryDirectory(prefix="gmt-whatif-") as tmp:
        history, path, _ = calls_run(launcher, env, tmp, CALLS, ["plain"], "expandable_segments:True")
        _, _, defaults_peak = calls_run(launcher, env, tmp, CALLS, ["plain"], "")
        if not path:
            return
        td.schema_ok(source, [path], "calls")
        check(history.get("empty_cache") == [5] and history["events"][4][0] == "free_completed" and
              not any(e[0].startswith("segment_unmap") for e in history["events"]),
              "calls: one that unmapped nothing placed after the free", history)
        check(defaults_peak == 38 << 20, "calls: the defaults run's peak is 38 MiB", defaults_peak)
        check(predicted_peak(launcher, env, path, "expandable_segments:False", calls=1) == defaults_peak,
              "calls: predicted under the defaults with the call made: the defaults run's peak")
        edited = without_places(path, tmp)
        check(predicted_peak(launcher, env, edited, "expandable_segments:False", calls=0) == 54 << 20,
              "calls: without its place the cached 16 MiB segment stays: 54 MiB")
    with tempfile.TemporaryDirectory(prefix="gmt-whatif-") as tmp:
        history, path, _ = calls_run(launcher, env, tmp, CALLS, ["oom"], "")
        places = history.get("empty_cache", [])
        check(len(places) == 2 and history["events"][places[1] - 1][0] == "oom",
              "calls: one after a caught out-of-memory placed after its oom entry", history)
    with tempfile.TemporaryDirectory(prefix="gmt-whatif-") as tmp:
        history, path, _ = calls_run(launcher, env, tmp, CALLS, ["reset"], "")
        check(path != "" and "empty_cache" not in history,
              "calls: none placed across reset_accumulated_memory_stats()", history.get("empty_cache"))
    with tempfile.TemporaryDirectory(prefix="gmt-whatif-") as tmp:
        history, path, _ = calls_run(launcher, dict(env, FAKE_TORCH_NO_OOM_COUNT="1"), tmp, CALLS, ["plain"], "")
        check(path != "" and "empty_cache" not in history,
              "calls: none placed where PyTorch does not count out-of-memory errors", history.get("empty_cache"))
    with tempfile.TemporaryDirectory(prefix="gmt-whatif-") as tmp:
        history, path, _ = calls_run(launcher, env, tmp, CALLS, ["race"], "")
        places = history.get("empty_cache", [])
        check(len(places) == 1 and history["events"][places[0] - 1][0] == "free_completed",
              "calls: one during which a request was served not placed, the one before it placed", history)
    # Random programs (RANDOM without its last requests, 8 GiB). Before the
    # calls were placed, seed 1's peak under expandable segments was
    # predicted from its defaults run as 1937768448 bytes; before the
    # replay gave freed addresses again, seed 29's under the defaults from
    # its expandable run as 2596274176 (a new segment placed above the
    # others broke a tie of best fit the other way).
    text = RANDOM[:RANDOM.index("try:\n    big")] + "print('PEAK', torch.cuda.max_memory_reserved())\n"
    for seed, peaks in (("1", (1902116864, 1895825408)), ("29", (2598371328, 2631925760))):
        with tempfile.TemporaryDirectory(prefix="gmt-whatif-") as tmp:
            run_env = dict(env, GMTSIM_MEMORY="8G")
            _, own_path, own_peak = calls_run(launcher, run_env, tmp, text, [seed, "empty"], "")
            _, exp_path, exp_peak = calls_run(launcher, run_env, tmp, text, [seed, "empty"],
                                              "expandable_segments:True")
            check((own_peak, exp_peak) == peaks, f"calls: random {seed}'s peaks, as measured", (own_peak, exp_peak))
            if own_path and exp_path and seed == "1":
                # Its 15 calls placed; without the places 7 are inferred
                # from their releases, the others left no trace.
                inferred = r"^  empty_cache\(\) calls inferred from the run's releases, not placed: (\d+) "
                w = whatif(launcher, env, own_path)
                check(w.returncode == 0 and "calls placed in them: 15\n" in w.stdout and
                      not re.search(inferred, w.stdout, re.M), "calls: random 1's 15 calls placed, none inferred",
                      w.stdout[:600])
                w = whatif(launcher, env, without_places(own_path, tmp))
                said = re.search(inferred, w.stdout, re.M)
                check(said is not None and said.group(1) == "7", "calls: without their places, 7 inferred",
                      w.stdout[:600])
            if own_path and exp_path:
                check(predicted_peak(launcher, env, own_path, "expandable_segments:True") == exp_peak,
                      f"calls: random {seed} under expandable segments predicted from its defaults run")
                check(predicted_peak(launcher, env, exp_path, "expandable_segments:False") == own_peak,
                      f"calls: random {seed} under the defaults predicted from its expandable run")


# A request larger than the device under expandable segments.
BIG = r'''
import torch
MIB = 1 << 20
a = torch.empty(64 * MIB)
try:
    torch.empty(2048 * MIB)
except torch.cuda.OutOfMemoryError:
    print('OOM')
'''


def test_fraction(launcher: str, env: dict) -> None:
    """A run under a memory fraction (td.FRACTION: refused by PyTorch at 512
    MiB with 784 MiB of the device free): the replay keeps the fraction and
    is faithful; under expandable_segments:True the request fits, at the
    peak the double's run with that setting reached without running out;
    a per_process_memory_fraction named in --alloc-conf replaces the run's
    (0.2: the 21st 8 MiB tensor, past 200 MiB, fails); the exit snapshot
    of the run with expandable segments carries the fraction (PyTorch's
    get_per_process_memory_fraction), and replayed under the defaults the
    280 MiB fails, as it did in the run under them."""
    with tempfile.TemporaryDirectory(prefix="gmt-whatif-") as tmp:
        path, w, exp = run_and_replay(launcher, env, tmp, td.FRACTION, "fraction.py")
        if not path:
            return
        own = section(w.stdout, "the run's own settings")
        check(w.returncode == 0 and "PyTorch's memory fraction in the run: at most 512 MiB (536870912 bytes) "
              "reserved" in w.stdout and own.startswith("  faithful") and
              f"(#25, 280 MiB ({280 * td.MIB} bytes)): does not fit" in own,
              "fraction: the run's limit kept, faithful, the 280 MiB does not fit", (w.returncode, w.stdout))
        text = td.FRACTION.replace("except torch.cuda.OutOfMemoryError:\n    pass\n",
                                   "except torch.cuda.OutOfMemoryError:\n    print('OOM')\n") + \
            "print('PEAK', torch.cuda.max_memory_reserved())\n"
        sub = os.path.join(tmp, "exp")
        os.mkdir(sub)
        r = td.run(launcher, dict(env, PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True"), sub, text, "exp.py",
                   on="oom,exit")
        m = re.search(r"^PEAK (\d+)$", r.stdout, re.M)
        check(m is not None and "OOM" not in r.stdout and "fits" in exp and "does not fit" not in exp and
              number(exp, "peak reserved") == int(m.group(1)),
              "fraction: expandable segments fit under the fraction, the double's peak", (r.stdout, exp))
        # Its exit snapshot carries the fraction too (PyTorch's
        # get_per_process_memory_fraction): replayed under the defaults, the
        # 280 MiB fails, as the run under them did.
        exits = glob.glob(os.path.join(sub, "gpumemtrace.*.exit.*.json"))
        w = whatif(launcher, env, *exits[:1], "--alloc-conf", "")
        defaults = section(w.stdout, "PyTorch's defaults")
        check(len(exits) == 1 and w.returncode == 0 and
              "PyTorch's memory fraction in the run: at most 512 MiB (536870912 bytes)" in w.stdout and
              section(w.stdout, "the run's own settings").startswith("  faithful") and
              "first request that fails: #25, 280 MiB" in defaults,
              "fraction: the exit snapshot's fraction; under the defaults the 280 MiB fails", (exits, w.stdout))
        w = whatif(launcher, env, path, "--alloc-conf", "per_process_memory_fraction:0.2")
        named = section(w.stdout, "per_process_memory_fraction:0.2:")
        check(w.returncode == 0 and "first request that fails: #21, 8.00 MiB" in named and
              f"peak reserved: 200 MiB ({200 * td.MIB} bytes)" in named,
              "fraction: a fraction named replaces the run's (a fifth of the device: the 21st 8 MiB fails)",
              w.stdout)


def test_larger_device(launcher: str, env: dict) -> None:
    """Asked about a device larger than the run's (whose expandable segment
    reserves 1 1/8 of it, more than the request): the 2 GiB request fits
    on 100 GiB — 64 MiB mapped in four 20 MiB pages, the 16 MiB left and
    102 pages more: 2120 MiB at the peak."""
    with tempfile.TemporaryDirectory(prefix="gmt-whatif-") as tmp:
        path = oom_run(launcher, dict(env, PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True"), tmp, BIG, "big.py")
        if not path:
            return
        w = whatif(launcher, env, path, "--device-bytes", "100G")
        own = section(w.stdout, "the run's own settings")
        check(w.returncode == 0 and "(#2, 2.00 GiB (2147483648 bytes)): fits" in own and
              f"peak reserved: 2.07 GiB ({2120 << 20} bytes)" in own,
              "larger device: a request past the run's reservation fits on 100 GiB", (w.returncode, w.stdout,
                                                                                      w.stderr[-300:]))


def test_edited(launcher: str, env: dict) -> None:
    with tempfile.TemporaryDirectory(prefix="gmt-whatif-") as tmp:
        path = oom_run(launcher, env, tmp, MIXED, "edited.py")
        if not path:
            return
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
        events = doc["framework"]["allocator_history"][0]["events"]
        k = [i for i, e in enumerate(events) if e[0] == "segment_alloc"][2]
        events[k][2] += 2 << 20
        edited = os.path.join(tmp, "edited.json")
        with open(edited, "w", encoding="utf-8") as f:
            json.dump(doc, f)
        w = whatif(launcher, env, edited, "--alloc-conf", "expandable_segments:True")
        check(w.returncode == 1 and re.search(r"not faithful: at request #\d+ \(\d+ bytes\): the run did segment_alloc "
                                              rf"of {events[k][2]} bytes, the replay segment_alloc of "
                                              rf"{events[k][2] - (2 << 20)} bytes", w.stdout) is not None,
              "edited: not faithful, where it diverged", w.stdout + w.stderr)
        check("peak reserved" not in w.stdout and "expandable_segments:True:" not in w.stdout and
              "no answers" in w.stdout, "edited: no answers", w.stdout)


def test_bad_input(launcher: str, env: dict) -> None:
    with tempfile.TemporaryDirectory(prefix="gmt-whatif-") as tmp:
        junk = os.path.join(tmp, "junk.json")
        with open(junk, "w", encoding="utf-8") as f:
            f.write("not json\n")
        bare = os.path.join(tmp, "bare.json")
        with open(bare, "w", encoding="utf-8") as f:
            json.dump({"format": "gpumemtrace-snapshot", "version": 1, "framework": {"name": "cupy"}}, f)
        far = os.path.join(tmp, "far.json")
        with open(far, "w", encoding="utf-8") as f:
            json.dump({"format": "gpumemtrace-snapshot", "version": 1,
                       "framework": {"name": "torch", "allocator_history": [
                           {"device": 1 << 40, "complete": True, "events": [["alloc", 4096, 512, 0]]}]}}, f)
        cases: List[tuple] = [
            ((junk,), junk, "junk: not JSON"),
            ((far,), "no valid device ordinal", "far: a history of a device no machine has"),
            ((bare,), "no PyTorch allocator history", "bare: no PyTorch history"),
            ((os.path.join(tmp, "missing.json"),), "missing.json", "missing: no such file"),
            ((bare, "--alloc-conf", "max_split_size_mb:5"), "max_split_size_mb", "conf: below PyTorch's minimum"),
            ((bare, "--alloc-conf", "backend:cudaMallocAsync"), "cudaMallocAsync", "conf: another allocator"),
            ((bare, "--alloc-conf", "colour:blue"), "unknown key 'colour'", "conf: an unknown key"),
            ((bare, "--device-bytes", "lots"), "--device-bytes", "device bytes: not a size"),
            ((bare, "--frobnicate"), "--frobnicate", "an unknown option"),
            ((), "no snapshot given", "no snapshot"),
        ]
        for args, named, what in cases:
            w = whatif(launcher, env, *args)
            lines = w.stderr.strip().splitlines()
            check(w.returncode == 2 and w.stdout == "" and len(lines) == 1 and named in lines[0] and
                  lines[0].startswith("gpumemtrace: whatif: "), f"bad input: {what}: one line naming it, exit 2",
                  (w.returncode, w.stdout[-300:], w.stderr[-300:]))


def main(argv: List[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    launcher, source = os.path.abspath(argv[0]), argv[1]
    env = td.base_env(source)
    test_faithful(launcher, env)
    test_fragmentation(launcher, env)
    test_no_help(launcher, env, source)
    test_larger_device(launcher, env)
    test_fraction(launcher, env)
    test_random(launcher, env)
    test_placed_calls(launcher, env, source)
    test_edited(launcher, env)
    test_bad_input(launcher, env)
    print(f"{'FAIL' if td.FAILURES else 'ok'}: {len(td.FAILURES)} failed")
    return 1 if td.FAILURES else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
