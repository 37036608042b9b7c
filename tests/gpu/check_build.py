#!/usr/bin/env python3
"""Checks that each program of the real-GPU suite that nvcc built is linked
the way its row of the matrix means (docs/gpu-suite.md), from its ELF
headers alone (readelf; nothing is run, no GPU needed):

  static   nvcc's default: cudart linked in (cudaMalloc defined in .symtab,
           not exported), no libcudart.so and no libcuda.so needed, device
           code embedded (.nv_fatbin);
  shared   -cudart shared: libcudart.so.13 needed, cudaMalloc an undefined
           dynamic symbol, no cudaMalloc of its own, device code embedded;
  driver   -lcuda: libcuda.so.1 needed, cuMemAlloc_v2 an undefined dynamic
           symbol (called through the PLT), no libcudart.so;
  loader   a private loader: neither libcuda.so nor libcudart.so needed, no
           cuMemAlloc_v2 symbol at all, dlopen and dlsym undefined dynamic
           symbols.

Usage: check_build.py [--readelf READELF] LINKAGE=PROGRAM...
Exit status 0 when every program is linked as its linkage says.
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys

LINKAGES = ("static", "shared", "driver", "loader")


def readelf(tool: str, *args: str) -> str:
    proc = subprocess.run([tool, "-W", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{tool} {' '.join(args)}: {proc.stderr.strip()}")
    return proc.stdout


def needed(tool: str, path: str) -> list[str]:
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", readelf(tool, "-d", path))


def symbols(tool: str, path: str, table: str) -> dict[str, str]:
    """name -> "UND" or "DEF" for the symbols of .dynsym or .symtab
    (versions stripped: cudaMalloc@libcudart.so.13 is cudaMalloc)."""
    out: dict[str, str] = {}
    current = None
    for line in readelf(tool, "--syms", "--dyn-syms", path).splitlines():
        m = re.match(r"Symbol table '([^']+)'", line)
        if m:
            current = m.group(1)
            continue
        if current != table:
            continue
        f = line.split()
        if len(f) < 8 or not f[0].rstrip(":").isdigit():
            continue
        name = f[7].split("@")[0]
        state = "UND" if f[6] == "UND" else "DEF"
        if out.get(name) != "DEF":
            out[name] = state
    return out


def sections(tool: str, path: str) -> set[str]:
    return set(re.findall(r"\]\s+(\.\S+)", readelf(tool, "-S", path)))


def problems_of(tool: str, linkage: str, path: str) -> list[str]:
    libs = needed(tool, path)
    dyn = symbols(tool, path, ".dynsym")
    tab = symbols(tool, path, ".symtab")
    secs = sections(tool, path)
    cudart_so = [lib for lib in libs if lib.startswith("libcudart.so")]
    cuda_so = [lib for lib in libs if lib.startswith("libcuda.so")]
    out = []

    def need(cond: bool, what: str) -> None:
        if not cond:
            out.append(f"{path} ({linkage}): {what}")

    if linkage == "static":
        need(not cudart_so, f"needs {cudart_so}: not the static cudart")
        need(not cuda_so, f"needs {cuda_so}: cudart must load the driver itself")
        need(tab.get("cudaMalloc") == "DEF", "no cudaMalloc defined in .symtab: cudart not linked in")
        need("cudaMalloc" not in dyn, "cudaMalloc is a dynamic symbol")
        need(".nv_fatbin" in secs, "no .nv_fatbin section: no device code")
    elif linkage == "shared":
        need("libcudart.so.13" in libs, f"does not need libcudart.so.13 (needs {libs})")
        need(not cuda_so, f"needs {cuda_so}")
        need(dyn.get("cudaMalloc") == "UND", "cudaMalloc is not an undefined dynamic symbol")
        need(tab.get("cudaMalloc", "UND") == "UND", "defines a cudaMalloc of its own")
        need(".nv_fatbin" in secs, "no .nv_fatbin section: no device code")
    elif linkage == "driver":
        need("libcuda.so.1" in libs, f"does not need libcuda.so.1 (needs {libs})")
        need(not cudart_so, f"needs {cudart_so}")
        need(dyn.get("cuMemAlloc_v2") == "UND", "cuMemAlloc_v2 is not an undefined dynamic symbol")
    elif linkage == "loader":
        need(not cuda_so and not cudart_so, f"needs {cuda_so + cudart_so}: not a private loader")
        need("cuMemAlloc_v2" not in dyn and "cuMemAlloc_v2" not in tab, "has a cuMemAlloc_v2 symbol")
        need(dyn.get("dlopen") == "UND" and dyn.get("dlsym") == "UND",
             "dlopen and dlsym are not undefined dynamic symbols")
    return out


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--readelf", default="readelf")
    ap.add_argument("programs", nargs="+", metavar="LINKAGE=PROGRAM")
    args = ap.parse_args(argv)
    problems: list[str] = []
    seen = set()
    for item in args.programs:
        linkage, _, path = item.partition("=")
        if linkage not in LINKAGES or not path:
            ap.error(f"{item!r}: LINKAGE=PROGRAM, LINKAGE one of {', '.join(LINKAGES)}")
        seen.add(linkage)
        try:
            problems += problems_of(args.readelf, linkage, path)
        except (OSError, RuntimeError) as e:
            problems.append(f"{path}: {e}")
    missing = sorted(set(LINKAGES) - seen)
    if missing:
        problems.append(f"no program of linkage {', '.join(missing)} was checked")
    for p in problems:
        print(f"FAIL: {p}")
    if problems:
        return 1
    print(f"ok: {len(args.programs)} programs linked as their rows say")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
