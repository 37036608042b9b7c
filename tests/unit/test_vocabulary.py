#!/usr/bin/env python3
"""One definition per vocabulary: the words the tracer writes into snapshots
are listed once in C (X-macro lists), and the viewer's copies
(tools/python/gpumemtrace/view/vocab.py), its tables keyed by those words and the enums of
docs/snapshot.schema.json must equal them; the viewer's byte formatter must
write what the tracer's writes; the viewer reads a snapshot within the gate's
size cap.

usage: test_vocabulary.py SOURCE_ROOT HUMAN_BYTES_PROGRAM
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import unittest
from typing import Dict, List, Tuple

ROOT = ""
HUMAN_BYTES = ""


def x_list(header: str, name: str) -> List[Tuple[str, str]]:
    """The X(ID, "word") entries of `#define name(X)` in header, expanded
    through the lists it names (GMT_REASONS names GMT_TRIGGERS)."""
    with open(os.path.join(ROOT, header), encoding="utf-8") as f:
        text = f.read()
    m = re.search(r"^#define " + name + r"\(X\)((?:.*\\\n)*.*)$", text, re.M)
    if m is None:
        raise AssertionError(f"{header}: no #define {name}(X)")
    body = re.sub(r"/\*.*?\*/", "", m.group(1).replace("\\\n", " "))
    out: List[Tuple[str, str]] = []
    for item in re.finditer(r"(GMT_\w+)\(X\)|X\((\w+),\s*\"([^\"]*)\"\)", body):
        if item.group(1):
            out += LISTS[item.group(1)]()
        else:
            out.append((item.group(2), item.group(3)))
    return out


LISTS = {
    "GMT_KINDS": lambda: x_list("src/record/event.h", "GMT_KINDS"),
    "GMT_VERDICTS": lambda: x_list("src/analyze/diagnose.h", "GMT_VERDICTS"),
    "GMT_REMEDIES": lambda: x_list("src/analyze/diagnose.h", "GMT_REMEDIES"),
    "GMT_EPISODE_ENDS": lambda: x_list("src/analyze/capture.h", "GMT_EPISODE_ENDS"),
    "GMT_TRIGGERS": lambda: x_list("src/tracer/options.h", "GMT_TRIGGERS"),
    "GMT_LEAK_CLASSES": lambda: x_list("src/tracer/options.h", "GMT_LEAK_CLASSES"),
    "GMT_REASONS": lambda: x_list("src/analyze/capture.h", "GMT_REASONS"),
    "GMT_FRAME_ROLES": lambda: x_list("src/analyze/sites.h", "GMT_FRAME_ROLES"),
    "GMT_HIST_OPS": lambda: x_list("src/state/history.h", "GMT_HIST_OPS"),
    "GMT_RP_ACTIONS": lambda: x_list("src/analyze/replay.h", "GMT_RP_ACTIONS"),
}


def words(name: str) -> Tuple[str, ...]:
    return tuple(w for _, w in LISTS[name]())


def schema_enum(*path: object) -> Tuple[str, ...]:
    with open(os.path.join(ROOT, "docs", "snapshot.schema.json"), encoding="utf-8") as f:
        node = json.load(f)
    for key in path:
        node = node[key]
    return tuple(node["enum"])


class Vocabulary(unittest.TestCase):
    def setUp(self) -> None:
        sys.path.insert(0, os.path.join(ROOT, "tools", "python"))
        from gpumemtrace.view import summary, vocab
        self.vocab = vocab
        self.summary = summary

    def test_lists_parse(self) -> None:
        # A list the parser cannot read would make every comparison vacuous.
        for name in LISTS:
            with self.subTest(name=name):
                self.assertGreaterEqual(len(words(name)), 3, name)

    def test_kinds(self) -> None:
        self.assertEqual(self.vocab.KINDS, words("GMT_KINDS"))
        self.assertEqual(schema_enum("$defs", "kind"), words("GMT_KINDS"))
        self.assertLessEqual(set(self.vocab.HOST_KINDS), set(words("GMT_KINDS")))

    def test_verdicts(self) -> None:
        self.assertEqual(self.vocab.VERDICTS, words("GMT_VERDICTS"))
        self.assertEqual(schema_enum("$defs", "verdict"), words("GMT_VERDICTS"))

    def test_remedies(self) -> None:
        self.assertEqual(self.vocab.REMEDIES, words("GMT_REMEDIES"))
        self.assertEqual(schema_enum("$defs", "remedy"), words("GMT_REMEDIES"))

    def test_leak_classes(self) -> None:
        self.assertEqual(self.vocab.LEAK_CLASSES, words("GMT_LEAK_CLASSES"))
        leaks = ("$defs", "leaks", "properties")
        self.assertEqual(schema_enum(*leaks, "classes", "items"), words("GMT_LEAK_CLASSES"))
        self.assertEqual(schema_enum(*leaks, "sites", "items", "properties", "class"),
                         words("GMT_LEAK_CLASSES"))

    def test_reasons(self) -> None:
        self.assertEqual(self.vocab.TRIGGERS, words("GMT_TRIGGERS"))
        self.assertEqual(self.vocab.REASONS, words("GMT_REASONS"))
        self.assertEqual(words("GMT_REASONS")[:len(words("GMT_TRIGGERS"))], words("GMT_TRIGGERS"))
        self.assertEqual(schema_enum("properties", "reason"), words("GMT_REASONS"))
        self.assertEqual(set(self.summary._REASONS), set(words("GMT_REASONS")))

    def test_frame_roles(self) -> None:
        self.assertEqual(self.vocab.FRAME_ROLES, words("GMT_FRAME_ROLES"))
        self.assertEqual(schema_enum("$defs", "frame", "properties", "role"), words("GMT_FRAME_ROLES"))

    def test_episode_ends(self) -> None:
        self.assertEqual(self.vocab.EPISODE_ENDS, words("GMT_EPISODE_ENDS"))
        self.assertEqual(schema_enum("$defs", "episode", "properties", "end"), words("GMT_EPISODE_ENDS"))

    def test_duration_formatter(self) -> None:
        from gpumemtrace.view.text import fmt_duration
        values = [0, 1, 999, 1000, 123456, 999_499, 999_999_999, 1_000_000_000, 9_999_000_000,
                  10_000_000_000, 59_990_000_000, 60_000_000_000, 3_599_000_000_000, 3_600_000_000_000,
                  47 * 3600 * 10**9, 48 * 3600 * 10**9, 1000 * 3600 * 10**9]
        values += [k * 7919 * 10 ** e for k in range(1, 20) for e in range(0, 12, 2)]
        out = subprocess.run([HUMAN_BYTES, "--duration", *map(str, values)], check=True,
                             stdout=subprocess.PIPE, text=True).stdout.splitlines()
        self.assertEqual(len(out), len(values))
        for n, c in zip(values, out):
            self.assertEqual(fmt_duration(n), c, f"{n} ns")

    def test_history_ops(self) -> None:
        self.assertEqual(self.vocab.HIST_OPS, words("GMT_HIST_OPS"))
        self.assertEqual(schema_enum("$defs", "event", "properties", "op"), words("GMT_HIST_OPS"))

    def test_allocator_history_actions(self) -> None:
        """PyTorch's history actions: what the bootstrap hands over, what the
        snapshot's allocator_history allows, what the replay reads."""
        from gpumemtrace import frameworks
        self.assertEqual(frameworks._TRACE_ACTIONS, words("GMT_RP_ACTIONS"))
        self.assertEqual(schema_enum("$defs", "framework", "properties", "allocator_history", "items", "properties",
                                     "events", "items", "prefixItems", 0), words("GMT_RP_ACTIONS"))

    def test_input_cap(self) -> None:
        # The gate and the viewer read a snapshot by one rule: the same cap.
        from gpumemtrace.view import load
        with open(os.path.join(ROOT, "src", "util", "input.h"), encoding="utf-8") as f:
            m = re.search(r"#define GMT_SNAPSHOT_MAX_BYTES \(\(uint64_t\)(\d+) << (\d+)\)", f.read())
        self.assertIsNotNone(m)
        assert m is not None
        self.assertEqual(load.MAX_BYTES, int(m.group(1)) << int(m.group(2)))

    def test_byte_formatter(self) -> None:
        from gpumemtrace.view.model import fmt_bytes
        values = [0, 1, 1023, 1024, 1025, 1536, 10 * 1024 - 1, 10 * 1024, 10 * 1024 + 512,
                  100 * 1024 - 1, 100 * 1024, 1023 * 1024, 1024 * 1024 - 1, 1024 * 1024,
                  640 << 20, (1 << 30) - 1, 3 << 30, 80 << 30, 5 << 40, 7 << 50, 1 << 60,
                  (1 << 64) - 1]
        values += [(k * 7919) << s for k in range(1, 40) for s in (0, 7, 13, 21, 29, 37)]
        out = subprocess.run([HUMAN_BYTES, *map(str, values)], check=True,
                             stdout=subprocess.PIPE, text=True).stdout.splitlines()
        self.assertEqual(len(out), len(values))
        for n, c in zip(values, out):
            self.assertEqual(fmt_bytes(n), c, f"{n} bytes")


if __name__ == "__main__":
    ROOT, HUMAN_BYTES = sys.argv[1], sys.argv[2]
    unittest.main(argv=sys.argv[:1], verbosity=2)
