#!/usr/bin/env python3
"""Test of the demo: run train_loop on a simulated 4 GiB GPU, as scripts/demo does,
and check what it reports against the simulator's out-of-memory ledger.

Usage: test_train_loop.py TRAIN_LOOP GMTSIM_LEDGER_TOOL [--lib LIBGPUMEMTRACE]
(meson passes them). With --lib the program runs traced, as scripts/demo runs
it, and the tracer's out-of-memory report on stderr and its snapshot are
checked too: the report names the request, the growth verdict and the leaking
site, and the snapshot it points to holds the ledger's live set and the same
diagnosis; every snapshot is valid against docs/snapshot.schema.json.
GMT_TEST_ASAN_RUNTIME (a sanitizer build) is preloaded first.
"""

from __future__ import annotations

import glob
import json
import os
import re
import subprocess
import sys
import tempfile
from typing import Any, Dict, List

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "tests", "schema"))
import schema_check  # noqa: E402  (every snapshot against docs/snapshot.schema.json)

MIB = 1 << 20
PAGE = 2 * MIB
MEMORY = 4 << 30
CONTEXT = 300 * MIB
# train_loop.c: u = total / 256 in whole pages; weights 2u, 4u, 4u, 2u, Adam state
# twice that, activations twice the weights, and the last layer's activation of
# every finished step kept by the "metrics hook".
UNIT = MEMORY // 256 // PAGE * PAGE
WEIGHTS = [2 * UNIT, 4 * UNIT, 4 * UNIT, 2 * UNIT]
ACTS = [2 * w for w in WEIGHTS]
STAGING = 64 * MIB

OOM_LINE = re.compile(
    r"train_loop: step (\d+): CUDA out of memory: tried to allocate "
    r"(\d+\.\d\d) MiB \(cudaErrorMemoryAllocation\); (\d+) MiB free of (\d+) MiB")

failures: List[str] = []


def expect(ok: bool, what: str, got: Any, want: Any) -> None:
    if not ok:
        failures.append(f"{what}: got {got!r}, expected {want!r}")


REPORT = [
    re.compile(r"gpumemtrace: out of memory: cuMemAllocAsync of ([\d.]+) MiB on device 0 failed "
               r"with ([\d.]+) MiB free of 4\.00 GiB"),
    re.compile(r"gpumemtrace:   verdict: growth: 1 allocation site kept growing and added "
               r"[\d.]+ GiB \(a leak suspect\): stream_alloc \(train_loop\.c:\d+\) ← train_step "
               r"\(train_loop\.c:\d+\), 64\.0 MiB a step over \d+ steps; the request fell [\d.]+ MiB short"),
    re.compile(r"gpumemtrace:   try: free what this site allocates once it is done with it — each buffer it keeps "
               r"across iterations \(64\.0 MiB a step over \d+ whole steps\) "
               r"\(at stream_alloc \(train_loop\.c:\d+\) ← train_step \(train_loop\.c:\d+\)\)"),
    re.compile(r"gpumemtrace:   top sites:"),
    re.compile(r"gpumemtrace:     [\d.]+ GiB in \d+ allocations at stream_alloc \(train_loop\.c:\d+\) ← train_step \(train_loop\.c:\d+\)"),
    re.compile(r"gpumemtrace:     192 MiB in 4 allocations at device_alloc \(train_loop\.c:\d+\) ← main \(train_loop\.c:\d+\)"),
    re.compile(r"gpumemtrace:     192 MiB in 4 allocations at device_alloc \(train_loop\.c:\d+\) ← main \(train_loop\.c:\d+\)"),
    re.compile(r"gpumemtrace:   snapshot: (\S+)"),
]


def check_traced(stderr: str, ledger: Dict[str, Any], tried_mib: float) -> None:
    """The tracer's report, in order before the program's own message, and
    the snapshot it names."""
    lines = [ln for ln in stderr.splitlines() if ln.startswith("gpumemtrace:")]
    expect(len(lines) == len(REPORT), "the tracer's stderr lines", lines, f"{len(REPORT)} report lines")
    matches = [p.fullmatch(ln) for p, ln in zip(REPORT, lines)]
    for m, p, ln in zip(matches, REPORT, lines):
        expect(m is not None, "report line", ln, p.pattern)
    if len(matches) != len(REPORT) or None in matches:
        return
    expect(float(matches[0].group(1)) == tried_mib, "report: requested MiB",
           matches[0].group(1), tried_mib)
    with open(matches[-1].group(1)) as f:
        snap: Dict[str, Any] = json.load(f)
    mine = sorted((int(a["address"], 16), a["size"]) for a in snap["allocations"])
    truth = sorted((int(e["address"], 16), e["size"]) for e in ledger["live"])
    expect(mine == truth, "snapshot live set against the ledger", len(mine), len(truth))
    diagnosis = snap.get("diagnosis") or {}
    expect(diagnosis.get("verdict") == "growth", "diagnosis.verdict", diagnosis.get("verdict"), "growth")
    numbers = diagnosis.get("numbers") or {}
    expect(numbers.get("free_bytes") == ledger["devices"][0]["free_bytes"], "diagnosis free_bytes",
           numbers.get("free_bytes"), ledger["devices"][0]["free_bytes"])
    expect(numbers.get("untracked_bytes") == CONTEXT, "diagnosis untracked_bytes (the context)",
           numbers.get("untracked_bytes"), CONTEXT)
    grown = numbers.get("growth_stacks") or []
    sites = {s["stack"]: s for s in snap.get("sites", [])}
    expect(len(grown) == 1 and sites.get(grown[0], {}).get("growing") is True,
           "the growing site", grown, "one site, marked growing")
    # The leak's bytes per step: the steps marked with gmt_step, each keeping
    # the last layer's activation.
    steps = numbers.get("growth_top_steps") or 0
    expect(steps > 0 and numbers.get("growth_top_step_bytes") == steps * ACTS[-1],
           "growth over whole steps", (numbers.get("growth_top_step_bytes"), steps), f"{steps} x {ACTS[-1]}")
    remedies = [(r["name"], r["stack"]) for r in diagnosis.get("remedies") or []]
    expect(remedies == [("free_growing_site", numbers.get("growth_top_stack"))] and remedies[0][1] in grown,
           "remedies", remedies, "free_growing_site at the growing site")
    # The C runtime's _start has no debug information: no line from the
    # program's source may be given to it.
    starts = [f for st in snap["stacks"] for f in st["frames"] if f["function"] == "_start"]
    expect(bool(starts) and all(f["file"] is None and f["line"] is None for f in starts),
           "_start without a file and line", [(f["file"], f["line"]) for f in starts[:1]], "(None, None)")


def main() -> int:
    train_loop, ledger_tool = sys.argv[1], sys.argv[2]
    lib = sys.argv[4] if len(sys.argv) == 5 and sys.argv[3] == "--lib" else None
    with tempfile.TemporaryDirectory(prefix="gmt-demo-test.") as out:
        # NOTE: drop every inherited GMTSIM_* so the user's shell cannot change
        # the simulated GPU under the test (meson 1.0 cannot unset variables).
        env = {k: v for k, v in os.environ.items() if not k.startswith("GMTSIM_")}
        env.update(GMTSIM_MEMORY="4G", GMTSIM_CONTEXT_BYTES="300M",
                   GMTSIM_LEDGER_DIR=out)
        if lib is not None:
            asan = os.environ.get("GMT_TEST_ASAN_RUNTIME", "")
            env["LD_PRELOAD"] = f"{asan} {lib}" if asan else lib
            env["GPUMEMTRACE_DIR"] = out
            if asan:
                env["ASAN_OPTIONS"] = env.get("ASAN_OPTIONS", "") + ":detect_leaks=0"
        # Popen, not run(): the ledger files are named by the child's pid.
        with subprocess.Popen([train_loop], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                              text=True) as proc:
            stdout, stderr = proc.communicate(timeout=100)
        sys.stdout.write(stdout)
        sys.stderr.write(stderr)
        if proc.returncode != 2:
            print(f"FAIL: train_loop exited {proc.returncode}, expected 2 (out of memory)")
            return 1
        # The program's own message, then (at exit, when the out-of-memory
        # episode ends) the tracer's report: the last line of the program's.
        own = [line for line in stderr.strip().splitlines() if not line.startswith("gpumemtrace:")]
        last = own[-1] if own else ""
        m = OOM_LINE.fullmatch(last)
        if not m:
            print(f"FAIL: the program's last stderr line {last!r} is not the out-of-memory message")
            return 1
        step, tried_mib = int(m.group(1)), float(m.group(2))
        free_mib, total_mib = int(m.group(3)), int(m.group(4))
        expect(20 <= step <= 60, "failing step", step, "20..60")
        expect(total_mib == MEMORY // MIB, "total MiB printed", total_mib, MEMORY // MIB)

        oom = glob.glob(os.path.join(out, f"ledger.{proc.pid}.oom.*.json"))
        expect(oom == [os.path.join(out, f"ledger.{proc.pid}.oom.1.json")],
               "oom ledgers", sorted(os.path.basename(p) for p in oom),
               [f"ledger.{proc.pid}.oom.1.json"])
        expect(os.path.exists(os.path.join(out, f"ledger.{proc.pid}.exit.json")),
               "exit ledger written", False, True)
        if not oom:
            print("\n".join(f"FAIL: {f}" for f in failures))
            return 1
        with open(oom[0]) as f:
            ledger: Dict[str, Any] = json.load(f)
        check_ledger(ledger, step, tried_mib, free_mib)
        if lib is not None:
            check_traced(stderr, ledger, tried_mib)
            failures.extend(schema_check.validate(schema_check.snapshot_files(out)))

        tool = subprocess.run([sys.executable, ledger_tool, oom[0]],
                              capture_output=True, text=True, timeout=60)
        expect(tool.returncode == 0, "gmtsim-ledger exit status", tool.returncode, 0)
        expect(f"failed request: cuMemAllocAsync of {tried_mib:.2f} MiB" in tool.stdout,
               "gmtsim-ledger names the failed request", tool.stdout, tried_mib)

    for f in failures:
        print(f"FAIL: {f}")
    if not failures:
        print(f"ok: out of memory at step {step}, ledger agrees" +
              (", the tracer's report and snapshot too" if lib else ""))
    return 1 if failures else 0


def check_ledger(ledger: Dict[str, Any], step: int, tried_mib: float,
                 free_mib: int) -> None:
    req = ledger["failed_request"]
    expect(req["api"] == "cuMemAllocAsync", "failed_request.api", req["api"],
           "cuMemAllocAsync")
    expect(req["size"] == round(tried_mib * MIB), "failed_request.size",
           req["size"], round(tried_mib * MIB))
    expect((req["device"], req["result"]) == (0, 2), "failed_request device/result",
           (req["device"], req["result"]), (0, 2))
    dev = ledger["devices"][0]
    expect(dev["total_bytes"] == MEMORY, "devices[0].total_bytes",
           dev["total_bytes"], MEMORY)
    # train_loop printed cudaMemGetInfo's answer right after the failure.
    expect(dev["free_bytes"] // MIB == free_mib, "devices[0].free_bytes in MiB",
           dev["free_bytes"] // MIB, free_mib)
    expect(dev["pages_context"] == CONTEXT // PAGE, "devices[0].pages_context",
           dev["pages_context"], CONTEXT // PAGE)

    live = ledger["live"]
    by_kind: Dict[str, List[int]] = {}
    for a in live:
        by_kind.setdefault(a["kind"], []).append(a["size"])
    expect(sorted(by_kind.get("device", [])), "device allocations (weights, Adam)",
           sorted(by_kind.get("device", [])), sorted(WEIGHTS * 3))
    expect(by_kind.get("host", []) == [STAGING], "host allocations (staging)",
           by_kind.get("host", []), [STAGING])
    # Stream-ordered: step - 1 cached activations, then the failing step's
    # activations allocated before the one that failed.
    cache = [ACTS[-1]] * (step - 1)
    asyncs = sorted(by_kind.get("async", []))
    prefixes = [sorted(cache + ACTS[:n]) for n in range(len(ACTS) + 1)]
    expect(asyncs in prefixes, "async allocations", asyncs,
           f"{step - 1} x {ACTS[-1]} + a prefix of {ACTS}")
    n = next((i for i, p in enumerate(prefixes) if p == asyncs), None)
    if n is not None and n < len(ACTS):
        expect(req["size"] == ACTS[n], "failed_request.size (next activation)",
               req["size"], ACTS[n])
    expect(set(by_kind) <= {"device", "host", "async"}, "kinds", sorted(by_kind),
           ["async", "device", "host"])


if __name__ == "__main__":
    sys.exit(main())
