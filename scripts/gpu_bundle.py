#!/usr/bin/env python3
"""Assembles the GPU bundle (docs/gpu-suite.md, "The bundle") from a
relocatable build and its staged install; scripts/gpu-bundle runs it after
building. Also the ELF queries the bundle's test uses.

The bundle carries, beside the tracer, the launcher, the viewer and the
suite, every shared library they and the suite's programs load that is not
part of the platform (glibc, libstdc++, libgcc_s) or of the NVIDIA driver
(libcuda, libnvidia-ml): found from the binaries themselves, their DT_NEEDED
closure as ldd resolves it here, plus the libraries they dlopen() by a name
that stands in their read-only data (libdw). Each copied library gets the
RUNPATH $ORIGIN, so that its own dependencies come from beside it; the
tracer and the launcher carry an $ORIGIN RUNPATH from the build
(-Drelocatable=true). Nothing is put on LD_LIBRARY_PATH: a RUNPATH serves
only the object that carries it, so the traced program resolves its own
libraries as it would without the bundle.

Usage: gpu_bundle.py --build-dir BUILD --stage STAGE --source ROOT --out OUT
Standard library only; needs readelf, ldd, ldconfig and patchelf (the
build machine's tools, never the bundle's).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import stat
import subprocess
import sys
import time
from dataclasses import dataclass, field

SOURCE = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))
sys.path.insert(0, os.path.join(SOURCE, "tests", "gpu"))
from bundle_run import FORMAT, MANIFEST, sha256  # noqa: E402  (the runner checks what this writes)

# What every Linux that runs the NVIDIA driver has, and must come from the
# machine itself (the policy auditwheel's manylinux tags express): glibc's
# libraries and the C++ runtime the host's own programs use.
PLATFORM = {
    "linux-vdso.so.1", "ld-linux-x86-64.so.2", "libc.so.6", "libm.so.6", "libdl.so.2",
    "libpthread.so.0", "librt.so.1", "libresolv.so.2", "libutil.so.1", "libanl.so.1",
    "libstdc++.so.6", "libgcc_s.so.1",
}
# The NVIDIA driver's libraries: the GPU machine's own, never copied.
DRIVER = {"libcuda.so", "libcuda.so.1", "libnvidia-ml.so", "libnvidia-ml.so.1"}
# The CUDA runtime, whose name the tracer looks for among a program's
# libraries (a runtime loaded without a driver): the program's, never copied.
RUNTIME = {"libcudart.so"}
# What the bundle itself provides.
OURS = {"libgpumemtrace.so"}

# NOTE: a name, not a pattern ("libffi.so*", which the leak scan matches
# modules with).
SONAME_RE = re.compile(rb"\blib[A-Za-z0-9_+.-]*?\.so(?:\.[0-9]+)*\b(?![*?\[])")
GLIBC_RE = re.compile(r"\bGLIBC_([0-9]+)\.([0-9]+)(?:\.([0-9]+))?\b")


class BundleError(Exception):
    """Why the bundle cannot be made, in one line."""


# ---------------------------------------------------------------------------
# ELF queries (readelf), shared with tests/gpu/test_bundle.py


def is_elf(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False


def _readelf(args: list[str], path: str) -> str:
    proc = subprocess.run(["readelf", "-W"] + args + [path], stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        raise BundleError(f"readelf {' '.join(args)} {path}: {proc.stderr.strip()}")
    return proc.stdout


@dataclass
class Dynamic:
    needed: list[str] = field(default_factory=list)
    runpath: list[str] = field(default_factory=list)
    rpath: list[str] = field(default_factory=list)
    soname: str | None = None


def dynamic(path: str) -> Dynamic:
    """The DT_NEEDED, DT_RUNPATH, DT_RPATH and DT_SONAME entries of an ELF
    file (none for a static one)."""
    d = Dynamic()
    for line in _readelf(["-d"], path).splitlines():
        m = re.search(r"\((NEEDED|RUNPATH|RPATH|SONAME)\)\s+\S.*?\[(.*)\]", line)
        if not m:
            continue
        tag, value = m.groups()
        if tag == "NEEDED":
            d.needed.append(value)
        elif tag == "SONAME":
            d.soname = value
        else:
            (d.runpath if tag == "RUNPATH" else d.rpath).extend(p for p in value.split(":") if p)
    return d


def glibc_needed(path: str) -> tuple[int, ...]:
    """The newest GLIBC_x.y[.z] symbol version the file needs, (0,) if none."""
    best: tuple[int, ...] = (0,)
    for line in _readelf(["-V"], path).splitlines():
        if "Name:" not in line:
            continue
        for m in GLIBC_RE.finditer(line):
            best = max(best, tuple(int(x) for x in m.groups() if x is not None))
    return best


def loaded_segments(path: str) -> list[bytes]:
    """The bytes of the sections that are loaded at run time (SHF_ALLOC):
    what the program can read, without debug information."""
    out = []
    text = _readelf(["-S"], path)
    with open(path, "rb") as f:
        for line in text.splitlines():
            # [Nr] Name Type Address Off Size ES Flg Lk Inf Al
            m = re.match(r"\s*\[\s*\d+\]\s+(\S+)\s+(\S+)\s+[0-9a-f]+\s+([0-9a-f]+)\s+([0-9a-f]+)\s+"
                         r"[0-9a-f]+\s+(\S*)\s", line)
            if not m:
                continue
            _, kind, off, size, flags = m.groups()
            if "A" not in flags or kind == "NOBITS":
                continue
            f.seek(int(off, 16))
            out.append(f.read(int(size, 16)))
    return out


def dlopened_names(path: str) -> set[str]:
    """Shared-object names in the file's loaded data: what it may dlopen()."""
    names: set[str] = set()
    for blob in loaded_segments(path):
        names.update(m.group(0).decode() for m in SONAME_RE.finditer(blob))
    return names


def glibc_version() -> tuple[int, ...]:
    """This machine's glibc, e.g. (2, 36)."""
    text = os.confstr("CS_GNU_LIBC_VERSION") or ""
    m = re.search(r"([0-9]+)\.([0-9]+)", text)
    return tuple(int(x) for x in m.groups()) if m else (0,)


def version_text(v: tuple[int, ...]) -> str:
    return ".".join(str(x) for x in v)


# ---------------------------------------------------------------------------
# Finding the libraries to carry


def ldd(path: str) -> dict[str, str]:
    """soname -> resolved path of the file's whole dependency closure, as the
    dynamic loader finds it on this machine; a missing one is an error."""
    proc = subprocess.run(["ldd", path], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
    out: dict[str, str] = {}
    if proc.returncode != 0:
        if "not a dynamic executable" in proc.stdout + proc.stderr:
            return out
        raise BundleError(f"ldd {path}: {proc.stderr.strip() or proc.stdout.strip()}")
    for line in proc.stdout.splitlines():
        m = re.match(r"\s*(\S+)\s+=>\s+(.*?)\s+\(0x[0-9a-f]+\)\s*$", line)
        if m:
            out[m.group(1)] = m.group(2)
        elif "=> not found" in line and line.split()[0] not in DRIVER:
            raise BundleError(f"{path} needs {line.split()[0]}, which this machine does not have")
    return out


def ldconfig_cache() -> dict[str, str]:
    """soname -> path of the x86-64 libraries the loader's cache knows."""
    proc = subprocess.run(["ldconfig", "-p"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL, text=True)
    out: dict[str, str] = {}
    for line in proc.stdout.splitlines():
        m = re.match(r"\s*(\S+)\s+\((.*?)\)\s+=>\s+(\S+)", line)
        if m and "x86-64" in m.group(2):
            out.setdefault(m.group(1), m.group(3))
    return out


def carried(sonames: dict[str, str]) -> dict[str, str]:
    """Of soname -> path, those the bundle must carry."""
    return {s: p for s, p in sonames.items() if s not in PLATFORM | DRIVER | RUNTIME | OURS}


def dependencies(binaries: list[str], cache: dict[str, str], dlopened: bool) -> dict[str, str]:
    """soname -> path on this machine of every library the binaries need,
    directly or transitively, that the bundle must carry; with dlopened, also
    those the binaries themselves dlopen() by a name in their data, and what
    those need. (Only our own binaries are read for names: a library's own
    optional plugins, such as libdw's debuginfod client, stay out.)"""
    found: dict[str, str] = {}
    pending = list(binaries)
    if dlopened:
        for path in binaries:
            for name in sorted(carried({n: "" for n in dlopened_names(path)})):
                if name not in found and name in cache:
                    found[name] = cache[name]
                    pending.append(cache[name])
    seen: set[str] = set()
    while pending:
        path = pending.pop()
        if path in seen:
            continue
        seen.add(path)
        for soname, lib in carried(ldd(path)).items():
            if soname not in found:
                found[soname] = lib
                pending.append(lib)
    return found


def package_of(path: str) -> str:
    """The Debian package (and version) a file comes from, or "unknown"."""
    real = os.path.realpath(path)
    for candidate in dict.fromkeys([path, real, real.replace("/usr/lib/", "/lib/", 1)]):
        try:
            proc = subprocess.run(["dpkg-query", "-S", candidate], stdin=subprocess.DEVNULL,
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        except OSError:
            return "unknown"
        if proc.returncode == 0 and ":" in proc.stdout:
            pkg = proc.stdout.split(":", 1)[0].split(",")[0].strip()
            ver = subprocess.run(["dpkg-query", "-W", "-f=${Version}", pkg], stdin=subprocess.DEVNULL,
                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            return f"{pkg} {ver.stdout.strip()}".strip()
    return "unknown"


# ---------------------------------------------------------------------------
# Assembling


def patchelf(args: list[str], path: str) -> None:
    proc = subprocess.run(["patchelf"] + args + [path], stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        raise BundleError(f"patchelf {' '.join(args)} {path}: {proc.stderr.strip()}")


def copy(src: str, dst: str) -> None:
    """src (links followed) to dst, readable by all, executable where src is."""
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    shutil.copyfile(src, dst)
    mode = 0o755 if os.stat(src).st_mode & stat.S_IXUSR else 0o644
    os.chmod(dst, mode)


def copy_libraries(libs: dict[str, str], into: str) -> list[dict[str, str]]:
    """Copy each library under its soname into `into`, with RUNPATH $ORIGIN;
    returns what the manifest says of them."""
    out = []
    for soname, path in sorted(libs.items()):
        dst = os.path.join(into, soname)
        copy(path, dst)
        os.chmod(dst, 0o755)
        patchelf(["--set-rpath", "$ORIGIN"], dst)
        out.append({"soname": soname, "package": package_of(path)})
    return out


def python_packages(into: str) -> list[str]:
    """Copy the pure-Python modules Debian's jsonschema imports (jsonschema and
    what it needs, not the standard library) from /usr/bin/python3's path into
    `into`; compiled extension modules are left out (each has a pure-Python
    fallback). Returns the top-level names copied."""
    # NOTE: -S and the site directories added by hand, so that what .pth
    # files import at start-up is not taken for jsonschema's.
    probe = r"""
import json, site, sys, sysconfig
sys.path.extend(site.getsitepackages())
before = set(sys.modules)
import jsonschema
jsonschema.Draft202012Validator({"type": "object"}).validate({})
std = {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib")}
out = {}
for name, mod in list(sys.modules.items()):
    f = getattr(mod, "__file__", None)
    if name in before or not f or any(f.startswith(s + "/") for s in std):
        continue
    top = name.split(".")[0]
    path = sys.modules[top].__file__ if top in sys.modules else f
    out[top] = path
print(json.dumps(out))
"""
    proc = subprocess.run(["/usr/bin/python3", "-S", "-c", probe], stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        raise BundleError("Debian's python3 cannot import jsonschema (apt-get install python3-jsonschema): "
                          + (proc.stderr.strip().splitlines() or ["?"])[-1])
    copied = []
    for top, path in sorted(json.loads(proc.stdout).items()):
        if path.endswith(".so"):
            continue
        if os.path.basename(path) == "__init__.py":
            shutil.copytree(os.path.dirname(path), os.path.join(into, top),
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.so"))
        else:
            copy(path, os.path.join(into, os.path.basename(path)))
        copied.append(top)
    check = subprocess.run(["/usr/bin/python3", "-S", "-c",
                            "import sys; sys.path.insert(0, sys.argv[1]); import jsonschema; "
                            "assert jsonschema.__file__.startswith(sys.argv[1])", into],
                           stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if check.returncode != 0:
        raise BundleError(f"the copy of jsonschema in {into} does not import on its own: "
                          + (check.stderr.strip().splitlines() or ["?"])[-1])
    return copied


def files_of(out: str) -> dict[str, dict[str, object]]:
    """Every file under out but the manifest: relative path -> size, sha256."""
    files: dict[str, dict[str, object]] = {}
    for dirpath, dirnames, filenames in os.walk(out):
        dirnames.sort()
        for name in sorted(filenames):
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, out)
            if rel == MANIFEST:
                continue
            files[rel] = {"size": os.path.getsize(path), "sha256": sha256(path)}
    return files


def os_name() -> str:
    try:
        with open("/etc/os-release", encoding="utf-8") as f:
            for line in f:
                if line.startswith("PRETTY_NAME="):
                    return line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    return platform.platform()


def prepare_out(out: str) -> None:
    """out must not exist, be empty, or hold an earlier bundle (replaced)."""
    if os.path.lexists(out) and not os.path.isdir(out):
        raise BundleError(f"{out} exists and is not a directory")
    if os.path.isdir(out) and os.listdir(out):
        if not os.path.isfile(os.path.join(out, MANIFEST)):
            raise BundleError(f"{out} is not empty and holds no bundle ({MANIFEST}): not replacing it")
        shutil.rmtree(out)
    os.makedirs(out, exist_ok=True)


@dataclass
class Layout:
    """Where the inputs are."""
    build: str
    stage: str
    source: str


SUITE_FILES = [  # (from the source tree, to the bundle)
    ("tests/gpu", "tests/gpu", ".py"),  # but the suite's own tests (test_*) and build check
    ("tests/schema/schema_check.py", "tests/schema/schema_check.py", None),
    ("tools/validate_snapshot.py", "tools/validate_snapshot.py", None),
    ("docs/snapshot.schema.json", "docs/snapshot.schema.json", None),
    ("docs/gpu-suite.md", "docs/gpu-suite.md", None),
]


def assemble(src: Layout, out: str) -> dict[str, object]:
    """Fill out from a built relocatable build directory and its staged
    install; returns the manifest (also written to out/MANIFEST.json)."""
    prepare_out(out)
    # The tracer, the launcher and the viewer, as installed.
    for rel in ("bin/gpumemtrace", "lib/libgpumemtrace.so"):
        if not os.path.isfile(os.path.join(src.stage, rel)):
            raise BundleError(f"the staged install {src.stage} has no {rel}")
        copy(os.path.join(src.stage, rel), os.path.join(out, rel))
    shutil.copytree(os.path.join(src.stage, "share", "gpumemtrace"), os.path.join(out, "share", "gpumemtrace"),
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for rel in ("bin/gpumemtrace", "lib/libgpumemtrace.so"):
        runpath = dynamic(os.path.join(out, rel)).runpath
        if not runpath or not all(p.startswith("$ORIGIN") for p in runpath):
            raise BundleError(f"{rel} has RUNPATH {runpath}: configure the build with -Drelocatable=true")

    # The suite: the nvcc programs, their g++ builds on the simulated GPU, the
    # simulated driver and runtime, the Python runner and checker.
    built = os.path.join(src.build, "tests", "gpu")
    programs = os.path.join(out, "tests", "gpu", "programs")
    nvcc, sim = [], []
    for name in sorted(os.listdir(built)):
        path = os.path.join(built, name)
        if os.path.isfile(path) and os.access(path, os.X_OK) and is_elf(path):
            copy(path, os.path.join(programs, name))
            (sim if name.startswith("sim-") else nvcc).append(name)
    if not nvcc:
        raise BundleError(f"{built} has no nvcc-built programs (configure where nvcc is found)")
    if not sim:
        raise BundleError(f"{built} has no simulated-GPU programs (g++ missing?)")
    for name in sim:
        patchelf(["--remove-rpath"], os.path.join(programs, name))
    for lib, sub in (("libcuda.so.1", "driver"), ("libcudart.so.13", "runtime")):
        copy(os.path.join(src.build, "sim", sub, lib), os.path.join(out, "sim", "lib", lib))
    for frm, to, ext in SUITE_FILES:
        path = os.path.join(src.source, frm)
        if ext is None:
            copy(path, os.path.join(out, to))
            continue
        for name in sorted(os.listdir(path)):
            if name.endswith(ext) and not name.startswith("test_") and name != "check_build.py":
                copy(os.path.join(path, name), os.path.join(out, to, name))
    copy(os.path.join(src.source, "tests", "gpu", "bundle-run.sh"), os.path.join(out, "run"))
    os.chmod(os.path.join(out, "run"), 0o755)

    # Their libraries.
    cache = ldconfig_cache()
    tools = [os.path.join(src.stage, "bin", "gpumemtrace"), os.path.join(src.stage, "lib", "libgpumemtrace.so")]
    libs = copy_libraries(dependencies(tools, cache, dlopened=True), os.path.join(out, "lib", "gpumemtrace"))
    program_libs = dependencies([os.path.join(built, n) for n in nvcc], cache, dlopened=False)
    prog_libs = copy_libraries(program_libs, os.path.join(programs, "lib"))
    for name in nvcc:
        if set(dynamic(os.path.join(programs, name)).needed) & set(program_libs):
            patchelf(["--set-rpath", "$ORIGIN/lib"], os.path.join(programs, name))
    python = python_packages(os.path.join(out, "python"))

    elves = [os.path.join(d, f) for d, _, fs in os.walk(out) for f in fs if is_elf(os.path.join(d, f))]
    glibc = max(glibc_needed(p) for p in elves)
    manifest: dict[str, object] = {
        "format": FORMAT,
        "version": 1,
        "gpumemtrace": subprocess.run([os.path.join(out, "bin", "gpumemtrace"), "--version"],
                                      stdout=subprocess.PIPE, text=True).stdout.strip(),
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "built_on": {"os": os_name(), "glibc": version_text(glibc_version()), "machine": platform.machine()},
        "glibc_required": version_text(glibc),
        "libraries": {"lib/gpumemtrace": libs, "tests/gpu/programs/lib": prog_libs},
        "python": python,
        "programs": nvcc,
        "sim_programs": sim,
        "files": files_of(out),
    }
    with open(os.path.join(out, MANIFEST), "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
        f.write("\n")
    return manifest


def size_of(out: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(out) for f in fs)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build-dir", required=True)
    ap.add_argument("--stage", required=True, help="the build's `meson install --destdir` tree, prefix /")
    ap.add_argument("--source", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    try:
        m = assemble(Layout(os.path.abspath(args.build_dir), os.path.abspath(args.stage),
                            os.path.abspath(args.source)), os.path.abspath(args.out))
    except (BundleError, OSError) as e:
        print(f"gpu-bundle: {e}", file=sys.stderr)
        return 1
    libs = [lib["soname"] for group in m["libraries"].values() for lib in group]  # type: ignore[union-attr]
    print(f"gpu-bundle: {args.out}: {size_of(args.out) / (1 << 20):.1f} MiB, {len(m['files'])} files; "  # type: ignore[arg-type]
          f"libraries carried: {', '.join(libs)}; needs glibc {m['glibc_required']} or newer")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
