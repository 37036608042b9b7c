"""What the framework scripts of the real-GPU suite print for check_gpu.py
(docs/gpu-suite.md): the same lines as the CUDA programs' gpu_test.h, and
gmt_dump() reached through ctypes — the table `gmt_api_v1` that
libgpumemtrace.so exports, found in the process's global scope (where
LD_PRELOAD put it). Standard library only: the scripts import it before
their framework, to say SKIP when the framework does not import.
"""
from __future__ import annotations

import ctypes
import os
import sys
from typing import Any, Iterable, NoReturn

_DUMP = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_char), ctypes.c_size_t)
_LIVE = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_ulonglong))
_VOID = ctypes.c_void_p


class _ApiV1(ctypes.Structure):
    # include/gpumemtrace.h, struct gmt_api_v1: fields are only ever added at
    # the end, and size says how many the library has.
    _fields_ = [("size", ctypes.c_size_t), ("dump", _DUMP), ("tag_push", _VOID),
                ("tag_pop", _VOID), ("live_bytes", _LIVE)]


def _api() -> _ApiV1 | None:
    try:
        return _ApiV1.in_dll(ctypes.CDLL(None), "gmt_api_v1")
    except ValueError:
        return None


def traced_live_bytes(device: int) -> int | None:
    """The live bytes the tracer counts on a device now (gmt_live_bytes), or
    None when not traced."""
    api = _api()
    if api is None or api.size < ctypes.sizeof(_ApiV1):
        return None
    value = ctypes.c_ulonglong(0)
    return value.value if api.live_bytes(device, ctypes.byref(value)) == 0 else None


def begin(name: str) -> None:
    print(f"TEST {name} {os.getpid()}", flush=True)


def skip(reason: str) -> NoReturn:
    """The script cannot check here: the suite counts it skipped."""
    print(f"SKIP {reason}", flush=True)
    sys.exit(0)


def jax_gpu() -> tuple[Any, Any, int]:
    """JAX, its first GPU device and that device's CUDA ordinal; SKIP when
    JAX does not import or has no GPU."""
    try:
        import jax
    except Exception as e:  # noqa: BLE001 (any import failure: no JAX here)
        skip(f"jax does not import: {type(e).__name__}: {e}")
    try:
        gpus = jax.devices("gpu")
    except RuntimeError as e:
        skip(f"jax {jax.__version__} has no GPU backend: {e}")
    if not gpus:
        skip(f"jax {jax.__version__} sees no GPU")
    ordinal = getattr(gpus[0], "local_hardware_id", None)
    return jax, gpus[0], gpus[0].id if ordinal is None else ordinal


def line(*words: object) -> None:
    print(" ".join(str(w) for w in words), flush=True)


def checkpoint(label: str, cover: Iterable[str] | None = None) -> str | None:
    """Writes an api snapshot now; with cover, the LIVE lines given for the
    label must then be exactly its allocations of those kinds."""
    api = _api()
    path = None
    if api is not None and api.size >= ctypes.sizeof(ctypes.c_size_t) + ctypes.sizeof(_DUMP):
        buf = ctypes.create_string_buffer(4096)
        if api.dump(buf, len(buf)) == 0:
            path = buf.value.decode()
    line("CHECKPOINT", label, path or "-")
    if cover is not None:
        line("COVER", label, ",".join(cover))
    return path


def checkpoint_at(label: str, which: str, cover: Iterable[str] | None = None) -> None:
    """A snapshot the tracer writes by itself: "@oom" or "@exit"."""
    line("CHECKPOINT", label, which)
    if cover is not None:
        line("COVER", label, ",".join(cover))


def live(label: str, address: int, size: int, kind: str, device: int) -> None:
    line("LIVE", label, hex(address), size, kind, device)


def meminfo(label: str, device: int, free: int, total: int) -> None:
    line("MEMINFO", label, device, free, total)


def pool(label: str, device: int, reserved: int) -> None:
    line("POOL", label, device, reserved)


def live_bytes(label: str, device: int, kinds: Iterable[str], nbytes: int) -> None:
    line("BYTES", label, device, ",".join(kinds), nbytes)


def has(label: str, address: int, kinds: Iterable[str], device: int, min_size: int) -> None:
    line("HAS", label, hex(address), ",".join(kinds), device, min_size)


def pyframe(label: str, address: int, function: str, file: str, lineno: int) -> None:
    line("PYFRAME", label, hex(address), function, os.path.basename(file), lineno)


def gone(label: str, address: int) -> None:
    line("GONE", label, hex(address))


def reservation(label: str, min_size: int) -> None:
    line("RESERVATION", label, min_size)


def oom(label: str, api: str, size: int, device: int, exact: bool) -> None:
    line("OOM", label, api, size, device, "exact" if exact else "min")


def framework(label: str, device: int, allocated: int, reserved: int) -> None:
    line("FRAMEWORK", label, device, allocated, reserved)


def limit(label: str, device: int, nbytes: int) -> None:
    line("LIMIT", label, device, nbytes)


def verdict(label: str, name: str, primary: bool = False) -> None:
    line("VERDICT", label, name, *(["primary"] if primary else []))


def note(text: str) -> None:
    line("NOTE", text)


def no_verdict(label: str, name: str) -> None:
    line("NOVERDICT", label, name)


def growth_site(label: str, file: str, lineno: int, steps: int = 0) -> None:
    line("GROWTHSITE", label, os.path.basename(file), lineno, *([steps] if steps else []))


def remedy(label: str, name: str, first: bool = False) -> None:
    line("REMEDY", label, name, *(["first"] if first else []))


def replay(label: str, fits: bool) -> None:
    """The diagnosis's replay with expandable segments answered, saying the
    failing request fits (or not)."""
    line("REPLAY", label, "fits" if fits else "nofit")


def recovered() -> None:
    """Out-of-memory snapshots of failures the framework recovered from are
    expected, though no checkpoint names @oom."""
    line("RECOVERED")
