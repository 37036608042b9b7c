"""The build backend of pyproject.toml: meson-python's, then what a wheel of
native programs needs that meson-python 0.12 does not do (docs/install.md,
"The wheel").

`python3 -m build --wheel --no-isolation` in a checkout calls build_wheel()
here. meson-python builds the project with -Dwheel=true (pyproject.toml) and
packs what it installs: the Python package with the tracer and the command
inside it (gpumemtrace/_native). Then, as auditwheel's repair does for
manylinux wheels, this module

- carries the shared libraries those binaries load that a bare machine
  lacks: their DT_NEEDED closure as the loader resolves it here, plus what
  they dlopen() by a name in their data (libdw), found from the binaries
  themselves by scripts/gpu_bundle.py's functions (the GPU bundle carries
  its libraries the same way), into gpumemtrace/_native/lib/gpumemtrace with
  the RUNPATH $ORIGIN; the tracer and the command get an $ORIGIN RUNPATH
  that leads there (meson-python packs the build tree's files, whose RUNPATH
  is still Meson's placeholder). glibc, libstdc++, libgcc_s and the NVIDIA driver's
  libraries are the machine's, never carried (no CUDA library is linked);
- tags the wheel py3-none-manylinux_2_<N>_<arch>, N the newest glibc symbol
  version any of its binaries needs: the package runs on any Python 3 of the
  supported versions (it has no extension module), on a Linux whose glibc is
  2.<N> or newer;
- refuses a wheel whose binaries need a library it neither carries nor may
  take from the platform.

The sdist is meson-python's (`meson dist` of the git checkout).
Needs, on the build machine only: ldd, readelf, ldconfig and patchelf.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import os
import platform
import re
import sys
import tempfile
import time
import zipfile
from typing import Any, Dict, List, Optional

import mesonpy

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_bundle  # noqa: E402  (its ELF queries and its rule for what to carry)

NATIVE = "gpumemtrace/_native"
CARRIED_DIR = NATIVE + "/lib/gpumemtrace"


class WheelError(Exception):
    """Why the wheel cannot be made, in one line."""


def get_requires_for_build_sdist(config_settings: Optional[Dict[str, Any]] = None) -> List[str]:
    return mesonpy.get_requires_for_build_sdist(config_settings)


def get_requires_for_build_wheel(config_settings: Optional[Dict[str, Any]] = None) -> List[str]:
    return mesonpy.get_requires_for_build_wheel(config_settings)


def build_sdist(sdist_directory: str, config_settings: Optional[Dict[str, Any]] = None) -> str:
    return mesonpy.build_sdist(sdist_directory, config_settings)


def build_wheel(wheel_directory: str, config_settings: Optional[Dict[str, Any]] = None,
                metadata_directory: Optional[str] = None) -> str:
    with tempfile.TemporaryDirectory(prefix="gmt-wheel-") as tmp:
        name = mesonpy.build_wheel(tmp, config_settings, metadata_directory)
        try:
            return repair(os.path.join(tmp, name), wheel_directory)
        except (WheelError, gpu_bundle.BundleError) as e:
            print(f"gpumemtrace wheel: {e}", file=sys.stderr)
            raise SystemExit(1) from None


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode("ascii")


def platform_tag(glibc: tuple) -> str:
    arch = platform.machine()
    if len(glibc) < 2:
        raise WheelError("no binary of the wheel names a glibc symbol version: cannot tag it")
    return f"manylinux_{glibc[0]}_{glibc[1]}_{arch}"


def repair(wheel: str, outdir: str) -> str:
    """The wheel meson-python made, with its libraries carried and its tags
    set, written into outdir; returns its file name."""
    base = os.path.basename(wheel)
    m = re.match(r"^(?P<name>[^-]+)-(?P<version>[^-]+)-", base)
    if m is None:
        raise WheelError(f"unexpected wheel name {base}")
    dist = f"{m.group('name')}-{m.group('version')}"
    with tempfile.TemporaryDirectory(prefix="gmt-repair-") as tmp:
        unpacked = os.path.join(tmp, "wheel")
        with zipfile.ZipFile(wheel) as z:
            z.extractall(unpacked)
            infos = {i.filename: i for i in z.infolist()}
        # zipfile does not restore modes: what ldd and patchelf read must be
        # the files as they will be installed.
        for name, info in infos.items():
            mode = (info.external_attr >> 16) & 0o7777
            if mode:
                os.chmod(os.path.join(unpacked, name), mode)
        binaries = sorted(os.path.join(unpacked, n) for n in infos
                          if not n.endswith("/") and gpu_bundle.is_elf(os.path.join(unpacked, n)))
        if not binaries:
            raise WheelError(f"{base} holds no binary: was it built with -Dwheel=true?")
        into = os.path.join(unpacked, CARRIED_DIR)
        # meson-python packs the files of the build tree, whose RUNPATH is
        # Meson's placeholder until `meson install` would set install_rpath:
        # set it here, to the carried libraries' directory.
        for path in binaries:
            rel = os.path.relpath(into, os.path.dirname(path))
            gpu_bundle.patchelf(["--set-rpath", f"$ORIGIN/{rel}"], path)
        libs = gpu_bundle.dependencies(binaries, gpu_bundle.ldconfig_cache(), dlopened=True)
        carried = gpu_bundle.copy_libraries(libs, into)
        every = binaries + [os.path.join(into, c["soname"]) for c in carried]
        check_resolves(every, into)
        glibc = max(gpu_bundle.glibc_needed(p) for p in every)
        tag = f"py3-none-{platform_tag(glibc)}"
        out_name = f"{dist}-{tag}.whl"
        write_wheel(unpacked, infos, dist, tag, os.path.join(outdir, out_name))
        print(f"gpumemtrace wheel: carried {', '.join(c['soname'] for c in carried) or 'nothing'}; "
              f"tagged {tag}")
        return out_name


def check_resolves(paths: List[str], carried_dir: str) -> None:
    """Every DT_NEEDED of every binary is carried or the platform's."""
    have = set(os.listdir(carried_dir)) if os.path.isdir(carried_dir) else set()
    for p in paths:
        for needed in gpu_bundle.dynamic(p).needed:
            if needed not in have and needed not in gpu_bundle.PLATFORM and needed not in gpu_bundle.OURS:
                raise WheelError(f"{os.path.basename(p)} needs {needed}, which the wheel neither carries "
                                 "nor may take from the platform")


def write_wheel(unpacked: str, infos: Dict[str, zipfile.ZipInfo], dist: str, tag: str, out: str) -> None:
    record_name = f"{dist}.dist-info/RECORD"
    wheel_name = f"{dist}.dist-info/WHEEL"
    names: List[str] = []
    for dirpath, dirnames, filenames in os.walk(unpacked):
        dirnames.sort()
        for f in sorted(filenames):
            names.append(os.path.relpath(os.path.join(dirpath, f), unpacked).replace(os.sep, "/"))
    # The package first, the dist-info last, as wheels are written.
    names.sort(key=lambda n: (n.startswith(f"{dist}.dist-info/"), n))
    rows = []
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for name in names:
            if name == record_name:
                continue
            path = os.path.join(unpacked, name)
            if name == wheel_name:
                data = ("Wheel-Version: 1.0\nGenerator: meson-python and gpumemtrace's wheel_backend\n"
                        f"Root-Is-Purelib: false\nTag: {tag}\n").encode()
            else:
                with open(path, "rb") as f:
                    data = f.read()
            old = infos.get(name)
            info = zipfile.ZipInfo(name, date_time=old.date_time if old else _date_time())
            mode = os.stat(path).st_mode & 0o777
            info.external_attr = (0o100000 | mode) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)
            rows.append((name, _record_hash(data), str(len(data))))
        rows.append((record_name, "", ""))
        text = io.StringIO()
        csv.writer(text, lineterminator="\n").writerows(rows)
        info = zipfile.ZipInfo(record_name, date_time=_date_time())
        info.external_attr = 0o100644 << 16
        z.writestr(info, text.getvalue())


def _date_time() -> tuple:
    stamp = max(int(os.environ.get("SOURCE_DATE_EPOCH", time.time())), 315532800)
    return time.gmtime(stamp)[0:6]


__all__ = ["build_sdist", "build_wheel", "get_requires_for_build_sdist", "get_requires_for_build_wheel"]
