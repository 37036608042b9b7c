#!/usr/bin/env python3
"""The GPU bundle's runner: what OUT/run starts (docs/gpu-suite.md, "The
bundle"). Runs the real-GPU suite from a bundle made by scripts/gpu-bundle on
a machine with no compiler, no Meson, no package manager and no network.

It first checks the bundle against its MANIFEST.json (every file there,
unchanged) and the machine's glibc against the one the bundle needs. Then,
on a GPU (or on the simulated GPU the bundle carries, with --sim), it runs
every test of the suite under the tracer, the viewer's terminal summary of
each out-of-memory snapshot, PyTorch's own _memory_viz on the viewer's
PyTorch export of a real snapshot (torch-memviz, where torch imports) and,
with --overhead, the overhead runs; and writes into a results folder, whose
path it prints: table.txt, results.json, one folder per test (its output,
its out-of-memory snapshots and their summaries; everything for a failed
test, or for every test with --keep), oom-summaries.txt and overhead.txt.
The last line is "N passed, N failed" (", N skipped" when some were).

Without a GPU and without --sim: the one line "no GPU here (...): nothing
run", exit 0. Exit status otherwise: 0 when nothing failed and something
passed, 1 when a test failed or none passed, 2 for a usage error, 3 when the
bundle is damaged or cannot run on this machine.
"""
from __future__ import annotations

import argparse
import ctypes
import glob
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, os.pardir, os.pardir))
MANIFEST = "MANIFEST.json"
FORMAT = "gpumemtrace-gpu-bundle"
MEMVIZ = "torch-memviz"


class UsageError(Exception):
    pass


class Parser(argparse.ArgumentParser):
    """argparse whose errors are one line, raised rather than printed."""

    def error(self, message: str) -> Any:  # type: ignore[override]
        raise UsageError(message)


def parse(argv: list[str]) -> argparse.Namespace:
    ap = Parser(prog="run", description="Run the real-GPU suite from this bundle (docs/gpu-suite.md).")
    ap.add_argument("--sim", action="store_true",
                    help="run on the simulated GPU the bundle carries: proves the bundle, claims nothing "
                         "about a GPU")
    ap.add_argument("--only", action="append", default=[], metavar="TEST",
                    help="run only this test (again for more; --list lists them)")
    ap.add_argument("--list", action="store_true", help="list the tests")
    ap.add_argument("--python", default="python3", metavar="PY",
                    help="the interpreter for the PyTorch, CuPy and JAX scripts (default: python3)")
    ap.add_argument("--overhead", action="store_true", help="also time the overhead runs")
    ap.add_argument("--keep", action="store_true",
                    help="keep every file of every test in the results (default: all of a failed "
                         "test's, and the output and out-of-memory snapshots of the others)")
    ap.add_argument("--results", metavar="DIR",
                    help="the results folder (default: results/<time>-<gpu|sim> in the bundle, or in "
                         "the current directory where the bundle is read-only)")
    ap.add_argument("--tolerance", type=int, metavar="BYTES",
                    help="bytes the device's free bytes may differ from the snapshots' "
                         "(default: 4 MiB on a GPU, 0 simulated)")
    return ap.parse_args(argv)


# ---------------------------------------------------------------------------
# The bundle and the machine


def sha256(path: str) -> str:
    """The file's SHA-256, as MANIFEST.json records it (scripts/gpu_bundle.py
    writes it with this function)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def load_manifest(root: str) -> tuple[dict[str, Any] | None, str | None]:
    path = os.path.join(root, MANIFEST)
    try:
        with open(path, encoding="utf-8") as f:
            m = json.load(f)
    except FileNotFoundError:
        return None, f"{MANIFEST} is missing"
    except (OSError, ValueError) as e:
        return None, f"{MANIFEST} cannot be read ({e})"
    if not isinstance(m, dict) or m.get("format") != FORMAT or not isinstance(m.get("files"), dict):
        return None, f"{MANIFEST} is not a gpumemtrace bundle's manifest"
    return m, None


def damage(root: str, manifest: dict[str, Any]) -> list[str]:
    """What differs from the manifest: missing or changed files."""
    out = []
    for rel, want in sorted(manifest["files"].items()):
        path = os.path.join(root, rel)
        if not os.path.isfile(path):
            out.append(f"{rel} is missing")
        elif os.path.getsize(path) != want.get("size") or sha256(path) != want.get("sha256"):
            out.append(f"{rel} has changed")
    return out


def version_tuple(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split("."))
    except ValueError:
        return (0,)


def host_glibc() -> str:
    text = os.confstr("CS_GNU_LIBC_VERSION") if "CS_GNU_LIBC_VERSION" in os.confstr_names else None
    return (text or "").replace("glibc", "").strip() or "unknown"


def machine_problem(manifest: dict[str, Any]) -> str | None:
    """Why this machine cannot run the bundle's binaries, or None."""
    want = str(manifest.get("glibc_required", "0"))
    have = host_glibc()
    if have == "unknown":
        return "this machine's C library is not glibc (the bundle's binaries need glibc " + want + ")"
    if version_tuple(have) < version_tuple(want):
        return f"this machine has glibc {have}; the bundle's binaries need {want} or newer"
    machine = (manifest.get("built_on") or {}).get("machine")
    if machine and machine != platform.machine():
        return f"the bundle is for {machine}, this machine is {platform.machine()}"
    return None


def probe_gpu() -> tuple[dict[str, Any] | None, str]:
    """The first device as the driver sees it, or None and why there is none.
    Asks libcuda.so.1 directly: cuInit, cuDeviceGetCount, name and memory."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError as e:
        return None, f"libcuda.so.1 cannot be loaded: {e}"
    rc = cuda.cuInit(0)
    if rc != 0:
        return None, f"cuInit failed with CUDA error {rc}"
    count = ctypes.c_int(0)
    rc = cuda.cuDeviceGetCount(ctypes.byref(count))
    if rc != 0 or count.value < 1:
        return None, "the driver sees no device" if rc == 0 else f"cuDeviceGetCount failed with CUDA error {rc}"
    name = ctypes.create_string_buffer(256)
    total = ctypes.c_size_t(0)
    version = ctypes.c_int(0)
    cuda.cuDeviceGetName(name, 256, 0)
    cuda.cuDeviceTotalMem_v2(ctypes.byref(total), 0)
    cuda.cuDriverGetVersion(ctypes.byref(version))
    info: dict[str, Any] = {"devices": count.value, "name": name.value.decode(errors="replace"),
                            "total_bytes": total.value, "cuda_driver_version": version.value}
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            proc = subprocess.run([smi, "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                                  stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                  text=True, timeout=60)
            info["nvidia_smi"] = proc.stdout.strip().splitlines()
        except (OSError, subprocess.TimeoutExpired):
            pass
    return info, ""


def results_dir(requested: str | None, mode: str) -> str:
    if requested:
        path = os.path.abspath(requested)
    else:
        stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + mode
        base = os.path.join(ROOT, "results") if os.access(ROOT, os.W_OK) else os.path.join(os.getcwd(),
                                                                                         "gpumemtrace-results")
        path = os.path.join(base, stamp)
    os.makedirs(path, exist_ok=True)
    return path


# ---------------------------------------------------------------------------
# Running


def oom_snapshots(workdir: str) -> list[str]:
    return sorted(glob.glob(os.path.join(glob.escape(workdir), "gpumemtrace.*.oom.*.json")))


def summarise(launcher: str, workdir: str) -> tuple[list[str], list[str]]:
    """The viewer's terminal summary of each out-of-memory snapshot in
    workdir, written beside it as SNAPSHOT.summary.txt; returns the texts
    (with a heading each) and the problems (the viewer failing)."""
    texts, problems = [], []
    for snap in oom_snapshots(workdir):
        proc = subprocess.run([launcher, "view", snap], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, timeout=300)
        with open(snap[:-len(".json")] + ".summary.txt", "w", encoding="utf-8") as f:
            f.write(proc.stdout + proc.stderr)
        if proc.returncode != 0:
            problems.append(f"gpumemtrace view {os.path.basename(snap)} exited {proc.returncode}: "
                            + proc.stderr.strip()[-300:])
        texts.append(f"=== {os.path.relpath(snap, os.path.dirname(workdir))}\n{proc.stdout}")
    return texts, problems


def memviz(gpu_suite: Any, check_gpu: Any, rows: list[Any], launcher: str, python: str, workdir: str) -> Any:
    """The torch-memviz row: PyTorch's _memory_viz on the viewer's PyTorch
    export of the torch-oom run's out-of-memory snapshot (else a torch-caching
    snapshot)."""
    case = gpu_suite.Case(MEMVIZ, "memviz_check.py")
    snaps: list[str] = []
    for name in ("torch-oom", "torch-caching"):
        row = next((r for r in rows if r.case.name == name and r.outcome.status != "skip" and r.workdir), None)
        if row:
            snaps += oom_snapshots(row.workdir) or sorted(glob.glob(os.path.join(row.workdir, "gpumemtrace.*.json")))
    if not snaps:
        return gpu_suite.Row(case, check_gpu.Outcome("skip", [], "no PyTorch snapshot (torch-oom and "
                                                      "torch-caching did not run)"), "")
    os.makedirs(workdir, exist_ok=True)
    pickle_path = os.path.join(workdir, "snapshot.pickle")
    proc = subprocess.run([launcher, "view", "--pytorch", pickle_path, snaps[0]], stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300)
    if proc.returncode != 0:
        return gpu_suite.Row(case, check_gpu.Outcome("fail", [f"gpumemtrace view --pytorch exited "
                                                              f"{proc.returncode}: {proc.stderr.strip()[-300:]}"],
                                                     "export failed"), workdir)
    proc = subprocess.run([python, os.path.join(HERE, "memviz_check.py"), snaps[0], pickle_path],
                          stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          timeout=300)
    with open(os.path.join(workdir, "stdout.txt"), "w", encoding="utf-8") as f:
        f.write(proc.stdout + proc.stderr)
    lines = proc.stdout.splitlines()
    source = os.path.basename(os.path.dirname(snaps[0]))
    if proc.returncode == 77:
        return gpu_suite.Row(case, check_gpu.Outcome("skip", [], next((ln[5:] for ln in lines if ln.startswith(
            "SKIP ")), "skipped")), workdir)
    fails = [ln[5:] for ln in lines if ln.startswith("FAIL ")]
    if proc.returncode != 0 or fails:
        return gpu_suite.Row(case, check_gpu.Outcome("fail", fails or [f"memviz_check.py exited {proc.returncode}: "
                                                                       + proc.stderr.strip()[-300:]],
                                                     f"on {source}'s snapshot"), workdir)
    oks = sum(ln.startswith("ok ") for ln in lines)
    return gpu_suite.Row(case, check_gpu.Outcome("pass", [], f"stats and trace on {source}'s snapshot, "
                                                             f"{oks} checks"), workdir)


def overhead(mode: str, python: str, out: str) -> tuple[bool, str]:
    """The overhead runs (tests/gpu/overhead.py) on the bundle; their table
    is written to out."""
    cmd = [sys.executable, os.path.join(HERE, "overhead.py"), "--mode", mode, "--bundle", ROOT, "--python", python]
    if mode == "sim":
        cmd += ["--pairs", "300", "--reps", "1", "--no-torch"]
    proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=3600)
    with open(out, "w", encoding="utf-8") as f:
        f.write(proc.stdout)
    return proc.returncode == 0, proc.stdout


def prune(rows: list[Any]) -> None:
    """Of each test that did not fail, keep its output and its out-of-memory
    snapshots (with their summaries)."""
    for r in rows:
        if r.outcome.status == "fail" or not r.workdir or not os.path.isdir(r.workdir):
            continue
        for name in os.listdir(r.workdir):
            if name in ("stdout.txt", "stderr.txt") or ".oom." in name:
                continue
            path = os.path.join(r.workdir, name)
            if os.path.isdir(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                os.unlink(path)


def run(args: argparse.Namespace, manifest: dict[str, Any]) -> int:
    import check_gpu  # noqa: E402 - after the bundle is known to be whole
    import gpu_suite  # noqa: E402

    if args.list:
        for c in gpu_suite.CASES:
            print(c.name)
        print(MEMVIZ)
        return 0
    only = [t for t in args.only if t != MEMVIZ]
    try:
        cases = gpu_suite.select(only)
    except ValueError as e:
        print(f"run: {e}", file=sys.stderr)
        return 2
    if args.only and not only:
        cases = []
    with_memviz = not args.only or MEMVIZ in args.only
    mode = "sim" if args.sim else "gpu"

    device: dict[str, Any] | None = None
    if mode == "gpu":
        device, why = probe_gpu()
        if device is None:
            print(f"no GPU here ({why}): nothing run")
            return 0
        print(f"run: device: {device['name']}, {device['total_bytes'] / (1 << 30):.1f} GiB, "
              f"{device['devices']} device(s), CUDA driver {device['cuda_driver_version']}")
    else:
        print("run: on the simulated GPU the bundle carries: the bundle's own proof, not a GPU result")
    results = results_dir(args.results, mode)
    print(f"run: results in {results}")
    sys.stdout.flush()

    # The snapshot checks use this interpreter's jsonschema, else the bundle's copy.
    os.environ["GMT_TEST_SCHEMA_PYTHON"] = sys.executable
    os.environ["GMT_TEST_SCHEMA_PYTHONPATH"] = os.path.join(ROOT, "python")
    paths = gpu_suite.paths_for_bundle(ROOT, mode)
    tolerance = args.tolerance if args.tolerance is not None else gpu_suite.default_tolerance(mode)
    started = time.time()
    rows, summaries = [], []
    for i, case in enumerate(cases, 1):
        row = gpu_suite.run_case(case, mode, paths, args.python, tolerance, os.path.join(results, case.name))
        if row.workdir and row.outcome.status != "skip":
            texts, problems = summarise(paths.launcher, row.workdir)
            summaries += texts
            if problems:
                row.outcome.problems += problems
                row.outcome.status = "fail"
        rows.append(row)
        print(f"[{i}/{len(cases)}] {case.name}: {row.outcome.status}", flush=True)
    if with_memviz:
        if mode == "sim":
            rows.append(gpu_suite.Row(gpu_suite.Case(MEMVIZ, "memviz_check.py"),
                                      check_gpu.Outcome("skip", [], "PyTorch runs on a real GPU only"), ""))
        else:
            rows.append(memviz(gpu_suite, check_gpu, rows, paths.launcher, args.python,
                               os.path.join(results, MEMVIZ)))
    overhead_text = None
    if args.overhead:
        ok, overhead_text = overhead(mode, args.python, os.path.join(results, "overhead.txt"))
        rows.append(gpu_suite.Row(gpu_suite.Case("overhead", "overhead.py"),
                                  check_gpu.Outcome("pass" if ok else "fail",
                                                    [] if ok else [overhead_text.strip()[-500:]],
                                                    "overhead.txt"), results))
    if not args.keep:
        prune(rows)

    passed, failed, skipped = gpu_suite.counts(rows)
    lines = gpu_suite.table(rows) + gpu_suite.problems(rows)
    if overhead_text is not None:
        lines += ["", "overhead (overhead.txt):"] + overhead_text.rstrip().splitlines()
    with open(os.path.join(results, "table.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(lines + [gpu_suite.count_line(passed, failed, skipped)]) + "\n")
    if summaries:
        with open(os.path.join(results, "oom-summaries.txt"), "w", encoding="utf-8") as f:
            f.write("\n".join(summaries))
    report = {
        "format": "gpumemtrace-gpu-results", "version": 1, "mode": mode, "device": device,
        "bundle": {k: manifest.get(k) for k in ("gpumemtrace", "created", "built_on", "glibc_required")},
        "host": {"os": platform.platform(), "glibc": host_glibc(), "python": sys.version.split()[0],
                 "framework_python": args.python},
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "seconds": round(time.time() - started, 1),
        "tests": [{"name": r.case.name, "status": r.outcome.status, "summary": r.outcome.summary,
                   "notes": r.outcome.notes, "problems": r.outcome.problems,
                   "dir": os.path.relpath(r.workdir, results) if r.workdir else None} for r in rows],
        "counts": {"passed": passed, "failed": failed, "skipped": skipped},
        "overhead": overhead_text,
    }
    with open(os.path.join(results, "results.json"), "w", encoding="utf-8") as f:
        json.dump(report, f, indent=1)
        f.write("\n")

    for line in lines:
        print(line)
    print(f"\nrun: results in {results}")
    if not passed and not failed:
        print("run: every test was skipped: nothing passed")
    print(gpu_suite.count_line(passed, failed, skipped))
    return 1 if failed or not passed else 0


def main(argv: list[str]) -> int:
    try:
        args = parse(argv)
    except UsageError as e:
        print(f"run: {e} (run --help lists the options)", file=sys.stderr)
        return 2
    manifest, why = load_manifest(ROOT)
    if manifest is not None:
        problems = damage(ROOT, manifest)
        why = problems[0] + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else "") if problems else None
    if why is not None:
        print(f"run: the bundle at {ROOT} is damaged: {why}; make it again with scripts/gpu-bundle",
              file=sys.stderr)
        return 3
    assert manifest is not None
    sys.path.insert(0, HERE)
    if not args.list:
        problem = machine_problem(manifest)
        if problem:
            print(f"run: cannot run here: {problem}", file=sys.stderr)
            return 3
    try:
        return run(args, manifest)
    except KeyboardInterrupt:
        print("run: interrupted", file=sys.stderr)
        return 130
    except OSError as e:
        print(f"run: {e}", file=sys.stderr)
        return 3


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
