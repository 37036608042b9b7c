#!/usr/bin/env python3
"""Checks how libgpumemtrace.so is linked:

- exports: its dynamic symbol table defines exactly the symbols of the version
  script (src/libgpumemtrace.map), and those are exactly the hooks of
  src/intercept/hooks.h's GMT_HOOKS list plus dlsym, dlclose and the public
  API's table gmt_api_v1 — nothing internal leaks out;
- glibc: no symbol version newer than the architecture's baseline (2.17) is
  required, and libdl.so.2 and libpthread.so.0 are NEEDED where their
  functions are used, so the library loads on glibc before 2.34
  (docs/internals.md, "Portability").

Usage: check_library.py LIB SRCDIR --objdump OBJDUMP
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys


def dynamic_symbols(objdump: str, lib: str) -> list[tuple[str, str, bool]]:
    """(name, version, defined) for every dynamic symbol."""
    out = subprocess.run([objdump, "-T", lib], check=True, stdout=subprocess.PIPE, text=True).stdout
    rows = []
    for line in out.splitlines():
        m = re.match(r"^[0-9a-f]+\s+.*?\s(\*UND\*|\.\S+)\s+[0-9a-f]+\s+(\(?[\w.@]*\)?)\s+(\S+)$", line)
        if m:
            rows.append((m.group(3), m.group(2).strip("()"), m.group(1) != "*UND*"))
    return rows


def map_globals(path: str) -> set[str]:
    text = re.sub(r"/\*.*?\*/", "", open(path, encoding="utf-8").read(), flags=re.S)
    body = text.split("global:", 1)[1].split("local:", 1)[0]
    return {s.strip() for s in body.replace("\n", " ").split(";") if s.strip()}


def hook_list(path: str) -> set[str]:
    text = open(path, encoding="utf-8").read()
    block = text.split("#define GMT_HOOKS(X)", 1)[1].split("\n\n", 1)[0]
    return set(re.findall(r"X\((\w+),", block))


def needed(objdump: str, lib: str) -> set[str]:
    out = subprocess.run([objdump, "-p", lib], check=True, stdout=subprocess.PIPE, text=True).stdout
    return {line.split()[1] for line in out.splitlines() if line.strip().startswith("NEEDED")}


def version_tuple(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split("_", 1)[1].split("."))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("lib")
    ap.add_argument("srcdir")
    ap.add_argument("--objdump", default="objdump")
    args = ap.parse_args()

    syms = dynamic_symbols(args.objdump, args.lib)
    exported = {name for name, _, defined in syms if defined}
    wanted = map_globals(f"{args.srcdir}/src/libgpumemtrace.map")
    hooks = hook_list(f"{args.srcdir}/src/intercept/hooks.h") | {"dlsym", "dlclose", "gmt_api_v1"}
    problems = []
    if exported != wanted:
        problems.append(f"exported but not in the version script: {sorted(exported - wanted)}; "
                        f"in the version script but not exported: {sorted(wanted - exported)}")
    if wanted != hooks:
        problems.append(f"version script vs GMT_HOOKS + dlsym + dlclose + gmt_api_v1: only in the script: {sorted(wanted - hooks)}; "
                        f"only in GMT_HOOKS: {sorted(hooks - wanted)}")
    too_new = sorted({f"{name}@{ver}" for name, ver, defined in syms
                      if not defined and ver.startswith("GLIBC_") and version_tuple(ver) > (2, 17)})
    if too_new:
        problems.append(f"requires glibc symbol versions newer than 2.17: {too_new}")
    # Before glibc 2.34 the pinned dl* and pthread_* functions live in libdl and
    # libpthread: those must be loaded with the library, or it fails to load there.
    deps = needed(args.objdump, args.lib)
    undefined = {name for name, ver, defined in syms if not defined and ver.startswith("GLIBC_")}
    for prefix, soname in (("dl", "libdl.so.2"), ("pthread_", "libpthread.so.0")):
        users = sorted(n for n in undefined if n.startswith(prefix) and n != "dl_iterate_phdr")
        if users and soname not in deps:
            problems.append(f"uses {users[:3]} but does not need {soname} (NEEDED: {sorted(deps)})")
    for p in problems:
        print("FAIL:", p)
    if not problems:
        print(f"ok: {len(exported)} exported symbols, all hooks; no glibc version above 2.17 required")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
