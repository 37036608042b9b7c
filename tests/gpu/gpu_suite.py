#!/usr/bin/env python3
"""Runs the real-GPU suite (docs/gpu-suite.md) under the tracer and prints
one table: each test, its result, its key numbers; then "N passed, N failed"
(", N skipped" when some were).

  --mode gpu   the programs nvcc built (BUILD/tests/gpu/NAME) and the
               framework scripts, on the real GPU (scripts/gpu-check);
  --mode sim   the same programs built by g++ against the simulated GPU
               (BUILD/tests/gpu/sim-NAME), with its driver on
               LD_LIBRARY_PATH; the framework scripts are skipped.

Each test runs as `gpumemtrace run --dir DIR --snapshot-on oom,exit --
PROGRAM` in a fresh DIR, and check_gpu.py judges what the program printed
against the snapshots in DIR and the device's free bytes; every snapshot
must also be valid against docs/snapshot.schema.json. A test that prints
SKIP (one device where two are needed; a framework that does not import)
is skipped, never passed.

Exit status: 1 when a test failed, 0 when none failed and one passed, 77
(meson's skip) when every test run was skipped.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, os.pardir, "schema"))
import check_gpu  # noqa: E402
import schema_check  # noqa: E402  (tests/schema)

# Inherited settings that would change what a test measures.
DROPPED_ENV = ("GPUMEMTRACE_", "GMTSIM_", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_NO_CUDA_MEMORY_CACHING",
               "XLA_PYTHON_CLIENT_", "CUPY_GPU_MEMORY_LIMIT", "CUDA_MODULE_LOADING")


@dataclass
class Case:
    """One row of the table: a program of tests/gpu or a framework script."""
    name: str
    program: str                        # built program, or a .py script here
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    sim_env: dict[str, str] = field(default_factory=dict)   # the simulated GPU's size
    status: int = 0                     # the exit status it must end with
    leak_check: bool = False
    timeout: int = 300

    @property
    def script(self) -> bool:
        return self.program.endswith(".py")


# Strict (what --strict sets): leak.cu's two allocations are counted whether
# the scan finds their addresses still on the stack (referenced) or nowhere
# (leaked), as the compiler leaves them.
LEAK_ENV = {"GPUMEMTRACE_LEAK_CHECK": "1", "GPUMEMTRACE_LEAK_CLASSES": "leaked,referenced"}

CASES = [
    Case("runtime-static", "runtime_static"),
    Case("runtime-shared", "runtime_shared"),
    Case("driver-api", "driver_api"),
    Case("entry-point", "entry_point"),
    Case("dlopen-loader", "dlopen_loader"),
    Case("async-pools", "async_pools"),
    Case("async-pools-ptsz", "async_pools_ptsz"),
    Case("vmm-expandable", "vmm_expandable", sim_env={"GMTSIM_MEMORY": "1G"}),
    Case("managed", "managed", sim_env={"GMTSIM_MEMORY": "1G"}),
    Case("host-memory", "host_memory"),
    Case("multi-device", "multi_device", sim_env={"GMTSIM_DEVICES": "2", "GMTSIM_MEMORY": "1G,2G"}),
    # A context that costs memory, as a real one does: the baseline is taken
    # after it.
    Case("oom-exhaust", "oom_exhaust", sim_env={"GMTSIM_MEMORY": "1G", "GMTSIM_CONTEXT_BYTES": "6M"}),
    Case("fragmentation", "fragmentation", sim_env={"GMTSIM_MEMORY": "256M"}),
    Case("leak", "leak", env=LEAK_ENV, status=23, leak_check=True),
    Case("torch-caching", "torch_memory.py", ["caching"]),
    Case("torch-expandable", "torch_memory.py", ["expandable"],
         env={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}),
    Case("torch-async", "torch_memory.py", ["async"],
         env={"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"}),
    Case("torch-oom", "torch_memory.py", ["oom"]),
    Case("torch-train-oom", "torch_memory.py", ["train-oom"]),
    Case("torch-loss-kept", "torch_memory.py", ["loss-kept"]),
    Case("torch-fragment", "torch_memory.py", ["fragment"]),
    Case("torch-fragment-expandable", "torch_memory.py", ["fragment-expandable"],
         env={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}),
    Case("torch-fraction", "torch_memory.py", ["fraction"]),
    Case("cupy-default", "cupy_memory.py", ["default"]),
    Case("cupy-async", "cupy_memory.py", ["async"]),
    Case("cupy-oom", "cupy_memory.py", ["oom"]),
    Case("jax-oom", "jax_memory.py", ["oom"]),
    Case("jax-platform", "jax_platform.py",
         env={"XLA_PYTHON_CLIENT_ALLOCATOR": "platform", "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}),
]


@dataclass
class Paths:
    launcher: str
    programs: str       # the directory of the built programs
    prefix: str         # "" (nvcc) or "sim-"
    sim_driver: str


def paths_for(build_dir: str, mode: str) -> Paths:
    """Where a Meson build directory has the suite."""
    build = os.path.abspath(build_dir)
    return Paths(launcher=os.path.join(build, "src", "cli", "gpumemtrace"),
                 programs=os.path.join(build, "tests", "gpu"),
                 prefix="sim-" if mode == "sim" else "",
                 sim_driver=os.path.join(build, "sim", "driver"))


def paths_for_bundle(root: str, mode: str) -> Paths:
    """Where a bundle made by scripts/gpu-bundle has the suite (its layout:
    docs/gpu-suite.md)."""
    root = os.path.abspath(root)
    return Paths(launcher=os.path.join(root, "bin", "gpumemtrace"),
                 programs=os.path.join(root, "tests", "gpu", "programs"),
                 prefix="sim-" if mode == "sim" else "",
                 sim_driver=os.path.join(root, "sim", "lib"))


def add_location_args(ap: argparse.ArgumentParser) -> None:
    """--build-dir or --bundle: where the suite's programs are."""
    where = ap.add_mutually_exclusive_group()
    where.add_argument("--build-dir", default="build", help="a Meson build directory (default: build)")
    where.add_argument("--bundle", metavar="DIR", help="a bundle made by scripts/gpu-bundle")


def location(args: argparse.Namespace) -> Paths:
    if args.bundle:
        return paths_for_bundle(args.bundle, args.mode)
    return paths_for(args.build_dir, args.mode)


def case_env(case: Case, mode: str, paths: Paths, base: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in base.items() if not k.startswith(DROPPED_ENV)}
    env.update(case.env)
    env["PYTHONUNBUFFERED"] = "1"
    if mode == "sim":
        env.update(case.sim_env)
        old = env.get("LD_LIBRARY_PATH", "")
        env["LD_LIBRARY_PATH"] = paths.sim_driver + (":" + old if old else "")
        asan = base.get("GMT_TEST_ASAN_RUNTIME", "")
        if asan:
            # NOTE: the sanitizer runtime must be the first object loaded;
            # the launcher keeps it before the (instrumented) library.
            env["LD_PRELOAD"] = " ".join(x for x in (asan, env.get("LD_PRELOAD", "")) if x)
            env["ASAN_OPTIONS"] = env.get("ASAN_OPTIONS", "") + ":detect_leaks=0"
    elif not case.script:
        # Modules loaded with the context, before the first checkpoint, not
        # at a kernel's first launch between two.
        env["CUDA_MODULE_LOADING"] = "EAGER"
    return env


def command(case: Case, paths: Paths, python: str) -> list[str]:
    if case.script:
        return [python, os.path.join(HERE, case.program)] + case.args
    return [os.path.join(paths.programs, paths.prefix + case.program)] + case.args


@dataclass
class Row:
    case: Case
    outcome: check_gpu.Outcome
    workdir: str


def run_case(case: Case, mode: str, paths: Paths, python: str, tolerance: int,
             workdir: str | None = None) -> Row:
    """Run one case traced in workdir (a new temporary directory when None;
    created when missing) and judge it."""
    if mode == "sim" and case.script:
        return Row(case, check_gpu.Outcome("skip", [], "framework scripts run on a real GPU only"), "")
    cmd = command(case, paths, python)
    if not case.script and not os.access(cmd[0], os.X_OK):
        return Row(case, check_gpu.Outcome("fail", [f"{cmd[0]} is not built"], "not built"), "")
    if workdir is None:
        workdir = tempfile.mkdtemp(prefix=f"gmt-gpu-{case.name}-")
    else:
        os.makedirs(workdir, exist_ok=True)
    full = [paths.launcher, "run", "--dir", workdir, "--snapshot-on", "oom,exit", "--"] + cmd
    env = case_env(case, mode, paths, dict(os.environ))
    try:
        proc = subprocess.run(full, env=env, cwd=workdir, stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              timeout=case.timeout)
        status, out, err = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as e:
        status = None
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        err = f"killed after {case.timeout} s"
    with open(os.path.join(workdir, "stdout.txt"), "w", encoding="utf-8") as f:
        f.write(out)
    with open(os.path.join(workdir, "stderr.txt"), "w", encoding="utf-8") as f:
        f.write(err)
    exp = check_gpu.parse(out)
    outcome = check_gpu.check(exp, workdir, tolerance, status, case.status, err, case.leak_check)
    if status is None:
        outcome.problems.insert(0, err)
        outcome.status = "fail"
    if outcome.status != "skip":
        schema = schema_check.validate(schema_check.snapshot_files(workdir))
        if schema:
            outcome.problems += schema
            outcome.status = "fail"
    return Row(case, outcome, workdir)


def select(only: list[str]) -> list[Case]:
    """The cases --only names (all when none), in the suite's order; a
    ValueError names the unknown ones."""
    unknown = sorted(set(only) - {c.name for c in CASES})
    if unknown:
        raise ValueError(f"unknown test(s): {', '.join(unknown)} (--list lists them)")
    return [c for c in CASES if not only or c.name in only]


def default_tolerance(mode: str) -> int:
    return 0 if mode == "sim" else check_gpu.DEFAULT_TOLERANCE


def table(rows: list[Row]) -> list[str]:
    width = max([len("test")] + [len(r.case.name) for r in rows])
    lines = [f"{'test':<{width}}  result  numbers"]
    for r in rows:
        numbers = r.outcome.summary
        if r.outcome.notes:
            numbers += " (" + "; ".join(r.outcome.notes) + ")"
        lines.append(f"{r.case.name:<{width}}  {r.outcome.status:<6}  {numbers}")
    return lines


def problems(rows: list[Row]) -> list[str]:
    """The failures under the table: each failed test, where its files are,
    and its problems."""
    out = []
    for r in rows:
        if r.outcome.status == "fail":
            out.append(f"\n--- {r.case.name}: {len(r.outcome.problems)} problem(s)"
                       + (f"; output and snapshots kept in {r.workdir}" if r.workdir else ""))
            out += [f"- {p}" for p in r.outcome.problems]
    return out


def counts(rows: list[Row]) -> tuple[int, int, int]:
    """passed, failed, skipped."""
    return (sum(r.outcome.status == "pass" for r in rows), sum(r.outcome.status == "fail" for r in rows),
            sum(r.outcome.status == "skip" for r in rows))


def count_line(passed: int, failed: int, skipped: int) -> str:
    return f"{passed} passed, {failed} failed" + (f", {skipped} skipped" if skipped else "")


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", choices=["gpu", "sim"], required=True)
    add_location_args(ap)
    ap.add_argument("--only", action="append", default=[], metavar="TEST",
                    help="run only this test (again for more)")
    ap.add_argument("--python", default=sys.executable,
                    help="interpreter for the framework scripts (one that imports them)")
    ap.add_argument("--tolerance", type=int,
                    help="bytes the device's free bytes may differ from the snapshots' "
                         "(default: 0 simulated, 4 MiB on a GPU)")
    ap.add_argument("--keep", action="store_true", help="keep every run's directory")
    ap.add_argument("--list", action="store_true", help="list the tests and exit")
    args = ap.parse_args(argv)

    if args.list:
        for c in CASES:
            print(c.name)
        return 0
    try:
        cases = select(args.only)
    except ValueError as e:
        ap.error(str(e))
    tolerance = args.tolerance if args.tolerance is not None else default_tolerance(args.mode)
    paths = location(args)
    if not os.access(paths.launcher, os.X_OK):
        print(f"gpu-suite: {paths.launcher} is not built", file=sys.stderr)
        return 1

    rows = [run_case(c, args.mode, paths, args.python, tolerance) for c in cases]
    for line in table(rows) + problems(rows):
        print(line)
    for r in rows:
        if r.outcome.status != "fail" and r.workdir and not args.keep:
            shutil.rmtree(r.workdir, ignore_errors=True)
    if args.keep:
        kept = [f"{r.case.name}: {r.workdir}" for r in rows if r.workdir]
        print("\nkept:\n  " + "\n  ".join(kept))
    passed, failed, skipped = counts(rows)
    print(count_line(passed, failed, skipped))
    if failed:
        return 1
    return 0 if passed else 77


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
