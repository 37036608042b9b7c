#!/usr/bin/env python3
"""The GPU bundle end to end (docs/gpu-suite.md, "The bundle"), without a GPU:

- scripts/gpu-bundle builds it into a temporary directory, which is then
  moved elsewhere, and the build directory is made unreachable (renamed)
  while the bundle is used;
- `env -i PATH=/usr/bin:/bin OUT/run --sim`, from another directory, passes
  every simulator case (14 or more, none failed) and writes its results
  folder: table, JSON, out-of-memory snapshots and their summaries;
- the bundle is at most 48 MiB; no file in it uses a path of the build
  machine (RUNPATH/RPATH of every ELF file, the data its code loads, every
  other file's text); every ELF file's libraries resolve inside the bundle
  or are the platform's or the driver's; none needs a glibc symbol version
  newer than this machine's; the carried jsonschema validates snapshots with
  no site packages;
- tests/gpu/session.py --sim (a lent GPU's one call, rehearsed): a line
  per phase, the PyTorch double's golden traces recorded and checked with
  the bundle's launcher, PyTorch's phases skipped, the suite's other tests
  passed, the results folder in one archive (--archive); a budget of 6 s:
  the first phase cut off, the next not started, status 1; a budget too
  short, a folder that is not a bundle or an archive inside the results
  folder: one line;
- without a GPU, `OUT/run` prints its one line and exits 0;
- bad input: gpu-bundle without OUT or with an unknown option, run with an
  unknown option or test, and a damaged bundle (a library removed, a file
  changed): one line each naming what is wrong, a non-zero status, never a
  traceback.

Usage: test_bundle.py --source ROOT --build-dir DIR
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, os.pardir, os.pardir, "scripts"))
import gpu_bundle as gb  # noqa: E402

MAX_BYTES = 48 << 20
CLEAN_PATH = "/usr/bin:/bin"

failures: list[str] = []


def check(ok: bool, what: str) -> bool:
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)
    return ok


def run(cmd: list[str], cwd: str, clean: bool = False, timeout: int = 900) -> subprocess.CompletedProcess:
    env = {"PATH": CLEAN_PATH} if clean else None
    return subprocess.run(cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=timeout)


def one_line_error(proc: subprocess.CompletedProcess, what: str, words: str) -> None:
    """A non-zero status, one line on stderr naming `words`, no traceback."""
    err = proc.stderr.strip().splitlines()
    check(proc.returncode != 0 and len(err) == 1 and words in err[0] and "Traceback" not in proc.stderr
          and "Traceback" not in proc.stdout,
          f"{what}: status {proc.returncode}, one line naming {words!r}: {proc.stderr.strip()!r}")


def has_gpu() -> bool:
    probe = "import ctypes, sys\ntry:\n c = ctypes.CDLL('libcuda.so.1')\nexcept OSError:\n sys.exit(1)\n" \
            "n = ctypes.c_int(0)\nsys.exit(0 if c.cuInit(0) == 0 and c.cuDeviceGetCount(ctypes.byref(n)) == 0 " \
            "and n.value > 0 else 1)\n"
    return subprocess.run(["python3", "-c", probe], env={"PATH": CLEAN_PATH}).returncode == 0


# ---------------------------------------------------------------------------


def check_paths(bundle: str, forbidden: list[str]) -> None:
    """No file uses a path of the build machine at run time."""
    needles = [p.encode() for p in forbidden]
    bad = []
    for d, _, files in os.walk(bundle):
        for name in files:
            path = os.path.join(d, name)
            rel = os.path.relpath(path, bundle)
            if gb.is_elf(path):
                dyn = gb.dynamic(path)
                for entry in dyn.runpath + dyn.rpath:
                    if not entry.startswith("$ORIGIN"):
                        bad.append(f"{rel}: RUNPATH/RPATH {entry}")
                blobs = gb.loaded_segments(path)
            else:
                with open(path, "rb") as f:
                    blobs = [f.read()]
            for blob in blobs:
                for n in needles:
                    if n in blob:
                        bad.append(f"{rel}: contains {n.decode()}")
    check(not bad, "no file uses a path of the build machine" + (": " + "; ".join(sorted(set(bad))[:10]) if bad
                                                                 else ""))


def check_libraries(bundle: str) -> None:
    """Every ELF file's libraries come from the bundle, the platform or the
    driver; none needs a newer glibc than this machine's."""
    here = gb.glibc_version()
    newest: tuple[int, ...] = (0,)
    bad = []
    for d, _, files in os.walk(bundle):
        for name in files:
            path = os.path.join(d, name)
            if not gb.is_elf(path):
                continue
            rel = os.path.relpath(path, bundle)
            newest = max(newest, gb.glibc_needed(path))
            if rel.startswith("tests/gpu/programs/sim-") or rel.startswith("sim/"):
                continue  # the simulated GPU's: LD_LIBRARY_PATH=sim/lib, as run --sim sets it
            proc = subprocess.run(["ldd", path], env={"PATH": CLEAN_PATH}, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True)
            for line in proc.stdout.splitlines():
                m = re.match(r"\s*(\S+)\s+=>\s+(\S+)", line)
                if not m or m.group(1) in gb.PLATFORM | gb.DRIVER:
                    continue
                where = m.group(2)
                if where == "not" or not os.path.realpath(where).startswith(os.path.realpath(bundle) + "/"):
                    bad.append(f"{rel}: {m.group(1)} => {where}")
    check(not bad, "every library comes from the bundle, the platform or the driver"
          + (": " + "; ".join(bad[:10]) if bad else ""))
    check(newest <= here, f"glibc needed {gb.version_text(newest)} <= this machine's {gb.version_text(here)}")


def check_sim_run(bundle: str, work: str) -> None:
    proc = run([os.path.join(bundle, "run"), "--sim"], cwd=work, clean=True)
    lines = proc.stdout.strip().splitlines()
    m = re.fullmatch(r"(\d+) passed, (\d+) failed(?:, (\d+) skipped)?", lines[-1] if lines else "")
    passed, failed = (int(m.group(1)), int(m.group(2))) if m else (0, -1)
    if not check(proc.returncode == 0 and m is not None and passed >= 14 and failed == 0,
                 f"run --sim: status {proc.returncode}, last line {lines[-1:]!r} (14 or more passed, 0 failed)"):
        print(proc.stdout[-4000:] + proc.stderr[-2000:])
    check("Traceback" not in proc.stdout + proc.stderr, "run --sim: no traceback")
    where = [ln.split("results in ", 1)[1] for ln in lines if ln.startswith("run: results in ")]
    if not check(bool(where) and os.path.isdir(where[-1]), f"run --sim: names its results folder: {where}"):
        return
    results = where[-1]
    check(os.path.realpath(results).startswith(os.path.realpath(bundle) + "/"),
          "run --sim: results inside the bundle by default")
    for name in ("table.txt", "results.json", "oom-summaries.txt"):
        check(os.path.isfile(os.path.join(results, name)), f"results hold {name}")
    try:
        with open(os.path.join(results, "results.json"), encoding="utf-8") as f:
            report = json.load(f)
        statuses = {t["name"]: t["status"] for t in report["tests"]}
        check(report["counts"]["passed"] == passed and report["mode"] == "sim",
              f"results.json: {report['counts']} agrees with the last line")
    except (OSError, ValueError, KeyError) as e:
        check(False, f"results.json readable: {e}")
        return
    for name in ("oom-exhaust", "fragmentation"):
        snaps = glob.glob(os.path.join(results, name, "gpumemtrace.*.oom.*.json"))
        summaries = glob.glob(os.path.join(results, name, "gpumemtrace.*.oom.*.summary.txt"))
        check(statuses.get(name) == "pass" and len(snaps) == 1 and len(summaries) == 1,
              f"{name}: passed, its out-of-memory snapshot and summary kept ({len(snaps)}, {len(summaries)})")
        for s in summaries:
            with open(s, encoding="utf-8") as f:
                text = f.read()
            check("OUT OF MEMORY" in text and "verdict:" in text, f"{name}: the summary is the viewer's")
        for s in snaps:
            check_carried_jsonschema(bundle, s, work)
    exits = glob.glob(os.path.join(results, "runtime-static", "gpumemtrace.*.exit.*.json"))
    check(not exits, "a passed test's other snapshots are not kept without --keep")


def check_session(source: str, bundle: str, work: str) -> None:
    """tests/gpu/session.py, a lent GPU's one call, rehearsed on the simulated
    GPU: every phase said, the golden traces of the PyTorch double recorded
    and checked with the bundle's launcher; then a budget too short for the
    first phase: cut off, the next not started, status 1, nothing said done."""
    session = os.path.join(bundle, "tests", "gpu", "session.py")
    double = os.pathsep.join(os.path.join(source, "tests", "frameworks", d, "site-packages")
                             for d in ("fake_torch", "fake_common"))
    results = os.path.join(work, "session")
    packed = os.path.join(work, "session.tar.gz")
    proc = run([sys.executable, session, "--bundle", bundle, "--results", results, "--sim", "--double", double,
                "--archive", packed], cwd=work, clean=True)
    try:
        with open(os.path.join(results, "session.txt"), encoding="utf-8") as f:
            said = dict(ln.split(": ", 1) for ln in f.read().splitlines() if not ln.startswith("session: "))
    except (OSError, ValueError) as e:
        check(False, f"session --sim: session.txt readable: {e}: {proc.stdout[-2000:]} {proc.stderr[-2000:]}")
        return
    check(proc.returncode == 0 and list(said) == ["torch", "suite", "overhead", "golden", "history"],
          f"session --sim: status {proc.returncode}, a line per phase: {said}")
    check(said.get("golden", "").startswith("done") and said["golden"].endswith("every check held") and
          len(glob.glob(os.path.join(results, "golden", "*.json.gz"))) >= 6,
          f"session --sim: the double's golden traces recorded and checked: {said.get('golden')!r}")
    check(said.get("torch", "").startswith("skipped") and said.get("history", "").startswith("skipped"),
          f"session --sim: PyTorch's phases skipped, not passed: {said.get('torch')!r} {said.get('history')!r}")
    m = re.search(r"(\d+) passed, 0 failed", said.get("suite", ""))
    check(said.get("suite", "").startswith("done") and m is not None and int(m.group(1)) >= 14,
          f"session --sim: the suite's other tests: {said.get('suite')!r}")
    check(os.path.isfile(os.path.join(results, "suite", "table.txt")), "session --sim: the suite's table kept")
    try:
        with tarfile.open(packed) as tar:
            names = set(tar.getnames())
    except (OSError, tarfile.TarError) as e:
        names = {str(e)}
    check({"session/session.txt", "session/suite/table.txt", "session/golden.log"} <= names and
          any(n.startswith("session/golden/") and n.endswith(".json.gz") for n in names) and
          f"archive: {packed}, " in proc.stdout,
          f"session --sim --archive: the results folder in one file: {sorted(names)[:12]} {proc.stdout[-400:]}")
    short = os.path.join(work, "session-short")
    proc = run([sys.executable, session, "--bundle", bundle, "--results", short, "--sim", "--double", double,
                "--budget", "6", "--only", "golden", "--only", "suite"], cwd=work, clean=True)
    lines = proc.stdout.strip().splitlines()
    check(proc.returncode == 1 and len(lines) == 3 and lines[0].startswith("suite: cut off after ") and
          lines[1] == "golden: not started: the budget was spent" and "done" not in proc.stdout,
          f"session, 1 s of budget: cut off, then not started, status 1: {proc.returncode} {lines}")
    one_line_error(run([sys.executable, session, "--bundle", bundle, "--results", short, "--budget", "5"],
                       cwd=work, clean=True), "session --budget 5", "--budget")
    one_line_error(run([sys.executable, session, "--bundle", work, "--results", short], cwd=work, clean=True),
                   "session --bundle not-a-bundle", "not a bundle")
    one_line_error(run([sys.executable, session, "--bundle", bundle, "--results", short,
                        "--archive", os.path.join(short, "s.tar.gz")], cwd=work, clean=True),
                   "session --archive inside --results", "inside the results folder")


def check_carried_jsonschema(bundle: str, snapshot: str, work: str) -> None:
    """The bundle's validator, with only the bundle's jsonschema (no site
    packages), accepts a real snapshot and rejects a broken one."""
    validator = [sys.executable, "-S", os.path.join(bundle, "tools", "validate_snapshot.py"), "--quiet"]
    env = {"PATH": CLEAN_PATH, "PYTHONPATH": os.path.join(bundle, "python")}
    ok = subprocess.run(validator + [snapshot], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    check(ok.returncode == 0, f"the carried jsonschema accepts {os.path.basename(snapshot)}: {ok.stdout.strip()[-300:]}")
    with open(snapshot, encoding="utf-8") as f:
        doc = json.load(f)
    doc["summary"]["live_bytes"] = "many"
    broken = os.path.join(work, "broken.json")
    with open(broken, "w", encoding="utf-8") as f:
        json.dump(doc, f)
    bad = subprocess.run(validator + [broken], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    check(bad.returncode == 1 and "live_bytes" in bad.stdout, f"the carried jsonschema rejects a broken snapshot: "
          f"{bad.returncode} {bad.stdout.strip()[-200:]!r}")


def check_bad_input(source: str, bundle: str, work: str) -> None:
    script = os.path.join(source, "scripts", "gpu-bundle")
    one_line_error(run([script], cwd=work), "gpu-bundle without OUT", "OUT")
    one_line_error(run([script, "--bogus", "x"], cwd=work), "gpu-bundle --bogus", "--bogus")
    runner = os.path.join(bundle, "run")
    one_line_error(run([runner, "--bogus"], cwd=work, clean=True), "run --bogus", "--bogus")
    one_line_error(run([runner, "--sim", "--only", "no-such-test"], cwd=work, clean=True), "run --only no-such-test",
                   "no-such-test")
    one_line_error(run([runner, "--python"], cwd=work, clean=True), "run --python without a value", "--python")

    damaged = os.path.join(work, "damaged")
    shutil.copytree(bundle, damaged, symlinks=True, ignore=shutil.ignore_patterns("results"))
    os.unlink(os.path.join(damaged, "lib", "gpumemtrace", "libjansson.so.4"))
    one_line_error(run([os.path.join(damaged, "run"), "--sim"], cwd=work, clean=True),
                   "a bundle without a library", "lib/gpumemtrace/libjansson.so.4 is missing")
    shutil.copyfile(os.path.join(bundle, "lib", "gpumemtrace", "libjansson.so.4"),
                    os.path.join(damaged, "lib", "gpumemtrace", "libjansson.so.4"))
    with open(os.path.join(damaged, "tests", "gpu", "check_gpu.py"), "a", encoding="utf-8") as f:
        f.write("\n# changed\n")
    one_line_error(run([os.path.join(damaged, "run"), "--sim"], cwd=work, clean=True),
                   "a bundle with a changed file", "tests/gpu/check_gpu.py has changed")
    os.unlink(os.path.join(damaged, "tests", "gpu", "bundle_run.py"))
    one_line_error(run([os.path.join(damaged, "run"), "--sim"], cwd=work, clean=True),
                   "a bundle without its runner", "bundle_run.py is missing")


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--source", required=True)
    ap.add_argument("--build-dir", required=True)
    args = ap.parse_args(argv)
    source, build = os.path.realpath(args.source), os.path.abspath(args.build_dir)
    work = tempfile.mkdtemp(prefix="gmt-bundle-test-")
    made = os.path.join(work, "made")
    proc = run([os.path.join(source, "scripts", "gpu-bundle"), "--build-dir", build, made], cwd=work, timeout=1800)
    if not check(proc.returncode == 0 and os.path.isfile(os.path.join(made, "MANIFEST.json")),
                 f"scripts/gpu-bundle: status {proc.returncode}"):
        print(proc.stdout[-3000:] + proc.stderr[-3000:])
        return 1
    print(proc.stdout.strip().splitlines()[-1])

    bundle = os.path.join(work, "elsewhere", "bundle")
    os.makedirs(os.path.dirname(bundle))
    os.rename(made, bundle)
    for stale in glob.glob(glob.escape(build) + ".away-*"):
        shutil.rmtree(stale, ignore_errors=True)
    away = f"{build}.away-{os.getpid()}"
    os.rename(build, away)
    try:
        size = gb.size_of(bundle)
        check(size <= MAX_BYTES, f"size {size / (1 << 20):.1f} MiB <= 48 MiB")
        check_paths(bundle, [source, build, made, away])
        check_libraries(bundle)
        check_sim_run(bundle, work)
        check_session(source, bundle, work)
        if has_gpu():
            print("skip: a GPU is here, so run without --sim would run the suite")
        else:
            proc = run([os.path.join(bundle, "run")], cwd=work, clean=True)
            out = proc.stdout.strip().splitlines()
            check(proc.returncode == 0 and len(out) == 1 and out[0].startswith("no GPU here") and not proc.stderr,
                  f"run without a GPU: one line, status 0: {out!r} {proc.stderr.strip()!r}")
        check_bad_input(source, bundle, work)
    finally:
        os.rename(away, build)
    if failures:
        print(f"{len(failures)} check(s) failed; files kept in {work}")
        return 1
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
