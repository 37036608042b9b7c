#!/usr/bin/env python3
"""Unit test of docs/snapshot.schema.json and tools/validate_snapshot.py: a
made-up oom snapshot with every section passes, and so do the same with keys
the schema does not know (readers must ignore them) and an exit snapshot made
from it; each broken copy (a required key missing, a wrong type, a bad kind,
failed_request in an exit snapshot, a Python frame with an address...) fails
with one line naming the file and the place. Runs the validator the way the
harnesses do (schema_check.py), so it fails, saying what to install, when no
interpreter here has jsonschema.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from typing import Any, Callable, Dict, List, Tuple

import schema_check

MIB = 1 << 20

FRAME_NATIVE = {"address": "0x55d0c0001785", "offset": "0x1785", "module": "/opt/train",
                "function": "cudaMalloc", "file": "memory.c", "line": 52, "inlined": False, "python": False}
FRAME_INLINED = {"address": "0x55d0c000119a", "offset": "0x119a", "module": "/opt/train",
                 "function": "keep", "file": "train.c", "line": 21, "inlined": True, "python": False}
FRAME_UNKNOWN = {"address": "0x10", "module": "?", "function": None, "file": None, "line": None,
                 "inlined": False, "python": False}
FRAME_PYTHON = {"address": None, "module": None, "function": "Model.forward", "file": "/src/train.py",
                "line": 49, "inlined": False, "python": True}

GOOD: Dict[str, Any] = {
    "format": "gpumemtrace-snapshot", "version": 1, "reason": "oom", "seq": 1,
    "time_ns": 1795268024089541568, "pid": 3776, "argv": ["./train", "--steps", "10"],
    "summary": {"live_bytes": 24 * MIB + 4096, "live_count": 3, "peak_bytes": 64 * MIB,
                "total_allocs": 64, "total_frees": 61},
    "process": {"pid": 3776, "ppid": 3700, "host": "node7", "rank": 3, "local_rank": 1, "world_size": 8,
                "rank_variable": "RANK"},
    "devices": [
        {"index": 0, "total_bytes": 256 * MIB, "free_bytes": 16 * MIB, "live_bytes": 24 * MIB,
         "kinds": {"device": 20 * MIB, "vmm": 4 * MIB},
         "pools": {"count": 1, "reserved_bytes": 0, "used_bytes": 0},
         "pages": {"granularity": 2 * MIB, "granularity_known": True, "pages": 10, "partial": 1,
                   "stranded_bytes": MIB, "occupancy": [0, 1, 0, 0, 9]},
         "other_processes": {"known": True, "bytes": 32 * MIB, "count": 1,
                             "processes": [{"pid": 4000, "bytes": 32 * MIB}]}},
        {"index": 1, "total_bytes": None, "free_bytes": None, "live_bytes": 0, "kinds": {}, "pools": None,
         "pages": {"granularity": 2 * MIB, "granularity_known": False, "pages": 0, "partial": 0,
                   "stranded_bytes": 0, "occupancy": [0, 0, 0, 0, 0]},
         "other_processes": None},
    ],
    "failed_request": {"api": "cuMemAlloc_v2", "size": 20 * MIB, "kind": "device", "device": 0, "result": 2,
                       "failure": 1, "stack": 1},
    "diagnosis": {
        "verdict": "growth",
        "summary": "growth: 20.0 MiB requested with 16.0 MiB free of 256 MiB; ...",
        "verdicts": [
            {"name": "growth", "primary": True, "bytes": 18 * MIB,
             "rests_on": ["growth_bytes", "growth_sites", "shortfall_bytes"], "detail": "1 site kept growing"},
            {"name": "other_processes", "primary": False, "bytes": 32 * MIB,
             "rests_on": ["other_processes_bytes", "shortfall_bytes"], "detail": "1 other process"},
        ],
        "numbers": {"device": 0, "requested_bytes": 20 * MIB, "needed_bytes": 20 * MIB, "granularity": 2 * MIB,
                    "total_bytes": 256 * MIB, "free_bytes": 16 * MIB, "used_bytes": 240 * MIB,
                    "shortfall_bytes": 4 * MIB,
                    "tracked_bytes": {"device": 20 * MIB, "async": 0, "managed": 0, "vmm": 4 * MIB, "array": 0},
                    "tracked_total_bytes": 24 * MIB, "footprint_bytes": 24 * MIB,
                    "pool_reserved_bytes": 0, "pool_used_bytes": 0, "pool_unused_bytes": 0,
                    "other_processes_bytes": 32 * MIB, "untracked_bytes": None, "pages": 10,
                    "pages_partial": 1, "stranded_bytes": MIB, "growth_bytes": 18 * MIB, "growth_sites": 1,
                    "growth_stacks": [1]},
    },
    "stats": {"events": 125, "ring_full": 0, "oom_suppressed": 0, "snapshots": 0, "snapshot_errors": 0},
    "allocations": [
        {"address": "0x5500000000", "size": 4096, "device": -1, "kind": "host", "seq": 3, "api": "cuMemHostAlloc",
         "thread": 3776, "time_ns": 1795268024088871245, "stack": 0},
        {"address": "0x7f1df3900000", "size": 20 * MIB, "device": 0, "kind": "device", "seq": 2,
         "api": "cuMemAlloc_v2", "thread": 3777, "time_ns": 1795268024088871246, "stack": 1},
        {"address": "0x42", "size": 4 * MIB, "device": 0, "kind": "vmm", "refs": 1, "mappings": 1,
         "api": "cuMemCreate", "thread": 3776, "time_ns": 1795268024088871247, "stack": 2},
    ],
    "vmm": {
        "reservations": [{"address": "0x7e0000000000", "size": 1 << 30, "device": 0, "seq": 5,
                          "api": "cuMemAddressReserve", "thread": 3776, "time_ns": 1795268024088871248,
                          "stack": 0}],
        "mappings": [{"address": "0x7e0000000000", "size": 4 * MIB, "device": 0, "handle": "0x42", "offset": 0,
                      "api": "cuMemMap", "thread": 3776, "time_ns": 1795268024088871249, "stack": 2}],
    },
    "sites": [
        {"stack": 1, "live_bytes": 20 * MIB, "live_count": 1, "allocs": 12, "alloc_bytes": 240 * MIB,
         "peak_bytes": 20 * MIB, "rising_windows": 5, "falling_windows": 1, "growth_bytes": 18 * MIB,
         "growing": True},
        {"stack": 0, "live_bytes": 4096, "live_count": 1, "allocs": 1, "alloc_bytes": 4096, "peak_bytes": 4096,
         "rising_windows": 0, "falling_windows": 0, "growth_bytes": 0, "growing": False},
    ],
    "series": {"interval_ns": 10000000, "start_ns": 1795268024000000000, "columns_dropped": 0,
               "time_ns": [1795268024010000000, 1795268024089541568],
               "columns": [{"device": 0, "kind": "device", "live_bytes": [0, 20 * MIB],
                            "max_bytes": [2 * MIB, 20 * MIB]},
                           {"device": -1, "kind": "host", "live_bytes": [4096, 4096],
                            "max_bytes": [4096, 4096]}]},
    "history": {"capacity": 10000, "dropped": 0, "events": [
        {"op": "alloc", "seq": 2, "time_ns": 1795268024088871246, "address": "0x7f1df3900000", "size": 20 * MIB,
         "kind": "device", "device": 0, "api": "cuMemAlloc_v2", "thread": 3777, "stack": 1},
        {"op": "free", "seq": 4, "time_ns": 1795268024088871250, "address": "0x7f1df5900000", "size": MIB,
         "kind": "async", "device": 0, "api": "cuMemFreeAsync", "thread": 3777, "stack": 1},
        {"op": "oom", "seq": 1, "time_ns": 1795268024089541568, "address": None, "size": 20 * MIB,
         "kind": "device", "device": 0, "api": "cuMemAlloc_v2", "thread": 3777, "stack": 1},
    ]},
    "stacks": [
        {"id": 1, "runtime_call": "cudaMalloc", "tags": ["train", "forward"],
         "frames": [FRAME_NATIVE, FRAME_INLINED, FRAME_UNKNOWN, FRAME_PYTHON]},
        {"id": 2, "runtime_call": None, "tags": [], "frames": []},
    ],
    "modules": [{"path": "/opt/train", "base": "0x55d0c0000000",
                 "build_id": "993476002b5163c163c5c4d3923b40537d078497"},
                {"path": "/lib/x86_64-linux-gnu/libc.so.6", "base": "0x7f679a144000", "build_id": None}],
}


def exit_snapshot(doc: Dict[str, Any]) -> None:
    doc["reason"] = "exit"
    del doc["failed_request"], doc["diagnosis"]


def unknown_keys(doc: Dict[str, Any]) -> None:
    doc["future_section"] = {"anything": [1, "two"]}
    doc["allocations"][1]["future_key"] = "x"
    doc["stacks"][0]["frames"][0]["column"] = 7
    doc["devices"][0]["pages"]["future"] = None


def set_path(path: List[Any], value: Any) -> Callable[[Dict[str, Any]], None]:
    def change(doc: Dict[str, Any]) -> None:
        where = doc
        for key in path[:-1]:
            where = where[key]
        where[path[-1]] = value
    return change


def delete_path(path: List[Any]) -> Callable[[Dict[str, Any]], None]:
    def change(doc: Dict[str, Any]) -> None:
        where = doc
        for key in path[:-1]:
            where = where[key]
        del where[path[-1]]
    return change


def no_extras(doc: Dict[str, Any]) -> None:
    """Only the schema's required keys at the top level."""
    for key in ("seq", "process", "stats", "vmm", "sites", "series", "history", "modules", "diagnosis"):
        del doc[key]


def failed_in_exit(doc: Dict[str, Any]) -> None:
    doc["reason"] = "exit"


def second_primary(doc: Dict[str, Any]) -> None:
    doc["diagnosis"]["verdicts"][1]["primary"] = True


# Valid variants: the name and how to change GOOD.
VALID: List[Tuple[str, Callable[[Dict[str, Any]], None]]] = [
    ("good", lambda doc: None),
    ("unknown-keys", unknown_keys),
    ("exit", exit_snapshot),
    ("no-extras", no_extras),
    ("others-unknown", set_path(["devices", 0, "other_processes"],
                                {"known": False, "why": "NVML (libnvidia-ml.so.1) is not installed"})),
    ("no-argv", set_path(["argv"], [])),
]

# Broken variants: the name, the change, and the JSON Pointer and a piece of
# the message the validator must print for it.
BROKEN: List[Tuple[str, Callable[[Dict[str, Any]], None], str, str]] = [
    ("missing-summary", delete_path(["summary"]), "/", "'summary' is a required property"),
    ("missing-live-count", delete_path(["summary", "live_count"]), "/summary", "'live_count' is a required"),
    ("wrong-type", set_path(["summary", "live_bytes"], "12"), "/summary/live_bytes", "is not of type 'integer'"),
    ("float-size", set_path(["allocations", 1, "size"], 1.5), "/allocations/1/size", "is not of type 'integer'"),
    ("negative-size", set_path(["allocations", 1, "size"], -1), "/allocations/1/size", "less than the minimum"),
    ("bad-kind", set_path(["allocations", 1, "kind"], "pinned"), "/allocations/1/kind", "is not one of"),
    ("bad-reason", set_path(["reason"], "crash"), "/reason", "is not one of"),
    ("bad-format", set_path(["format"], "gpumemtrace"), "/format", "was expected"),
    ("version-2", set_path(["version"], 2), "/version", "was expected"),
    ("address-upper", set_path(["allocations", 1, "address"], "0x7F1DF3900000"), "/allocations/1/address",
     "does not match"),
    ("address-number", set_path(["allocations", 1, "address"], 139766126034944), "/allocations/1/address",
     "is not of type 'string'"),
    ("device-below-host", set_path(["allocations", 1, "device"], -2), "/allocations/1/device",
     "less than the minimum"),
    ("failed-request-in-exit", failed_in_exit, "/", "should not be valid"),
    ("oom-without-failed-request", delete_path(["failed_request"]), "/", "'failed_request' is a required"),
    ("python-frame-with-address", set_path(["stacks", 0, "frames", 3, "address"], "0x7f0000001000"),
     "/stacks/0/frames/3/address", "is not of type 'null'"),
    ("python-frame-with-offset", set_path(["stacks", 0, "frames", 3, "offset"], "0x10"),
     "/stacks/0/frames/3", "should not be valid"),
    ("native-frame-without-module", set_path(["stacks", 0, "frames", 0, "module"], None),
     "/stacks/0/frames/0/module", "is not of type 'string'"),
    ("line-zero", set_path(["stacks", 0, "frames", 0, "line"], 0), "/stacks/0/frames/0/line",
     "less than the minimum"),
    ("vmm-with-seq", set_path(["allocations", 2, "seq"], 9), "/allocations/2", "should not be valid"),
    ("device-without-seq", delete_path(["allocations", 1, "seq"]), "/allocations/1", "'seq' is a required"),
    ("bad-verdict", set_path(["diagnosis", "verdict"], "leak"), "/diagnosis/verdict", "is not one of"),
    ("second-primary", second_primary, "/diagnosis/verdicts/1/primary", "False was expected"),
    ("bad-rests-on", set_path(["diagnosis", "verdicts", 0, "rests_on"], ["vibes"]),
     "/diagnosis/verdicts/0/rests_on/0", "is not one of"),
    ("bad-op", set_path(["history", "events", 0, "op"], "realloc"), "/history/events/0/op", "is not one of"),
    ("oom-event-with-address", set_path(["history", "events", 2, "address"], "0x10"),
     "/history/events/2/address", "is not of type 'null'"),
    ("occupancy-short", set_path(["devices", 0, "pages", "occupancy"], [1, 2]),
     "/devices/0/pages/occupancy", "is too short"),
    ("kinds-unknown-kind", set_path(["devices", 0, "kinds", "pinned"], 1), "/devices/0/kinds",
     "is not one of"),
    ("stat-not-a-count", set_path(["stats", "ring_full"], -3), "/stats/ring_full", "less than the minimum"),
    ("build-id-0x", set_path(["modules", 0, "build_id"], "0x9934"), "/modules/0/build_id", "does not match"),
    ("others-known-without-bytes", delete_path(["devices", 0, "other_processes", "bytes"]),
     "/devices/0/other_processes", "'bytes' is a required"),
]


def write(directory: str, name: str, text: str) -> str:
    path = os.path.join(directory, name + ".json")
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path


def run_validator(python: str, paths: List[str]) -> Tuple[int, Dict[str, List[str]]]:
    """The validator's exit status and its lines by file."""
    proc = subprocess.run([python, schema_check.VALIDATOR, "--schema", schema_check.SCHEMA, "--quiet"] + paths,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300)
    by_file: Dict[str, List[str]] = {p: [] for p in paths}
    for line in proc.stdout.splitlines():
        path = next((p for p in paths if line.startswith(p + ": ")), None)
        by_file.setdefault(path or "?", []).append(line[len(path) + 2:] if path else line)
    return proc.returncode, by_file


def main() -> int:
    python = schema_check.schema_python()
    if python is None:
        print("FAIL:", schema_check.validate(["(any snapshot)"])[0])
        return 1
    work = tempfile.mkdtemp(prefix="gmt-schema-test-")
    failures: List[str] = []
    valid, broken = [], {}
    for name, change in VALID:
        doc = copy.deepcopy(GOOD)
        change(doc)
        valid.append(write(work, "valid-" + name, json.dumps(doc, indent=1)))
    for name, change, where, words in BROKEN:
        doc = copy.deepcopy(GOOD)
        change(doc)
        broken[write(work, "broken-" + name, json.dumps(doc))] = (where, words)
    # Not JSON, a key twice (the schema cannot see it), a file that is not there.
    odd = {
        write(work, "broken-truncated", json.dumps(GOOD)[:200]): "not a JSON document",
        write(work, "broken-duplicate-key", json.dumps(GOOD).replace('"seq": 1,', '"seq": 1, "seq": 2,', 1)):
            "key 'seq' twice",
        os.path.join(work, "absent.json"): "cannot read",
    }

    status, lines = run_validator(python, valid)
    if status != 0 or any(lines.values()):
        failures.append(f"valid documents: exit {status}, {lines}")
    for path in valid:
        one, _ = run_validator(python, [path])
        if one != 0:
            failures.append(f"{os.path.basename(path)}: exit {one} alone")

    status, lines = run_validator(python, list(broken) + list(odd))
    if status != 1:
        failures.append(f"broken documents: exit {status}, 1 expected")
    for path, (where, words) in broken.items():
        got = lines.get(path, [])
        if not any(line.startswith(where + ": ") and words in line for line in got):
            failures.append(f"{os.path.basename(path)}: no line '{where}: ...{words}...'; got {got}")
    for path, words in odd.items():
        got = lines.get(path, [])
        if len(got) != 1 or not got[0].startswith("/: ") or words not in got[0]:
            failures.append(f"{os.path.basename(path)}: one line '/: ...{words}...' expected; got {got}")
    if lines.get("?"):
        failures.append(f"lines naming no file: {lines['?']}")
    # The schema as published: draft 2020-12, an $id and a title.
    with open(schema_check.SCHEMA, encoding="utf-8") as f:
        schema = json.load(f)
    for key, want in (("$schema", "https://json-schema.org/draft/2020-12/schema"),):
        if schema.get(key) != want:
            failures.append(f"schema {key} is {schema.get(key)!r}, {want!r} expected")
    if not schema.get("$id") or not schema.get("title"):
        failures.append("the schema has no $id or no title")
    # Without jsonschema the tool says so in one line (when this interpreter
    # lacks it, as pyenv's python3 does beside Debian's python3-jsonschema).
    if subprocess.run([sys.executable, "-c", schema_check.PROBE], capture_output=True).returncode != 0:
        proc = subprocess.run([sys.executable, schema_check.VALIDATOR, valid[0]], capture_output=True, text=True)
        if proc.returncode != 2 or len(proc.stderr.splitlines()) != 1 or \
                not re.search("install python3-jsonschema", proc.stderr):
            failures.append(f"without jsonschema: exit {proc.returncode}, stderr {proc.stderr!r}")

    for f in failures:
        print("FAIL:", f)
    if failures:
        print(f"documents kept in {work}")
        return 1
    print(f"ok: {len(valid)} valid and {len(broken) + len(odd)} broken documents, "
          f"judged by {os.path.relpath(schema_check.SCHEMA)} under {python}")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
