#!/usr/bin/env python3
"""A plugin reinstalled while the program runs: a frame is named from a
module's file only while the file is the build that was mapped
(docs/reliability.md).

tests/preload/reload.c installs plug_a at one path, allocates 3 MiB through
it, unloads it; installs plug_b (the same source, other names, lines from
1000 on: another build-id) at the same path, allocates 5 MiB through it and
keeps it loaded; snapshot 1; installs plug_a again while plug_b is loaded;
snapshot 2; removes the file before the exit snapshot. Wherever the loader
put plug_b, in every snapshot:

- each plugin frame's module is listed in "modules" (path, base = address -
  offset, the same "unloaded") with the build-id of the build that ran it:
  plug_a's for the 3 MiB (its frames marked "unloaded"), plug_b's for the
  5 MiB; "modules" lists both build-ids;
- no frame of the 3 MiB is named from plug_b (its function, or a line from
  1000 on), no frame of the 5 MiB from plug_a;
- snapshot 1 (plug_b's file at the path): the 5 MiB named from the file,
  totally_unrelated_function at plugin.c:1000+; the 3 MiB left as module and
  offset (its build's file is gone);
- snapshot 2 (plug_a's file at the path again): the 3 MiB named from it,
  plugin_a_allocate at plugin.c below 1000; the 5 MiB with no file and line
  (the loader's exported name only).

The exit snapshot equals the simulator's ledger, every snapshot is valid
against the schema, the program's status and output are as untraced.

Usage: check_reload.py --lib LIBGPUMEMTRACE -- RELOAD PLUG_A PLUG_B
"""
from __future__ import annotations

import argparse
import os
import struct
import subprocess
import sys
import tempfile
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_trace  # noqa: E402  (the preload harness: runs, ledgers, the schema)

A_SIZE, B_SIZE = 3 << 20, 5 << 20
A_FUNCTION, B_FUNCTION = "plugin_a_allocate", "totally_unrelated_function"
B_FIRST_LINE = 1000  # plugin.c: plug_b's lines
NT_GNU_BUILD_ID, PT_NOTE = 3, 4


def build_id(path: str) -> str | None:
    """The GNU build-id of a 64-bit little-endian ELF file, from its PT_NOTE
    segments, as lowercase hex; None when it has none."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ValueError(f"{path}: not a 64-bit little-endian ELF file")
    phoff, = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    for i in range(phnum):
        p_type, _, p_offset, _, _, p_filesz, _, p_align = struct.unpack_from("<IIQQQQQQ", data, phoff + i * phentsize)
        if p_type != PT_NOTE:
            continue
        align = 8 if p_align == 8 else 4
        at, end = p_offset, p_offset + p_filesz
        while at + 12 <= end:
            namesz, descsz, ntype = struct.unpack_from("<III", data, at)
            name_at = at + 12
            desc_at = name_at + (namesz + align - 1) // align * align
            if ntype == NT_GNU_BUILD_ID and data[name_at:name_at + namesz] == b"GNU\0":
                return data[desc_at:desc_at + descsz].hex()
            at = desc_at + (descsz + align - 1) // align * align
    return None


def plugin_frames(snap: dict[str, Any], size: int, plugin: str) -> tuple[list[dict[str, Any]], str | None]:
    """The frames of the one live allocation of `size` bytes that lie in the
    plugin's path, or what is wrong."""
    stack, problem = check_trace.stack_of_size([snap], size)
    if problem:
        return [], problem
    frames = [fr for fr in stack.get("frames", []) if fr.get("module") == plugin]
    if not frames:
        return [], f"no frame of the {size}-byte allocation lies in {plugin}: {stack.get('frames')}"
    return frames, None


def module_of(snap: dict[str, Any], fr: dict[str, Any]) -> dict[str, Any] | None:
    """The "modules" entry of a native frame: its path, base and unload."""
    base = int(fr["address"], 16) - int(fr["offset"], 16)
    found = [m for m in snap.get("modules", []) if m["path"] == fr["module"] and int(m["base"], 16) == base
             and m.get("unloaded") == fr.get("unloaded")]
    return found[0] if len(found) == 1 else None


def named_from(fr: dict[str, Any]) -> str:
    return f"{fr.get('function')} at {os.path.basename(fr.get('file') or '-')}:{fr.get('line')}"


def snapshot_problems(name: str, snap: dict[str, Any], plugin: str, ids: dict[str, str],
                      named: dict[int, str | None]) -> list[str]:
    """What is wrong in one snapshot; named: per size, the build whose file
    names its plugin frames ("a", "b"), or None for none."""
    problems = []
    listed = {m.get("build_id") for m in snap.get("modules", [])}
    for build in ("a", "b"):
        if ids[build] not in listed:
            problems.append(f"{name}: \"modules\" lacks plug_{build}'s build-id {ids[build]} "
                            f"(lists {sorted(str(i) for i in listed)})")
    for size, build, other in ((A_SIZE, "a", "b"), (B_SIZE, "b", "a")):
        frames, problem = plugin_frames(snap, size, plugin)
        if problem:
            problems.append(f"{name}: {problem}")
            continue
        for fr in frames:
            mod = module_of(snap, fr)
            if mod is None:
                problems.append(f"{name}: the {size}-byte frame {fr['address']} has no one entry in \"modules\" "
                                f"(unloaded {fr.get('unloaded')})")
            elif mod.get("build_id") != ids[build]:
                problems.append(f"{name}: the {size}-byte frame's module has build-id {mod.get('build_id')}, "
                                f"plug_{build}'s is {ids[build]}")
            if (fr.get("unloaded") is not None) != (build == "a"):
                problems.append(f"{name}: the {size}-byte frame says unloaded {fr.get('unloaded')}")
            wrong_function = B_FUNCTION if other == "b" else A_FUNCTION
            line = fr.get("line")
            if fr.get("function") == wrong_function or (
                    line is not None and (line >= B_FIRST_LINE) == (other == "b")):
                problems.append(f"{name}: the {size}-byte frame is named from plug_{other}: {named_from(fr)}")
        want = named[size]
        with_line = [fr for fr in frames if fr.get("line") is not None]
        if want is None and with_line:
            problems.append(f"{name}: the {size}-byte frames have lines, none expected: "
                            f"{[named_from(fr) for fr in with_line]}")
        if want is not None:
            function = A_FUNCTION if want == "a" else B_FUNCTION
            if not any(fr.get("function") == function and os.path.basename(fr.get("file") or "") == "plugin.c"
                       and fr.get("line") is not None for fr in frames):
                problems.append(f"{name}: no {size}-byte frame is {function} at plugin.c:LINE "
                                f"(frames: {[named_from(fr) for fr in frames]})")
    return problems


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", required=True)
    ap.add_argument("program", nargs=3, metavar="RELOAD PLUG_A PLUG_B")
    args = ap.parse_args([a for a in sys.argv[1:] if a != "--"])
    program, plug_a, plug_b = args.program
    ids = {"a": build_id(plug_a), "b": build_id(plug_b)}
    if not ids["a"] or not ids["b"] or ids["a"] == ids["b"]:
        print(f"FAIL: the two builds need two build-ids: {ids}")
        return 1
    expect = check_trace.load(os.path.join(os.path.dirname(os.path.abspath(__file__)), "reload.expect.json"))
    workdir = tempfile.mkdtemp(prefix="gmt-reload-")
    plain_dir = tempfile.mkdtemp(prefix="gmt-reload-untraced-")
    status, output, errors = check_trace.run(program, expect, args.lib, sys.executable, workdir, {},
                                             [plug_a, plug_b])
    plain_status, plain_output, _ = check_trace.run(program, expect, None, sys.executable, plain_dir, {},
                                                    [plug_a, plug_b])
    subprocess.run(["rm", "-rf", plain_dir], check=False)
    print(output, end="")
    print(errors, end="", file=sys.stderr)
    problems = []
    if status != 0 or plain_status != 0:
        problems.append(f"exit status {status} traced, {plain_status} untraced, 0 expected")
    comparable = [ln for ln in check_trace.comparable(output) if not ln.startswith(("PLUGIN ", "DUMP ", "SAME_BASE "))]
    if comparable != [ln for ln in check_trace.comparable(plain_output)
                      if not ln.startswith(("PLUGIN ", "DUMP ", "SAME_BASE "))]:
        problems.append("the traced output differs from the untraced")
    if [ln for ln in output.splitlines() if ln.startswith("DUMP ")] != ["DUMP 1 0", "DUMP 2 0"]:
        problems.append("the program's two gmt_dump calls did not both return 0")
    if any(ln.startswith("gpumemtrace:") for ln in errors.splitlines()):
        problems.append("the tracer wrote to stderr")
    plugin = next((ln.split(" ", 1)[1] for ln in output.splitlines() if ln.startswith("PLUGIN ")), "")
    more, compared = check_trace.check(workdir)
    problems += more
    pid = next((ln.split()[1] for ln in output.splitlines() if ln.startswith("PID ") and ln.endswith(" main")), "")
    apis = check_trace.snapshots_of(workdir, pid, "api")
    exits = check_trace.snapshots_of(workdir, pid, "exit")
    if len(apis) != 2 or len(exits) != 1:
        problems.append(f"{len(apis)} api and {len(exits)} exit snapshots, 2 and 1 expected")
    else:
        wanted = [("snapshot 1", apis[0], {A_SIZE: None, B_SIZE: "b"}),
                  ("snapshot 2", apis[1], {A_SIZE: "a", B_SIZE: None}),
                  ("the exit snapshot", exits[0], {A_SIZE: None, B_SIZE: None})]
        for name, path, named in wanted:
            problems += snapshot_problems(name, check_trace.load(path), plugin, ids, named)
    written = check_trace.schema_check.snapshot_files(os.path.join(workdir, "snapshots"))
    problems += check_trace.schema_check.validate(written)
    if problems:
        for p in problems:
            print("FAIL:", p)
        print(f"work directory kept: {workdir}")
        return 1
    print(f"ok: {compared} snapshots equal their ledgers; names by build-id in {len(apis) + len(exits)} snapshots; "
          f"schema: {len(written)} snapshots valid")
    subprocess.run(["rm", "-rf", workdir], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
