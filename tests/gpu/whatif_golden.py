#!/usr/bin/env python3
"""Golden traces for gpumemtrace whatif (docs/whatif.md, issue 39 item 4):
real PyTorch workloads recorded under several allocator settings, and the
check that replays them.

  record --launcher GPUMEMTRACE --out DIR [--double] [--only WORKLOAD]
      every workload under every setting, each traced by
      `gpumemtrace run --snapshot-on oom,exit` with the whole allocator
      history (GPUMEMTRACE_HISTORY=10000000); its oom snapshot when it
      ended in one, else its exit snapshot, trimmed to what the replay reads
      (no frames), with the run's per-step memory_reserved() and
      max_memory_reserved(), PyTorch's version and the device, written as
      DIR/WORKLOAD.SETTING.json.gz. --double: the PyTorch double of the
      tests (tests/frameworks/fake_torch, on the simulated GPU): only the
      workloads it can run and the settings it models faithfully.
  check --launcher GPUMEMTRACE DIR
      every fixture of DIR replayed: under its own settings it must be
      faithful and its peak reserved the run's max_memory_reserved(); for
      each other setting B of the same workload, the peak predicted from
      this trace must be within 1 % (or 2 MiB) of B's real
      max_memory_reserved(), unless the two runs are not comparable (their
      requests differ, or the replay under B stops at a request other than
      the one B's run ran out of memory at, or B's run ran out and the
      replay under B does not): then the reason is printed. Where this run
      ran out at its last request n and B's asked the same n and went on,
      the replay under B must find request n fitting, and its peak is
      compared with B's through request n (from B's history). Exit 0 all
      held, 1 one did not, 77 (a skip) with one line when DIR holds no
      fixture.
  workload NAME STEPS_FILE
      (what record runs under the tracer) one workload, its numbers per
      step written to STEPS_FILE.
"""
from __future__ import annotations

import argparse
import glob
import gzip
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time

MIB = 1 << 20
GIB = 1 << 30

# workload -> the settings it is recorded under, on a real GPU.
GPU_PLAN = {
    "train": ["", "expandable_segments:True", "max_split_size_mb:100"],
    "loss-kept": ["", "expandable_segments:True"],
    "fragment": ["", "expandable_segments:True", "max_split_size_mb:100"],
    "mixed": ["", "expandable_segments:True", "max_split_size_mb:20"],
}
# On the double: settings it models faithfully. Its expandable segments are
# PyTorch's (docs/whatif.md); it ignores max_split_size_mb and
# garbage_collection_threshold, but PyTorch leaves the threshold inert
# without a memory fraction, and a max_split_size_mb above every block
# changes nothing, so under these the double is PyTorch.
DOUBLE_PLAN = {
    "mixed": ["", "expandable_segments:True", "garbage_collection_threshold:0.8", "max_split_size_mb:4096"],
    "fragment": ["", "expandable_segments:True", "max_split_size_mb:4096"],
}
TOLERANCE = 0.01
TOLERANCE_BYTES = 2 * MIB


# --- the workloads (run under the tracer) ------------------------------------

class Steps:
    """PyTorch's reserved bytes after each step."""

    def __init__(self, torch):
        self.torch = torch
        self.rows: list = []
        self.oom = False   # the workload ended in PyTorch's OutOfMemoryError

    def step(self) -> None:
        t = self.torch
        if hasattr(t.cuda, "synchronize"):
            t.cuda.synchronize()
        self.rows.append({"step": len(self.rows), "reserved": t.cuda.memory_reserved(0),
                          "max_reserved": t.cuda.max_memory_reserved(0),
                          "allocated": t.cuda.memory_allocated(0)})


def free_bytes(torch) -> int | None:
    f = getattr(torch.cuda, "mem_get_info", None)
    return f(0)[0] if f else None


def run_train(torch, steps: Steps) -> None:
    """An MLP trained with AdamW, the batch and sequence length drawn anew
    each step (shapes that vary, as with variable-length batches)."""
    rng = random.Random(39)
    model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(),
                                torch.nn.Linear(4096, 1024)).cuda()
    opt = torch.optim.AdamW(model.parameters())
    for _ in range(40):
        batch, seq = rng.choice([8, 16, 32, 48]), rng.choice([64, 128, 200, 256, 384, 512])
        x = torch.randn(batch, seq, 1024, device="cuda")
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        del x, loss
        steps.step()


def run_loss_kept(torch, steps: Steps) -> None:
    """The suite's loss-kept (torch_memory.py): each step's loss kept, the
    device filled but for 4 GiB, until a step runs out."""
    blocker = torch.empty(max(0, free_bytes(torch) - 4 * GIB), dtype=torch.uint8, device="cuda")
    model = torch.nn.Sequential(torch.nn.Linear(4096, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 4096)).cuda()
    opt = torch.optim.AdamW(model.parameters())
    losses = []
    try:
        while len(losses) < 10_000:
            x = torch.randn(2048, 4096, device="cuda")
            y = torch.randn(2048, 4096, device="cuda")
            loss = (model(x) - y).square()
            loss.mean().backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            losses.append(loss)
            del x, y, loss
            steps.step()
    except torch.cuda.OutOfMemoryError:
        steps.oom = True
        steps.step()
    del blocker, losses


def run_fragment(torch, steps: Steps) -> None:
    """The suite's fragment (torch_memory.py): a 600 MiB tensor freed, eight
    64 MiB tensors cut from its segment and every other one freed, the
    device taken but 64 MiB, then 128 MiB."""
    old = torch.empty(600 * MIB, dtype=torch.uint8, device="cuda")
    del old
    steps.step()
    blocks = [torch.empty(64 * MIB, dtype=torch.uint8, device="cuda") for _ in range(8)]
    del blocks[::2]
    steps.step()
    free = free_bytes(torch)
    # The double (no mem_get_info, a 1 GiB simulated device): 400 MiB more.
    held = max(0, free - 64 * MIB) if free is not None else 400 * MIB
    blocker = torch.empty(held, dtype=torch.uint8, device="cuda")
    steps.step()
    try:
        made = torch.empty(128 * MIB, dtype=torch.uint8, device="cuda")
        del made
    except torch.cuda.OutOfMemoryError:
        steps.oom = True
    steps.step()
    del blocks, blocker


def run_mixed(torch, steps: Steps) -> None:
    """Tensors of sizes drawn from both pools, some freed, empty_cache() now
    and then: only torch.empty, so the double runs it too."""
    rng = random.Random(7)
    live = []
    for step in range(80):
        n = rng.choice([100, 4000, 300 * 1024, 900 * 1024, 2 * MIB + 5, 3 * MIB, 7 * MIB, 12 * MIB + 100,
                        33 * MIB, 64 * MIB, 130 * MIB])
        live.append(torch.empty(n, dtype=torch.uint8, device="cuda"))
        if len(live) > 6:
            del live[rng.randrange(len(live))]
        if step % 23 == 22:
            torch.cuda.empty_cache()
        steps.step()
    del live


WORKLOADS = {"train": run_train, "loss-kept": run_loss_kept, "fragment": run_fragment, "mixed": run_mixed}


def workload(name: str, out: str) -> int:
    try:
        import torch
    except Exception as e:  # noqa: BLE001 (any import failure: no torch here)
        print(f"SKIP torch does not import: {type(e).__name__}: {e}")
        return 77
    if not getattr(torch.cuda, "is_available", lambda: True)():
        print(f"SKIP torch {torch.__version__} sees no CUDA device")
        return 77
    warm = torch.ones(1, device="cuda") if hasattr(torch, "ones") else torch.empty(512)
    del warm
    torch.cuda.empty_cache()
    steps = Steps(torch)
    WORKLOADS[name](torch, steps)
    props = torch.cuda.get_device_properties(0) if hasattr(torch.cuda, "get_device_properties") else None
    with open(out, "w", encoding="utf-8") as f:
        json.dump({"torch": torch.__version__, "cuda": getattr(getattr(torch, "version", None), "cuda", None),
                   "device": getattr(props, "name", "the simulated GPU (the PyTorch double)"),
                   "device_total": getattr(props, "total_memory", None),
                   "steps": steps.rows, "ended_in_oom": steps.oom, "max_memory_reserved": torch.cuda.max_memory_reserved(0)}, f)
    return 0


# --- recording ------------------------------------------------------------------

def slug(conf: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", conf).strip("-").lower() or "default"


# The snapshot's parts the replay reads (src/analyze/replay.c), and what
# names it; the rest (the tracer's own history, allocations, series,
# diagnosis, modules) is left out, so a fixture is no longer a valid snapshot.
KEPT = ("format", "version", "minor", "producer", "reason", "devices", "framework")


def trim(node, top: bool = True):
    """The snapshot with only what the replay reads: no frames or stacks."""
    if isinstance(node, dict):
        return {k: trim(v, False) for k, v in node.items()
                if (not top or k in KEPT) and k not in ("frames", "stacks", "stack")}
    if isinstance(node, list):
        return [trim(v, False) for v in node]
    return node


class Skip(Exception):
    """No PyTorch, or no GPU for it: nothing can be recorded."""


def record_one(launcher: str, name: str, conf: str, out: str) -> str:
    """One traced run, its fixture written: the fixture's path, or "" with
    the reason printed."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("GPUMEMTRACE_") and k != "PYTORCH_CUDA_ALLOC_CONF"}
    env["GPUMEMTRACE_HISTORY"] = "10000000"
    env["PYTHONUNBUFFERED"] = "1"
    if conf:
        env["PYTORCH_CUDA_ALLOC_CONF"] = conf
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"gmt-golden-{name}-") as tmp:
        steps_file = os.path.join(tmp, "steps.json")
        cmd = [launcher, "run", "--dir", tmp, "--snapshot-on", "oom,exit", "--",
               sys.executable, os.path.abspath(__file__), "workload", name, steps_file]
        r = subprocess.run(cmd, env=env, cwd=tmp, capture_output=True, text=True, timeout=300)
        if r.returncode == 77:
            raise Skip(r.stdout.strip() or "SKIP the workload skipped")
        if r.returncode != 0 or not os.path.exists(steps_file):
            print(f"FAIL {name} [{conf or 'default'}]: exit {r.returncode}: {(r.stdout + r.stderr)[-600:]}")
            return ""
        # Its last oom snapshot when it ended in PyTorch's OutOfMemoryError;
        # else its exit snapshot (an oom snapshot then is of a failure
        # PyTorch recovered from, and its history stops there).
        ooms = sorted(glob.glob(os.path.join(tmp, "gpumemtrace.*.oom.*.json")),
                      key=lambda p: int(p.rsplit(".", 2)[-2]))
        exits = glob.glob(os.path.join(tmp, "gpumemtrace.*.exit.*.json"))
        with open(steps_file, encoding="utf-8") as f:
            run = json.load(f)
        chosen = (ooms or [""])[-1] if run["ended_in_oom"] else (exits or [""])[0]
        if not chosen:
            print(f"FAIL {name} [{conf or 'default'}]: no {'oom' if run['ended_in_oom'] else 'exit'} snapshot: "
                  f"{sorted(os.listdir(tmp))}")
            return ""
        with open(chosen, encoding="utf-8") as f:
            snap = json.load(f)
    fixture = {"golden": 1, "workload": name, "alloc_conf": conf,
               "snapshot_kind": "oom" if run["ended_in_oom"] else "exit",
               **run, "snapshot": trim(snap)}
    path = os.path.join(out, f"{name}.{slug(conf)}.json.gz")
    with gzip.open(path, "wt", encoding="utf-8", compresslevel=9) as f:
        json.dump(fixture, f, separators=(",", ":"))
    print(f"ok   {name} [{conf or 'default'}]: {len(run['steps'])} steps, max_memory_reserved "
          f"{run['max_memory_reserved']}, {fixture['snapshot_kind']} snapshot, {os.path.getsize(path)} bytes, "
          f"{time.monotonic() - began:.1f} s -> {path}")
    return path


def record(args: argparse.Namespace) -> int:
    plan = DOUBLE_PLAN if args.double else GPU_PLAN
    os.makedirs(args.out, exist_ok=True)
    failed, began = 0, time.monotonic()
    for name, confs in plan.items():
        if args.only and name not in args.only:
            continue
        for conf in confs:
            try:
                failed += not record_one(args.launcher, name, conf, args.out)
            except Skip as e:
                print(e)
                return 77
    print(f"{'FAILED: ' + str(failed) + ' run(s) not recorded' if failed else 'every run recorded'}, "
          f"{time.monotonic() - began:.0f} s in all")
    return 1 if failed else 0


# --- the check ------------------------------------------------------------------

class Fixture:
    def __init__(self, path: str):
        self.path = path
        with gzip.open(path, "rt", encoding="utf-8") as f:
            self.doc = json.load(f)
        self.name = f"{self.doc['workload']} [{self.doc['alloc_conf'] or 'default'}]"

    def requests(self) -> list:
        """The sizes the run asked for, in order (the history's alloc and
        oom events, as the replay numbers its requests)."""
        hist = self.doc["snapshot"].get("framework", {}).get("allocator_history") or []
        events = next((h.get("events") for h in hist if h.get("events")), [])
        return [e[2] for e in events if e[0] in ("alloc", "oom")]

    def failing_request(self) -> int | None:
        """The number of the request the run ran out of memory at (its
        history's last oom), or None."""
        hist = self.doc["snapshot"].get("framework", {}).get("allocator_history") or []
        events = next((h.get("events") for h in hist if h.get("events")), [])
        asked = [e[0] for e in events if e[0] in ("alloc", "oom")]
        return max((i + 1 for i, a in enumerate(asked) if a == "oom"), default=None)

    def peak_reserved_through(self, n: int) -> int | None:
        """PyTorch's peak reserved bytes from its start through its n-th
        request, from the segments its history records (the driver calls
        it made, each with its size); None where the history does not reach
        back to PyTorch's start."""
        hist = self.doc["snapshot"].get("framework", {}).get("allocator_history") or []
        h = next((h for h in hist if h.get("events")), None)
        if h is None or not h.get("complete"):
            return None
        reserved = peak = asked = 0
        for e in h["events"]:
            if e[0] in ("segment_alloc", "segment_map"):
                reserved += e[2]
            elif e[0] in ("segment_free", "segment_unmap"):
                reserved -= e[2]
            peak = max(peak, reserved)
            if e[0] in ("alloc", "oom"):
                asked += 1
                if asked == n:
                    return peak
        return None


def replay(launcher: str, fx: Fixture, confs: list, tmp: str) -> tuple:
    snap = os.path.join(tmp, os.path.basename(fx.path)[:-3])
    with open(snap, "w", encoding="utf-8") as f:
        json.dump(fx.doc["snapshot"], f)
    cmd = [launcher, "whatif", snap] + [a for c in confs for a in ("--alloc-conf", c)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    return r.returncode, r.stdout, r.stderr


def sections(text: str) -> list:
    """The replay's answers: [(heading, lines)], the run's own settings first."""
    out: list = []
    for line in text.splitlines():
        if line.startswith("the run's own settings") or (line.endswith(":") and not line.startswith(" ")):
            out.append((line, []))
        elif out and line.startswith("  "):
            out[-1][1].append(line.strip())
    return out


def setting_of(heading: str) -> str:
    """The --alloc-conf a heading of the replay's answers is for: whatif
    names an empty one (PyTorch's defaults) `PyTorch's defaults
    (--alloc-conf "")`, any other by itself."""
    m = re.fullmatch(r'PyTorch\'s defaults \(--alloc-conf "(.*)"\):', heading)
    return m.group(1) if m else heading[:-1]


def number(lines: list, key: str) -> int | None:
    for line in lines:
        if line.startswith(key):
            m = re.search(r"\((\d+) bytes\)", line)
            return int(m.group(1)) if m else None
    return None


def first_failing(lines: list) -> str:
    for line in lines:
        if line.startswith("first request that fails:"):
            return line.split(":", 1)[1].strip()
    return ""


def check(args: argparse.Namespace) -> int:
    paths = sorted(glob.glob(os.path.join(args.dir, "*.json.gz")))
    if not paths:
        print(f"SKIP no golden trace in {args.dir}: record them on a GPU (docs/gpu-suite.md, 'Golden traces for the replay')")
        return 77
    fixtures = [Fixture(p) for p in paths]
    by_workload: dict = {}
    for fx in fixtures:
        by_workload.setdefault(fx.doc["workload"], []).append(fx)
    bad = 0
    with tempfile.TemporaryDirectory(prefix="gmt-golden-check-") as tmp:
        for fx in fixtures:
            others = [o for o in by_workload[fx.doc["workload"]] if o is not fx]
            rc, out, err = replay(args.launcher, fx, [o.doc["alloc_conf"] for o in others], tmp)
            tag = f"{fx.name} (torch {fx.doc['torch']}, {fx.doc['device']})"
            if rc != 0:
                print(f"FAIL {tag}: the replay under its own settings: exit {rc}: {(out + err).strip()[-400:]}")
                bad += 1
                continue
            secs = sections(out)
            own = next((lines for head, lines in secs if head.startswith("the run's own settings")), None)
            if own is None or not any(x.startswith("faithful") for x in own):
                print(f"FAIL {tag}: no faithful line under its own settings: {out[-400:]}")
                bad += 1
                continue
            peak = number(own, "peak reserved")
            real = fx.doc["max_memory_reserved"]
            if peak != real:
                print(f"FAIL {tag}: faithful, but peak reserved {peak} replayed, max_memory_reserved() {real}")
                bad += 1
            else:
                print(f"ok   {tag}: faithful, peak reserved {peak} = max_memory_reserved()")
            answers = {setting_of(head): lines for head, lines in secs if not head.startswith("the run's own")}
            for other in others:
                conf = other.doc["alloc_conf"]
                pair = f"{fx.doc['workload']}: [{conf or 'default'}] predicted from [{fx.doc['alloc_conf'] or 'default'}]"
                lines = answers.get(conf)
                if lines is None:
                    print(f"FAIL {pair}: no answer for it: {out[-400:]}")
                    bad += 1
                    continue
                mine, theirs = fx.requests(), other.requests()
                n = min(len(mine), len(theirs))
                shorter = fx if len(mine) < len(theirs) else other
                if mine[:n] != theirs[:n] or (mine != theirs and shorter.failing_request() != n):
                    k = next((i for i, (a, b) in enumerate(zip(mine, theirs)) if a != b), n)
                    print(f"note {pair}: not comparable: the runs' requests differ from request #{k + 1} "
                          f"({len(mine)} and {len(theirs)} requests)")
                    continue
                fails = first_failing(lines)
                failed = bool(fails) and not fails.startswith("none")
                at = re.match(r"#(\d+),", fails)
                if len(mine) < len(theirs):
                    # This run ran out at its last request, n; B's asked the
                    # same n and went on: under B the replay must find that
                    # request fitting, and its peak is B's through request n.
                    want, got = other.peak_reserved_through(n), number(lines, "peak reserved")
                    if failed or want is None:
                        print(f"note {pair}: not comparable: the run under it went past request #{n}, "
                              + (f"the replay under it stops at a failing request ({fails})" if failed
                                 else "whose history does not reach back to PyTorch's start"))
                        continue
                    if got is None or abs(got - want) > max(TOLERANCE * want, TOLERANCE_BYTES):
                        print(f"FAIL {pair}: through request #{n}, where this run ran out: peak reserved {got} "
                              f"predicted, {want} real (more than 1 % and 2 MiB off)")
                        bad += 1
                    else:
                        print(f"ok   {pair}: request #{n}, where this run ran out, fits, as it did in the run "
                              f"under it; peak reserved through it {got} predicted, {want} real")
                    continue
                # Under B the replay stops at the first request that fails:
                # its peak is B's run's only where B's run ran out at that
                # very request (a trace that ran to the end, judged on its
                # device bytes, may say where B's run failed). Where B's run
                # asked fewer, it ran out at its last, n.
                same = failed and at is not None and int(at.group(1)) == other.failing_request()
                if failed != bool(other.doc.get("ended_in_oom")) or (failed and not same):
                    print(f"note {pair}: not comparable: the replay under it "
                          + (f"stops at a failing request ({fails})" if failed else "runs to the end")
                          + f", the run under it {'ran' if other.doc.get('ended_in_oom') else 'did not run'}"
                          + " out of memory"
                          + (f" at request #{other.failing_request()}" if other.doc.get("ended_in_oom") else ""))
                    continue
                want, got = other.doc["max_memory_reserved"], number(lines, "peak reserved")
                if got is None or abs(got - want) > max(TOLERANCE * want, TOLERANCE_BYTES):
                    print(f"FAIL {pair}: peak reserved {got} predicted, {want} real (more than 1 % and 2 MiB off)")
                    bad += 1
                else:
                    print(f"ok   {pair}: peak reserved {got} predicted, {want} real")
    print(f"{len(fixtures)} fixtures, {'1 or more checks failed' if bad else 'every check held'}")
    return 1 if bad else 0


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record")
    r.add_argument("--launcher", required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--double", action="store_true")
    r.add_argument("--only", action="append")
    c = sub.add_parser("check")
    c.add_argument("--launcher", required=True)
    c.add_argument("dir")
    w = sub.add_parser("workload")
    w.add_argument("name", choices=sorted(WORKLOADS))
    w.add_argument("steps_file")
    args = ap.parse_args(argv)
    if getattr(args, "launcher", None):
        args.launcher = os.path.abspath(args.launcher)
    if args.cmd == "workload":
        return workload(args.name, args.steps_file)
    return record(args) if args.cmd == "record" else check(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
