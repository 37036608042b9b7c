#!/usr/bin/env python3
"""Count the results of one `meson test` run from its meson-logs/testlog.json.

Prints one line "PASSED FAILED SKIPPED" on stdout and one line per failed test on
stderr. Exit status 0 when the log was read, 2 when it is missing or unreadable:
scripts/test then counts the whole run as failed.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field

# meson's TestResult names. EXPECTEDFAIL is a test that failed as declared
# (should_fail): meson counts it as a success, and so do we.
PASSED = {"OK", "EXPECTEDFAIL"}
SKIPPED = {"SKIP"}
FAILED = {"FAIL", "TIMEOUT", "ERROR", "UNEXPECTEDPASS", "INTERRUPT"}


@dataclass
class Counts:
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    failures: list[str] = field(default_factory=list)


class LogError(Exception):
    pass


def count_lines(lines: list[str]) -> Counts:
    """Count one testlog: one JSON object per line, each with "name" and "result".
    An unknown result counts as failed: a result we cannot read is not a pass."""
    counts = Counts()
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except ValueError as e:
            raise LogError(f"line {number}: not JSON ({e})") from None
        if not isinstance(entry, dict) or not isinstance(entry.get("result"), str):
            raise LogError(f"line {number}: no \"result\"")
        result = entry["result"]
        if result in PASSED:
            counts.passed += 1
        elif result in SKIPPED:
            counts.skipped += 1
        else:
            counts.failed += 1
            counts.failures.append(f"{result:<14} {entry.get('name', '?')}")
    return counts


def count_file(path: str) -> Counts:
    try:
        with open(path, encoding="utf-8") as f:
            return count_lines(f.readlines())
    except (OSError, UnicodeDecodeError) as e:
        raise LogError(str(e)) from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("testlog", help="meson-logs/testlog.json of one build")
    args = parser.parse_args(argv)
    try:
        counts = count_file(args.testlog)
    except LogError as e:
        print(f"testlog_count: {args.testlog}: {e}", file=sys.stderr)
        return 2
    for failure in counts.failures:
        print(f"  {failure}", file=sys.stderr)
    print(counts.passed, counts.failed, counts.skipped)
    return 0


if __name__ == "__main__":
    sys.exit(main())
