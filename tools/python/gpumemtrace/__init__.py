"""gpumemtrace's run-time API for Python: the C API of gpumemtrace.h
(docs/guide.md, "The public API") through ctypes, standard library only.

    import gpumemtrace
    path = gpumemtrace.dump()                 # an "api" snapshot now
    with gpumemtrace.tag("forward"):          # allocations made here carry the tag
        ...
    gpumemtrace.live_bytes(0)                 # live bytes on device 0

Safe to import anywhere: without the tracer (the program not run under
`gpumemtrace run`/`check`, or libgpumemtrace.so not preloaded) every call
does nothing, silently: the numbers are 0 (live_bytes(), peak_bytes(),
mark(); live_since() is (0, 0)), dump() returns None and framework() False.
available() says whether the tracer is there. Installed from the wheel it is
on the environment's path; `gpumemtrace run` and `gpumemtrace check` of an
installed tree put it on PYTHONPATH. The pytest plugin is
gpumemtrace.pytest_plugin (registered through the pytest11 entry point where
the wheel is installed), the viewer gpumemtrace.view.
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import errno
import os
import re
import sys
import time
import warnings
from typing import Iterator, Optional, Tuple

__all__ = ["__version__", "HOST", "ALL_DEVICES", "available", "dump", "tag", "live_bytes", "peak_bytes", "peak_reset",
           "mark", "live_since", "step", "framework", "parse_bytes"]

def _source_version() -> str:
    """The version in the source tree, where no _version.py was installed:
    meson.build's project(), the one place it is written."""
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        with open(os.path.join(here, os.pardir, os.pardir, os.pardir, "meson.build"), encoding="utf-8") as f:
            m = re.search(r"project\(\s*'gpumemtrace'.*?version:\s*'([^']+)'", f.read(), re.S)
    except OSError:
        m = None
    return m.group(1) if m else "unknown"


try:
    from ._version import version as __version__
except ImportError:
    __version__ = _source_version()

HOST = -1         # pinned and registered host memory
ALL_DEVICES = -2  # everything the process holds

_ull = ctypes.c_ulonglong
_P = ctypes.POINTER


class _ApiV1(ctypes.Structure):
    """struct gmt_api_v1 (gpumemtrace.h): fields are only ever appended;
    `size` says how many the library has."""
    _fields_ = [
        ("size", ctypes.c_size_t),
        ("dump", ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t)),
        ("tag_push", ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_char_p)),
        ("tag_pop", ctypes.CFUNCTYPE(ctypes.c_int)),
        ("live_bytes", ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, _P(_ull))),
        ("peak_bytes", ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, _P(_ull))),
        ("peak_reset", ctypes.CFUNCTYPE(ctypes.c_int)),
        ("mark", ctypes.CFUNCTYPE(ctypes.c_int, _P(_ull))),
        ("live_since", ctypes.CFUNCTYPE(ctypes.c_int, _ull, ctypes.c_int, _P(_ull), _P(_ull))),
        ("step", ctypes.CFUNCTYPE(ctypes.c_int, _ull)),
        ("framework", ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_char_p)),
    ]


_api: Optional[_ApiV1] = None
_looked = False
_warned = False


def _table() -> Optional[_ApiV1]:
    global _api, _looked
    if not _looked:
        _looked = True
        try:
            _api = _ApiV1.in_dll(ctypes.CDLL(None), "gmt_api_v1")
        except (ValueError, OSError):
            _api = None
    return _api


def _has(field: str) -> Optional[_ApiV1]:
    """The table when the library has `field`, else None: silently without
    the tracer (the calls are meant to stay in a program run untraced), with
    one warning when the library loaded predates `field`."""
    global _warned
    api = _table()
    if api is None:
        return None
    desc = getattr(_ApiV1, field)
    if api.size >= desc.offset + desc.size:
        return api
    if not _warned:
        _warned = True
        warnings.warn(f"gpumemtrace: the loaded libgpumemtrace.so predates gpumemtrace.{field}(): "
                      "gpumemtrace calls do nothing", RuntimeWarning, stacklevel=3)
    return None


def _check(rc: int, what: str) -> bool:
    """True on success, False when the tracer is off in this process; an
    OSError for anything else (a bad device, an empty tag)."""
    if rc == 0:
        return True
    if rc == -errno.ENOSYS:  # tracing off in this process (secure execution)
        return False
    raise OSError(-rc, f"gpumemtrace.{what}: {os.strerror(-rc)}")


def available() -> bool:
    """Whether the tracer is loaded in this process."""
    return _table() is not None


def dump() -> Optional[str]:
    """Writes an "api" snapshot now; its path, or None without the tracer
    (or with tracing off in this process).
    A framework the bootstrap watches (PyTorch) hands over its state for it
    first: its tensors are in the snapshot too (docs/guide.md, "Two levels
    of memory")."""
    api = _has("dump")
    if api is None:
        return None
    frameworks = sys.modules.get(__name__ + ".frameworks")  # its name: boot/sitecustomize.py
    if frameworks is not None:
        frameworks.before_dump()
    buf = ctypes.create_string_buffer(4096)
    if not _check(api.dump(buf, len(buf)), "dump"):
        return None
    return buf.value.decode("utf-8", "surrogateescape")


def _c_text(text: str) -> bytes:
    """text as the tracer takes it: UTF-8, a name decoded from bytes
    (surrogateescape) back to its bytes, any other lone surrogate written
    as its escape — never an exception of the encoding."""
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace")


@contextlib.contextmanager
def tag(name: str) -> Iterator[None]:
    """A region tag on this thread: allocations made inside carry it."""
    api = _has("tag_push")
    pushed = api is not None and _check(api.tag_push(_c_text(name)), "tag")
    try:
        yield
    finally:
        if pushed and api is not None:
            api.tag_pop()


def _bytes_of(field: str, device: int) -> int:
    api = _has(field)
    if api is None:
        return 0
    out = _ull(0)
    return out.value if _check(getattr(api, field)(device, ctypes.byref(out)), field) else 0


def live_bytes(device: int = ALL_DEVICES) -> int:
    """Live bytes on a device (an ordinal, HOST or ALL_DEVICES); 0 without
    the tracer."""
    return _bytes_of("live_bytes", device)


def peak_bytes(device: int = ALL_DEVICES) -> int:
    """The highest live bytes of a device since the start or peak_reset();
    0 without the tracer."""
    return _bytes_of("peak_bytes", device)


def peak_reset() -> None:
    """Starts the peaks afresh at what is live now."""
    api = _has("peak_reset")
    if api is not None:
        _check(api.peak_reset(), "peak_reset")


def mark() -> int:
    """A mark in the process's sequence of allocations and frees; 0
    without the tracer."""
    api = _has("mark")
    if api is None:
        return 0
    out = _ull(0)
    return out.value if _check(api.mark(ctypes.byref(out)), "mark") else 0


def live_since(since: int, device: int = ALL_DEVICES) -> Tuple[int, int]:
    """(bytes, allocations) live now of those made after mark `since`;
    (0, 0) without the tracer."""
    api = _has("live_since")
    if api is None:
        return 0, 0
    b, n = _ull(0), _ull(0)
    if not _check(api.live_since(since, device, ctypes.byref(b), ctypes.byref(n)), "live_since"):
        return 0, 0
    return b.value, n.value


_own_steps = False
# The latest steps marked, (number, CLOCK_REALTIME ns), oldest first: the
# framework's history (gpumemtrace.frameworks) is replayed on them.
STEPS_KEPT = 100_000
_steps_marked: "collections.deque[Tuple[int, int]]" = collections.deque(maxlen=STEPS_KEPT)


def step(number: int) -> None:
    """Marks step `number` of the program's loop (a training step): the
    history notes it, and growth is judged on these steps too. A program
    that marks its own steps turns off the marks the PyTorch bootstrap
    makes at each optimizer step."""
    global _own_steps
    _own_steps = True
    _mark_step(number)


def _mark_step(number: int) -> None:
    _steps_marked.append((int(number), time.time_ns()))
    api = _has("step")
    if api is not None:
        _check(api.step(number), "step")


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgtp]?)(i?b?)\s*$", re.I)


def framework(state: str) -> bool:
    """Hands the tracer a framework allocator's state (a JSON object,
    docs/snapshot-format.md "framework"); what gpumemtrace.frameworks does for
    PyTorch. True when taken, False without the tracer."""
    api = _has("framework")
    if api is None:
        return False
    return _check(api.framework(state.encode("utf-8")), "framework")


def parse_bytes(text: "str | int") -> int:
    """A byte count: an int, or "1 GiB", "512M", "1.5 GB", "4096" (K, M, G, T
    and P are powers of 1024, as gpumemtrace's options read them)."""
    if isinstance(text, int) and not isinstance(text, bool):
        if text < 0:
            raise ValueError(f"a byte count cannot be negative: {text}")
        return text
    m = _SIZE.match(str(text))
    if m is None or (m.group(3) and m.group(3).lower() == "i"):
        raise ValueError(f"not a byte count: {text!r} (examples: 4096, 512 MiB, 1G)")
    scale = 1024 ** "bkmgtp".index((m.group(2) or "b").lower())
    return int(float(m.group(1)) * scale)
