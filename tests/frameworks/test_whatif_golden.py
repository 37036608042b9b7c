#!/usr/bin/env python3
"""The golden traces' check (tests/gpu/whatif_golden.py check) proven on
fixtures of the PyTorch double, recorded by the same recorder
(whatif_golden.py record --double) on the simulated GPU into a temporary
directory. The double follows PyTorch's segment sizes, splitting, best fit,
cache release and expandable segments, but it ignores max_split_size_mb and
garbage_collection_threshold: it is recorded only under settings where it
is PyTorch (the defaults; expandable_segments:True; a threshold, inert
without a memory fraction; a max_split_size_mb above every block), so every
prediction here is of a run the double made the same way. What it shows is
that the check works, not that the model predicts a real GPU's runs.

- the recorded fixtures pass: faithful under their own settings (the
  expandable ones too: every segment_map and segment_unmap), their peak
  reserved the run's max_memory_reserved(), each prediction within 1 %:
  mixed's 12 (four settings, each predicted from the three others) and
  fragment's 6 — it runs out of memory under the defaults and
  max_split_size_mb:4096 (oom snapshots, the peak up to that request) but
  not with expandable segments, whose exit snapshot holds the device bytes
  PyTorch was told at exit: replayed under the two others it fails at the
  request their runs ran out at, with their peak;
- a fragment run edited to say it did not run out of memory: its
  prediction from the defaults, which fails at that request, is not
  compared, and the reason is printed;
- a run edited to ask one byte less once (the same block): its six
  pairs not compared, the reason printed (the runs' requests differ);
- planted: a fixture's max_memory_reserved() 8 MiB higher: the check fails,
  naming it (faithful, but the peak differs) and the predictions of it;
- planted: a segment's size in a fixture's history changed: not faithful,
  the check fails;
- no fixture: exit 77 and one line.

And on the real GPU's fixtures committed in tests/whatif/golden: loss-kept
ran out at request #2854 under the defaults and went past it with
expandable segments (the same requests up to it). The defaults' trace
replayed with expandable segments must find that request fitting and
predict the expandable run's peak reserved through it, which its history
says (a segment_map of 4 GiB, more than 1 % of that peak, planted there
before it: the check fails, naming the pair).

Usage: test_whatif_golden.py LAUNCHER SOURCE_ROOT"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import test_torch_double as td  # noqa: E402 - its environment and checks

check = td.check


def golden(source: str, env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, os.path.join(source, "tests", "gpu", "whatif_golden.py"), *args],
                          env=env, capture_output=True, text=True, timeout=600)


def edit(path: str, change) -> None:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        doc = json.load(f)
    change(doc)
    with gzip.open(path, "wt", encoding="utf-8") as f:
        json.dump(doc, f)


def resize_segment(doc: dict) -> None:
    for h in doc["snapshot"]["framework"]["allocator_history"]:
        for e in h["events"]:
            if e[0] == "segment_alloc":
                e[2] += 2 << 20
                return


def ask_one_byte_less(doc: dict) -> None:
    """The first request a byte smaller: the same block (sizes round up to
    512 bytes), another request."""
    for h in doc["snapshot"]["framework"]["allocator_history"]:
        for e in h["events"]:
            if e[0] == "alloc" and e[2] % 512 == 0:
                e[2] -= 1
                return


def map_before(n: int):
    """A segment_map and segment_unmap of 4 GiB planted just before the
    n-th request of a history: the run's peak through it 4 GiB higher."""
    def change(doc: dict) -> None:
        for h in doc["snapshot"]["framework"]["allocator_history"]:
            asked = 0
            for i, e in enumerate(h["events"]):
                if e[0] in ("alloc", "oom"):
                    asked += 1
                    if asked == n:
                        addr, stream = 1 << 46, e[3]
                        h["events"][i:i] = [["segment_map", addr, 4 << 30, stream],
                                            ["segment_unmap", addr, 4 << 30, stream]]
                        return
    return change


def main(argv: list) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    launcher, source = argv
    env = td.base_env(source)
    with tempfile.TemporaryDirectory(prefix="gmt-golden-double-") as tmp:
        good = os.path.join(tmp, "good")
        r = golden(source, env, "record", "--double", "--launcher", launcher, "--out", good)
        print(r.stdout, end="")
        check(r.returncode == 0, "record --double: every run recorded", r.stderr[-800:])
        names = sorted(os.listdir(good)) if os.path.isdir(good) else []
        check(len(names) == 7, "seven fixtures (mixed under four settings, fragment under three)", names)
        big = max((os.path.getsize(os.path.join(good, n)) for n in names), default=0)
        check(big < 64 * 1024, "each fixture under 64 KiB", big)

        r = golden(source, env, "check", "--launcher", launcher, good)
        print(r.stdout, end="")
        check(r.returncode == 0, "check: the double's fixtures hold", r.stderr[-800:])
        check(r.stdout.count("faithful, peak reserved") == 7, "check: every fixture faithful, peak exact", r.stdout)
        check(r.stdout.count(" predicted, ") == 18 and "not comparable" not in r.stdout,
              "check: the predictions between settings compared", r.stdout)
        check(r.stdout.count("ok   fragment: [default] predicted from [expandable_segments:True]: peak reserved "
                             "1006632960 predicted, 1006632960 real") == 1 and
              r.stdout.count("ok   fragment: [max_split_size_mb:4096] predicted from [expandable_segments:True]: "
                             "peak reserved 1006632960 predicted, 1006632960 real") == 1,
              "check: fragment's two predicted from its expandable run (an exit snapshot): they fail where those "
              "runs did, with their peak", r.stdout)

        planted = os.path.join(tmp, "no-oom")
        shutil.copytree(good, planted)
        edit(os.path.join(planted, "fragment.max-split-size-mb-4096.json.gz"),
             lambda d: d.__setitem__("ended_in_oom", False))
        r = golden(source, env, "check", "--launcher", launcher, planted)
        check(r.returncode == 0 and "note fragment: [max_split_size_mb:4096] predicted from [default]: not comparable: "
              "the replay under it stops at a failing request" in r.stdout,
              "a run said not to have run out, its replay failing: not compared, the reason printed", r.stdout[-1200:])

        planted = os.path.join(tmp, "requests")
        shutil.copytree(good, planted)
        edit(os.path.join(planted, "mixed.default.json.gz"), ask_one_byte_less)
        r = golden(source, env, "check", "--launcher", launcher, planted)
        check(r.returncode == 0 and r.stdout.count("not comparable: the runs' requests differ from request #1") == 6,
              "a run that asked a byte less once: still faithful, its pairs not compared, the reason printed",
              r.stdout[-1500:])

        planted = os.path.join(tmp, "peak")
        shutil.copytree(good, planted)
        victim = os.path.join(planted, "mixed.max-split-size-mb-4096.json.gz")
        edit(victim, lambda d: d.__setitem__("max_memory_reserved", d["max_memory_reserved"] + (8 << 20)))
        r = golden(source, env, "check", "--launcher", launcher, planted)
        check(r.returncode == 1, "planted peak: the check fails", r.stdout[-800:])
        check("FAIL mixed [max_split_size_mb:4096]" in r.stdout and "faithful, but peak reserved" in r.stdout,
              "planted peak: the fixture named", r.stdout[-800:])
        check("FAIL mixed: [max_split_size_mb:4096] predicted from [default]" in r.stdout,
              "planted peak: its prediction from the defaults fails", r.stdout[-1200:])

        planted = os.path.join(tmp, "segment")
        shutil.copytree(good, planted)
        edit(os.path.join(planted, "fragment.default.json.gz"), resize_segment)
        r = golden(source, env, "check", "--launcher", launcher, planted)
        check(r.returncode == 1, "planted segment size: the check fails", r.stdout[-800:])
        check("FAIL fragment [default]" in r.stdout and "not faithful" in r.stdout,
              "planted segment size: not faithful, named", r.stdout[-800:])

        real = os.path.join(tmp, "real")
        os.makedirs(real)
        for name in ("loss-kept.default.json.gz", "loss-kept.expandable-segments-true.json.gz"):
            shutil.copy(os.path.join(source, "tests", "whatif", "golden", name), real)
        r = golden(source, env, "check", "--launcher", launcher, real)
        print(r.stdout, end="")
        check(r.returncode == 0 and "ok   loss-kept: [expandable_segments:True] predicted from [default]: request "
              "#2854, where this run ran out, fits, as it did in the run under it; peak reserved through it "
              "149277376512 predicted, 149277376512 real" in r.stdout,
              "the real loss-kept: the request the defaults ran out at fits with expandable segments, as it did, "
              "the peak through it exact", r.stdout[-1500:])
        edit(os.path.join(real, "loss-kept.expandable-segments-true.json.gz"), map_before(2854))
        r = golden(source, env, "check", "--launcher", launcher, real)
        want = (f"FAIL loss-kept: [expandable_segments:True] predicted from [default]: through request #2854, "
                f"where this run ran out: peak reserved 149277376512 predicted, {149277376512 + (4 << 30)} real")
        check(r.returncode == 1 and want in r.stdout, "planted 4 GiB in the expandable run's history before #2854: the pair fails",
              r.stdout[-1500:])

        empty = os.path.join(tmp, "none")
        os.makedirs(empty)
        r = golden(source, env, "check", "--launcher", launcher, empty)
        check(r.returncode == 77 and len(r.stdout.splitlines()) == 1 and r.stdout.startswith("SKIP"),
              "no fixture: exit 77, one line", (r.returncode, r.stdout))
    return 1 if td.FAILURES else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
