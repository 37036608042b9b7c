#!/usr/bin/env python3
"""The wheel, as someone who installs it with pip sees it (docs/install.md).

A copy of the working tree (what `git ls-files` lists, tracked and new) is
built into a wheel with `python3 -m build --wheel --no-isolation` (Debian's
build and meson-python, as README says); the sdist of the checkout's commit
is made too and must hold every tracked file (the copy built is exactly
those files). The wheel is installed with pip, offline, into a fresh venv
(with Debian's packages visible, for pytest), the copy is renamed away, and,
with LD_LIBRARY_PATH holding only the simulated driver and PYTHONPATH unset:

- `gpumemtrace run -- python train.py` writes its out-of-memory snapshot,
  whose failing allocation is named at train.py's own line, and whose
  producer is this version; `gpumemtrace view` reads it;
- a pytest file with the markers, run traced with no -p: the test over its
  limit fails, the one under passes; with -p as well, the same;
- `import gpumemtrace` untraced: no warning, numbers 0, available() False,
  __version__ this version; `gpumemtrace --version` this version; man
  finds the man page from the venv's bin on PATH;
- no file of the wheel holds a path of the build (the source tree, its copy,
  the build tree, the temporary directory); every ELF's libraries resolve
  inside the venv or are the platform's; the wheel is at most 30 MiB; its
  tag is py3-none-manylinux_2_N for the glibc its binaries need;
- every file of the source package (tools/python) is in the wheel;
- pip on a Python older than the one supported (3.8, where one is here)
  refuses it, in pip's words.

usage: test_wheel.py SOURCE_ROOT BUILD_ROOT SIM_DRIVER_DIR VERSION
Exit 77 (skipped) where Debian's python3 lacks build, mesonpy or venv.
"""
from __future__ import annotations

import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from typing import Dict, List

FAILURES: List[str] = []
PY = "/usr/bin/python3"
MAX_BYTES = 30 * 1024 * 1024

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir, "scripts"))
import gpu_bundle  # noqa: E402  (its ELF queries and its PLATFORM set)

TRAIN = '''import ctypes

cuda = ctypes.CDLL("libcuda.so.1")
cuda.cuMemAlloc_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
assert cuda.cuInit(0) == 0
dev, ctx = ctypes.c_int(), ctypes.c_void_p()
assert cuda.cuDeviceGet(ctypes.byref(dev), 0) == 0
assert cuda.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev) == 0
kept = []


def step():
    p = ctypes.c_uint64()
    rc = cuda.cuMemAlloc_v2(ctypes.byref(p), 256 << 20)  # ALLOCATION LINE
    if rc == 0:
        kept.append(p.value)
    return rc


while step() == 0:
    pass
print("out of memory after", len(kept), "allocations")
'''

PYTEST_FILE = '''import ctypes

import pytest

cuda = ctypes.CDLL("libcuda.so.1")
cuda.cuMemAlloc_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
cuda.cuMemFree_v2.argtypes = [ctypes.c_uint64]
assert cuda.cuInit(0) == 0
dev, ctx = ctypes.c_int(), ctypes.c_void_p()
assert cuda.cuDeviceGet(ctypes.byref(dev), 0) == 0
assert cuda.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev) == 0


def use(n):
    p = ctypes.c_uint64()
    assert cuda.cuMemAlloc_v2(ctypes.byref(p), n) == 0
    assert cuda.cuMemFree_v2(p) == 0


@pytest.mark.gpu_limit_memory("8 MiB")
def test_under():
    use(4 << 20)


@pytest.mark.gpu_limit_memory("8 MiB")
def test_over():
    use(16 << 20)
'''

UNTRACED = '''import warnings
warnings.simplefilter("error")
import gpumemtrace as g
import json
print(json.dumps({"version": g.__version__, "available": g.available(), "live": g.live_bytes(),
                  "peak": g.peak_bytes(0), "mark": g.mark(), "since": g.live_since(0), "dump": g.dump()}))
'''


def check(ok: bool, what: str, detail: object = "") -> bool:
    print(("ok   " if ok else "FAIL ") + what + ("" if ok or detail == "" else f": {detail}"))
    if not ok:
        FAILURES.append(what)
    return ok


def run(cmd: List[str], **kw) -> subprocess.CompletedProcess:
    kw.setdefault("stdin", subprocess.DEVNULL)
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def tail(p: subprocess.CompletedProcess, n: int = 15) -> str:
    return "\n".join((p.stdout + p.stderr).strip().splitlines()[-n:])


def copy_tree(source: str, into: str) -> None:
    """The working tree's files (tracked and new, not ignored), as the
    sdist would hold them once committed."""
    files = run(["git", "-C", source, "ls-files", "-z", "--cached", "--others", "--exclude-standard"])
    if files.returncode != 0:
        raise SystemExit(f"git ls-files in {source}: {files.stderr.strip()}")
    for rel in files.stdout.split("\0"):
        src = os.path.join(source, rel)
        if not rel or not os.path.lexists(src):
            continue  # deleted in the working tree
        dst = os.path.join(into, rel)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        if os.path.islink(src):
            os.symlink(os.readlink(src), dst)
        else:
            shutil.copy2(src, dst)


def build_wheel(src: str, out: str, env: Dict[str, str]) -> str:
    p = run([PY, "-m", "build", "--wheel", "--no-isolation", "--outdir", out, src], cwd=src, env=env)
    wheels = glob.glob(os.path.join(out, "*.whl"))
    if not check(p.returncode == 0 and len(wheels) == 1, "python3 -m build --wheel --no-isolation makes one wheel",
                 tail(p, 30)):
        return ""
    return wheels[0]


def check_sdist(source: str, out: str, version: str, env: Dict[str, str]) -> None:
    if not os.path.isdir(os.path.join(source, ".git")):
        print("skip the sdist: the source tree is not a git checkout (meson dist packs a commit)")
        return
    p = run([PY, "-m", "build", "--sdist", "--no-isolation", "--outdir", out, source], cwd=source, env=env)
    tars = glob.glob(os.path.join(out, "*.tar.gz"))
    if not check(p.returncode == 0 and len(tars) == 1, "python3 -m build --sdist makes one sdist", tail(p, 30)):
        return
    import tarfile
    with tarfile.open(tars[0]) as t:
        names = {n.split("/", 1)[1] for n in t.getnames() if "/" in n}
        top = t.getnames()[0].split("/")[0]
        pkg_info = t.extractfile(f"{top}/PKG-INFO")
        info = pkg_info.read().decode() if pkg_info else ""
    tracked = run(["git", "-C", source, "ls-tree", "-r", "--name-only", "HEAD"]).stdout.split()
    missing = [n for n in tracked if n not in names]
    check(not missing, "the sdist holds every file of the commit", missing[:5])
    check(re.search(rf"^Version: {re.escape(version)}$", info, re.M) is not None,
          f"the sdist's PKG-INFO says version {version}", info[:200])


def check_wheel_file(wheel: str, version: str, forbidden: List[str], source: str) -> None:
    size = os.path.getsize(wheel)
    check(size <= MAX_BYTES, f"the wheel is at most 30 MiB ({size / 2**20:.1f} MiB)")
    name = os.path.basename(wheel)
    m = re.match(rf"^gpumemtrace-{re.escape(version)}-py3-none-manylinux_(\d+)_(\d+)_([a-z0-9_]+)\.whl$", name)
    check(m is not None, f"the wheel is named for version {version}, py3-none-manylinux", name)
    with tempfile.TemporaryDirectory() as tmp:
        with zipfile.ZipFile(wheel) as z:
            z.extractall(tmp)
            names = set(z.namelist())
        elves = []
        for dirpath, _, files in os.walk(tmp):
            for f in files:
                path = os.path.join(dirpath, f)
                with open(path, "rb") as fh:
                    data = fh.read()
                for bad in forbidden:
                    if bad.encode() in data:
                        check(False, f"no file of the wheel holds a path of the build ({bad})",
                              os.path.relpath(path, tmp))
                if data[:4] == b"\x7fELF":
                    elves.append(path)
        if m is not None and elves:
            need = max(gpu_bundle.glibc_needed(p) for p in elves)
            check((int(m.group(1)), int(m.group(2))) == need[:2],
                  f"the tag's glibc is the newest its binaries need (2.{need[1] if len(need) > 1 else '?'})", name)
    ours = []
    for dirpath, _, files in os.walk(os.path.join(source, "tools", "python", "gpumemtrace")):
        if "__pycache__" in dirpath:
            continue
        # Not the package's: compiled files, and the mutation check's lists
        # kept beside the code (scripts/mutants).
        ours += [os.path.relpath(os.path.join(dirpath, f), os.path.join(source, "tools", "python"))
                 for f in files if not f.endswith((".pyc", ".mutants"))]
    missing = [f for f in ours if f not in names]
    check(not missing, "every file of the package tools/python/gpumemtrace is in the wheel", missing)
    for must in ("gpumemtrace/_native/bin/gpumemtrace", "gpumemtrace/_native/lib/libgpumemtrace.so",
                 "gpumemtrace/_version.py", f"gpumemtrace-{version}.data/data/man/man1/gpumemtrace.1"):
        check(must in names, f"the wheel holds {must}")
    check(not any(re.search(r"(^|/)libcuda|libnvidia|libcudart", n) for n in names),
          "no CUDA library in the wheel", [n for n in names if "cuda" in n])
    entry = zipfile.ZipFile(wheel).read(f"gpumemtrace-{version}.dist-info/entry_points.txt").decode()
    check("[pytest11]" in entry and "gpumemtrace.pytest_plugin" in entry,
          "the pytest plugin is registered through the pytest11 entry point", entry)


def older_version(py: str) -> str:
    p = run([py, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"])
    return p.stdout.strip() if p.returncode == 0 else ""


def older_python() -> str:
    """A Python older than the oldest supported (3.9) that can make a venv
    with pip: python3.8 or python3.7 on PATH, or pyenv's."""
    found = [shutil.which(n) for n in ("python3.8", "python3.7")]
    found += sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.[78].*/bin/python3")), reverse=True)
    for py in filter(None, found):
        if older_version(py) in ("3.7", "3.8") and run([py, "-c", "import venv, ensurepip"]).returncode == 0:
            return py
    return ""


def check_resolution(venv: str) -> None:
    """ldd of every ELF installed: each library inside the venv or the platform's."""
    for path in glob.glob(os.path.join(venv, "lib", "python3*", "site-packages", "gpumemtrace", "**"),
                          recursive=True):
        if not os.path.isfile(path) or not gpu_bundle.is_elf(path):
            continue
        p = run(["ldd", path], env={"PATH": "/usr/bin:/bin"})
        bad = []
        for line in p.stdout.splitlines():
            parts = line.split()
            if not parts or parts[0] in gpu_bundle.PLATFORM or parts[0].startswith("/"):
                continue
            where = parts[2] if len(parts) > 2 and parts[1] == "=>" else ""
            if not os.path.realpath(where).startswith(os.path.realpath(venv) + "/"):
                bad.append(f"{parts[0]} => {where or 'not found'}")
        check(p.returncode == 0 and not bad, f"{os.path.relpath(path, venv)}: its libraries are the wheel's "
              "or the platform's", bad or tail(p))


def main(argv: List[str]) -> int:
    if len(argv) != 5:
        print(__doc__)
        return 2
    source, build, driver_dir, version = (os.path.abspath(argv[1]), os.path.abspath(argv[2]),
                                          os.path.abspath(argv[3]), argv[4])
    for mod in ("build", "mesonpy", "venv", "ensurepip"):
        if run([PY, "-c", f"import {mod}"]).returncode != 0:
            print(f"SKIP: Debian's python3 has no {mod} (apt-get install python3-build python3-mesonpy "
                  "python3-venv)")
            return 77
    tmp = tempfile.mkdtemp(prefix="gmt-wheel-test-")
    try:
        src, out, venv, work = (os.path.join(tmp, d) for d in ("src", "dist", "venv", "work"))
        copy_tree(source, src)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUMEMTRACE_", "GMTSIM_", "LD_"))}
        env.pop("PYTHONPATH", None)
        wheel = build_wheel(src, out, env)
        check_sdist(source, os.path.join(tmp, "sdist"), version, env)
        if not wheel:
            return 1
        check_wheel_file(wheel, version, [source, src, build, tmp], source)

        p = run([PY, "-m", "venv", "--system-site-packages", venv])
        if not check(p.returncode == 0, "a fresh venv", tail(p)):
            return 1
        p = run([os.path.join(venv, "bin", "pip"), "install", "--no-index", "--no-deps", "-q", wheel], env=env)
        if not check(p.returncode == 0, "pip installs the wheel offline", tail(p)):
            return 1
        older = older_python()
        if older:
            p = run([older, "-m", "venv", os.path.join(tmp, "venv-old")])
            old = run([os.path.join(tmp, "venv-old", "bin", "pip"), "install", "--no-index", "--no-deps", wheel],
                      env=env)
            check(p.returncode == 0 and old.returncode != 0 and "requires a different Python" in old.stderr,
                  f"pip on Python {older_version(older)} refuses it in its own words", tail(p) + tail(old))
        else:
            print("skip the older Python: none here (python3.8, python3.7 or pyenv's)")
        os.rename(src, src + ".away")

        os.makedirs(work)
        bin_ = os.path.join(venv, "bin")
        venv_env = {"PATH": f"{bin_}:/usr/bin:/bin", "HOME": tmp, "LD_LIBRARY_PATH": driver_dir,
                    "LANG": "C.UTF-8", "GMTSIM_MEMORY": "2G"}
        for k in ("GMT_TEST_ASAN_RUNTIME",):
            venv_env.pop(k, None)
        py = os.path.join(bin_, "python")

        p = run(["gpumemtrace", "--version"], env=venv_env, cwd=work)
        check(p.returncode == 0 and p.stdout.strip() == f"gpumemtrace {version}", "gpumemtrace --version",
              p.stdout + p.stderr)
        man = shutil.which("man")
        if man:
            p = run([man, "-w", "gpumemtrace"], env=venv_env, cwd=work)
            check(p.returncode == 0 and p.stdout.strip().startswith(venv + "/"),
                  "man finds the man page from the venv's bin on PATH", tail(p))
        else:
            print("skip the man page: no man here")

        with open(os.path.join(work, "train.py"), "w", encoding="utf-8") as f:
            f.write(TRAIN)
        line = TRAIN.splitlines().index(next(ln for ln in TRAIN.splitlines() if "ALLOCATION LINE" in ln)) + 1
        p = run(["gpumemtrace", "run", "--", "python", "train.py"], env=venv_env, cwd=work, timeout=300)
        snaps = glob.glob(os.path.join(work, "gpumemtrace.*.oom.1.json"))
        if check(p.returncode == 0 and len(snaps) == 1, "gpumemtrace run -- python train.py writes its snapshot",
                 tail(p)):
            with open(snaps[0], encoding="utf-8") as f:
                doc = json.load(f)
            check(doc.get("producer") == f"gpumemtrace {version}", "the snapshot's producer is this version",
                  doc.get("producer"))
            failed = (doc.get("failed_request") or {}).get("stack")
            frames = next((s.get("frames") or [] for s in doc.get("stacks") or [] if s.get("id") == failed), [])
            check(any((fr.get("file") or "").endswith("train.py") and fr.get("line") == line for fr in frames),
                  f"the failing allocation is named at train.py:{line}",
                  [(fr.get("function"), fr.get("file"), fr.get("line")) for fr in frames][:8])
            v = run(["gpumemtrace", "view", snaps[0]], env=venv_env, cwd=work, timeout=120)
            check(v.returncode == 0 and f"train.py:{line}" in v.stdout, "gpumemtrace view reads it", tail(v))

        with open(os.path.join(work, "test_limits.py"), "w", encoding="utf-8") as f:
            f.write(PYTEST_FILE)
        for extra in ([], ["-p", "gpumemtrace.pytest_plugin"]):
            p = run(["gpumemtrace", "run", "--", "python", "-m", "pytest", "-q", "-p", "no:cacheprovider",
                     *extra, "test_limits.py"], env=venv_env, cwd=work, timeout=300)
            said = " ".join(extra) or "no -p"
            check(p.returncode == 1 and re.search(r"\b1 failed, 1 passed\b", p.stdout) is not None
                  and "test_over" in p.stdout and "gpu_limit_memory" in p.stdout,
                  f"pytest ({said}): the test over its limit fails, the one under passes", tail(p, 25))

        p = run([py, "-c", UNTRACED], env=venv_env, cwd=work, timeout=120)
        got = json.loads(p.stdout) if p.returncode == 0 and p.stdout.startswith("{") else None
        check(got == {"version": version, "available": False, "live": 0, "peak": 0, "mark": 0, "since": [0, 0],
                      "dump": None} and p.stderr == "",
              "import gpumemtrace untraced: no warning, numbers 0, its version", p.stdout + p.stderr)

        check_resolution(venv)
    finally:
        if os.path.isdir(os.path.join(tmp, "src.away")):
            os.rename(os.path.join(tmp, "src.away"), os.path.join(tmp, "src"))
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{len(FAILURES)} failed" if FAILURES else "all passed")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
