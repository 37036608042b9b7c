#!/usr/bin/env python3
"""Unit test of tools/gmtsim-ledger: summaries of a ledger with known contents,
80-column output, and one clear line (exit 2, no traceback) for every kind of
broken file. Run directly or by meson (suite 'unit')."""

from __future__ import annotations

import copy
import importlib.machinery
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import unittest
from typing import Any, Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
TOOL = os.path.join(HERE, "gmtsim-ledger")
MIB = 1 << 20


def _load_tool() -> Any:
    # The tool is a script without .py; load it as a module by path.
    loader = importlib.machinery.SourceFileLoader("gmtsim_ledger", TOOL)
    spec = importlib.util.spec_from_loader("gmtsim_ledger", loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    # dataclasses look their module up in sys.modules while the class is built.
    sys.modules["gmtsim_ledger"] = module
    loader.exec_module(module)
    return module


tool = _load_tool()

# An out-of-memory ledger as docs/simulator.md describes it: 64 MiB device of 32
# pages, 2 pages of context, 4 of other processes; live: 3 device allocations
# (24 MiB + 8 MiB + 1 KiB), 2 async (6 MiB each, pool reserves 12 MiB), 1 pinned
# host buffer of 4 MiB (device -1). 32 - 2 - 4 - 12 (device) - 6 (pool) - 1 (the
# page holding the 1 KiB) = 7 pages free; the 16 MiB request failed.
LEDGER: Dict[str, Any] = {
    "format": "gmtsim-ledger", "version": 1, "pid": 4242, "reason": "oom",
    "driver_version": 13000,
    "devices": [{"index": 0, "total_bytes": 64 * MIB, "free_bytes": 14 * MIB,
                 "page_size": 2 * MIB, "pages_total": 32, "pages_free": 7,
                 "pages_other_processes": 4, "pages_context": 2,
                 "pool_reserved_bytes": 12 * MIB, "pool_used_bytes": 12 * MIB}],
    "live": [
        {"address": "0x7f0000000000", "size": 4 * MIB, "kind": "host", "device": -1,
         "api": "cuMemAllocHost_v2"},
        {"address": "0x200000000", "size": 24 * MIB, "kind": "device", "device": 0,
         "api": "cuMemAlloc_v2"},
        {"address": "0x201800000", "size": 8 * MIB, "kind": "device", "device": 0,
         "api": "cuMemAlloc_v2"},
        {"address": "0x202000000", "size": 1024, "kind": "device", "device": 0,
         "api": "cuMemAllocPitch_v2"},
        {"address": "0x300000000", "size": 6 * MIB, "kind": "async", "device": 0,
         "api": "cuMemAllocAsync"},
        {"address": "0x300600000", "size": 6 * MIB, "kind": "async", "device": 0,
         "api": "cuMemAllocAsync"},
    ],
    "pools": [{"handle": "0x55d0c0de0000", "device": 0, "default": True,
               "reserved_bytes": 12 * MIB, "used_bytes": 12 * MIB,
               "release_threshold": 2**64 - 1}],
    "vmm": {"reservations": [{"address": "0x400000000", "size": 32 * MIB}],
            "mappings": []},
    "totals": {"allocs": 9, "frees": 3, "oom": 1},
    "calls": {"cuInit": 1, "cuMemAlloc_v2": 3, "cuMemAllocAsync": 3},
    "failed_request": {"api": "cuMemAllocAsync", "size": 16 * MIB, "device": 0,
                       "result": 2},
}


def run_tool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, TOOL, *args], capture_output=True,
                          text=True, stdin=subprocess.DEVNULL, timeout=60)


class Summaries(unittest.TestCase):
    def summary(self, doc: Dict[str, Any], top: int = 10) -> Any:
        return tool.summarise(tool.parse(copy.deepcopy(doc)), "x.json", top)

    def test_totals_and_groups(self) -> None:
        s = self.summary(LEDGER)
        self.assertEqual(s.reason, "oom")
        self.assertEqual(s.pid, 4242)
        self.assertEqual(s.live_count, 6)
        self.assertEqual(s.live_bytes, 48 * MIB + 1024)
        self.assertEqual([(g.name, g.count, g.bytes) for g in s.by_kind],
                         [("device", 3, 32 * MIB + 1024), ("async", 2, 12 * MIB),
                          ("host", 1, 4 * MIB)])
        self.assertEqual([(g.name, g.count, g.bytes) for g in s.by_api],
                         [("cuMemAlloc_v2", 2, 32 * MIB),
                          ("cuMemAllocAsync", 2, 12 * MIB),
                          ("cuMemAllocHost_v2", 1, 4 * MIB),
                          ("cuMemAllocPitch_v2", 1, 1024)])
        self.assertEqual([(g.kind, g.size, g.count) for g in s.by_size],
                         [("device", 24 * MIB, 1), ("async", 6 * MIB, 2),
                          ("device", 8 * MIB, 1), ("host", 4 * MIB, 1),
                          ("device", 1024, 1)])
        self.assertEqual(self.summary(LEDGER, top=2).by_size[1].bytes, 12 * MIB)
        self.assertEqual((s.allocs, s.frees, s.ooms), (9, 3, 1))
        self.assertEqual((s.vmm_reservations, s.vmm_reserved_bytes), (1, 32 * MIB))
        self.assertEqual((s.vmm_mappings, s.vmm_mapped_bytes), (0, 0))

    def test_device_accounting(self) -> None:
        d = self.summary(LEDGER).devices[0]
        # Host memory (device -1) is not device memory.
        self.assertEqual((d.live_count, d.live_bytes), (5, 44 * MIB + 1024))
        self.assertEqual(d.pages_this_process, 32 - 7 - 4 - 2)
        self.assertEqual((d.pool_reserved_bytes, d.pool_used_bytes),
                         (12 * MIB, 12 * MIB))

    def test_failed_request(self) -> None:
        f = self.summary(LEDGER).failed_request
        self.assertEqual((f.api, f.size, f.device, f.result),
                         ("cuMemAllocAsync", 16 * MIB, 0, 2))
        doc = copy.deepcopy(LEDGER)
        doc["reason"] = "exit"
        del doc["failed_request"]
        self.assertIsNone(self.summary(doc).failed_request)

    def test_largest_sorted_and_capped(self) -> None:
        s = self.summary(LEDGER, top=3)
        self.assertEqual([(a.size, a.address) for a in s.largest],
                         [(24 * MIB, 0x200000000), (8 * MIB, 0x201800000),
                          (6 * MIB, 0x300000000)])
        self.assertEqual(self.summary(LEDGER, top=0).largest, [])

    def test_empty_live_set(self) -> None:
        doc = copy.deepcopy(LEDGER)
        doc["live"] = []
        s = self.summary(doc)
        self.assertEqual((s.live_count, s.live_bytes, s.by_kind, s.by_size,
                          s.largest), (0, 0, [], [], []))
        tool.format_summary(s)

    def test_fmt_bytes(self) -> None:
        for n, text in [(0, "0 B"), (1023, "1023 B"), (1024, "1.00 KiB"),
                        (256 * MIB, "256.00 MiB"), (3 * MIB // 2, "1.50 MiB"),
                        (80 << 30, "80.00 GiB"), (5 << 40, "5.00 TiB")]:
            self.assertEqual(tool.fmt_bytes(n), text, f"fmt_bytes({n})")

    def test_80_columns(self) -> None:
        doc = copy.deepcopy(LEDGER)
        doc["live"][1]["api"] = "cuMemAllocFromPoolAsync_ptsz_with_a_long_name_x"
        doc["failed_request"]["api"] = "cuMemAllocFromPoolAsync_ptsz_and_more_text"
        doc["devices"][0]["total_bytes"] = 2**53
        lines = tool.format_summary(self.summary(doc))
        for line in lines[1:]:  # the first names the file, as long as its path
            self.assertLessEqual(len(line), 80, f"too wide: {line!r}")
        text = "\n".join(lines)
        for needle in ["oom ledger of pid 4242, driver version 13000",
                       "failed request: cuMemAllocFromPool", "16.00 MiB",
                       "7 free", "default", "max", "24.00 MiB"]:
            self.assertIn(needle, text)


class CommandLine(unittest.TestCase):
    def setUp(self) -> None:
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)

    def write(self, name: str, data: Any) -> str:
        path = os.path.join(self.tmp.name, name)
        mode = "wb" if isinstance(data, bytes) else "w"
        with open(path, mode) as f:
            f.write(data if isinstance(data, (bytes, str)) else json.dumps(data))
        return path

    def test_good_file(self) -> None:
        path = self.write("ledger.4242.oom.1.json", LEDGER)
        r = run_tool(path)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stderr, "")
        self.assertIn("failed request: cuMemAllocAsync of 16.00 MiB on device 0",
                      r.stdout)
        self.assertIn("live: 6 allocations, 48.00 MiB", r.stdout)

    def broken(self) -> List[Any]:
        """(name, contents, what the message must say) for each way to be wrong."""
        def edit(fn: Any) -> Dict[str, Any]:
            doc = copy.deepcopy(LEDGER)
            fn(doc)
            return doc
        return [
            ("empty", "", "empty file"),
            ("blank", " \n\t\n", "empty file"),
            ("text", "hello", "not JSON: line 1 column 1"),
            ("truncated", json.dumps(LEDGER)[:200], "not JSON"),
            ("binary", b"\xff\xfe\x00garbage", "not UTF-8"),
            ("array", [1, 2], "expected a JSON object, got a list"),
            ("snapshot", edit(lambda d: d.update(format="gpumemtrace-snapshot")),
             "not a simulator ledger"),
            ("noformat", edit(lambda d: d.pop("format")), "not a simulator ledger"),
            ("version", edit(lambda d: d.update(version=2)), "version 2 is not supported"),
            ("reason", edit(lambda d: d.update(reason="crash")), "reason: 'crash'"),
            ("nodevices", edit(lambda d: d.pop("devices")), "devices is missing"),
            ("devtype", edit(lambda d: d["devices"][0].update(free_bytes="12")),
             "devices[0].free_bytes: expected an integer, got a string"),
            ("booltotal", edit(lambda d: d["devices"][0].update(total_bytes=True)),
             "devices[0].total_bytes: expected an integer, got a boolean"),
            ("negsize", edit(lambda d: d["live"][2].update(size=-5)),
             "live[2].size: -5 is below 0"),
            ("kind", edit(lambda d: d["live"][0].update(kind="gpu")), "live[0].kind"),
            ("address", edit(lambda d: d["live"][3].update(address="12345")),
             "live[3].address"),
            ("livenotobj", edit(lambda d: d.update(live=[1])),
             "live[0]: expected an object, got an integer"),
            ("nofailed", edit(lambda d: d.pop("failed_request")),
             "failed_request is missing"),
            ("vmm", edit(lambda d: d.update(vmm=[])), "vmm: expected an object"),
            ("calls", edit(lambda d: d["calls"].update(cuInit=None)),
             "calls.cuInit: expected an integer, got null"),
            ("bigint", '{"format": "gmtsim-ledger", "version": ' + "9" * 5000 + "}",
             "not a usable JSON document"),
            ("deep", "[" * 100000 + "]" * 100000, "not a usable JSON document"),
        ]

    def test_broken_files(self) -> None:
        for name, contents, message in self.broken():
            with self.subTest(name):
                path = self.write(name + ".json", contents)
                r = run_tool(path)
                self.assertEqual(r.returncode, 2, f"{name}: {r.stdout}{r.stderr}")
                self.assertEqual(r.stdout, "")
                lines = r.stderr.splitlines()
                self.assertEqual(len(lines), 1, f"{name}: {r.stderr!r}")
                self.assertTrue(lines[0].startswith(f"gmtsim-ledger: {path}: "),
                                lines[0])
                self.assertIn(message, lines[0])

    def test_missing_file_and_directory(self) -> None:
        for path, message in [(os.path.join(self.tmp.name, "none.json"),
                               "No such file or directory"),
                              (self.tmp.name, "is a directory")]:
            r = run_tool(path)
            self.assertEqual((r.returncode, r.stderr),
                             (2, f"gmtsim-ledger: {path}: {message}\n"))

    def test_one_bad_among_good(self) -> None:
        good = self.write("good.json", LEDGER)
        bad = self.write("bad.json", "{")
        r = run_tool(good, bad)
        self.assertEqual(r.returncode, 2)
        self.assertIn("oom ledger of pid 4242", r.stdout)
        self.assertEqual(r.stderr.count("\n"), 1)
        self.assertIn(f"gmtsim-ledger: {bad}: not JSON", r.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
