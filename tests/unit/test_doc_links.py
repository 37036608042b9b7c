#!/usr/bin/env python3
"""Every relative link of README.md and docs/*.md leads somewhere: the file
exists, and an anchor (#section) names one of its headings (GitHub's way of
making anchors: lower case, punctuation dropped, spaces as hyphens).

usage: test_doc_links.py SOURCE_ROOT"""
from __future__ import annotations

import glob
import os
import re
import sys
from typing import Dict, List, Set

LINK = re.compile(r"\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*$", re.M)
FENCE = re.compile(r"^```.*?^```", re.M | re.S)


def anchor(heading: str) -> str:
    text = re.sub(r"[`*_]", "", heading).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors_of(path: str, cache: Dict[str, Set[str]]) -> Set[str]:
    if path not in cache:
        with open(path, encoding="utf-8") as f:
            text = FENCE.sub("", f.read())
        cache[path] = {anchor(h) for h in HEADING.findall(text)}
    return cache[path]


def main() -> int:
    root = sys.argv[1]
    files = [os.path.join(root, "README.md")] + sorted(glob.glob(os.path.join(root, "docs", "*.md")))
    cache: Dict[str, Set[str]] = {}
    problems: List[str] = []
    for path in files:
        with open(path, encoding="utf-8") as f:
            text = FENCE.sub("", f.read())
        for target in LINK.findall(text):
            if re.match(r"^[a-z]+:", target):
                continue  # https:, mailto:
            file_part, _, frag = target.partition("#")
            dest = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part else path
            rel = os.path.relpath(path, root)
            if not os.path.exists(dest):
                problems.append(f"{rel}: {target}: no such file")
            elif frag and dest.endswith(".md") and frag not in anchors_of(dest, cache):
                problems.append(f"{rel}: {target}: no heading makes #{frag}")
    for p in problems:
        print("FAIL", p)
    print(f"{len(files)} documents, {len(problems)} broken link(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
