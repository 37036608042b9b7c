"""The frameworks' own allocator state beside the tracer's (docs/guide.md,
"PyTorch's own view"). The bootstrap (share/gpumemtrace/boot/sitecustomize.py,
which `gpumemtrace run` and `check` put first on PYTHONPATH) calls
on_import_torch() once `torch` has been imported — never earlier, never from
a CUDA hook; a program that never imports torch gets nothing of this.

At once, a global optimizer step hook marks each optimizer step as a step
of the tracer's (gmt_step), unless the program marks its own. When PyTorch
initialises CUDA (torch.cuda._lazy_call), this turns on its
allocator history (torch.cuda.memory._record_memory_history: at most
GPUMEMTRACE_HISTORY entries; the Python frames of each allocation, or what
GPUMEMTRACE_TORCH_HISTORY says) and registers an
out-of-memory observer. At each out-of-memory PyTorch reports — after its
caching allocator released its cache and failed again — the observer saves
torch.cuda.memory._snapshot() beside the tracer's snapshot
(gpumemtrace.<pid>.torch.<n>.pickle, the file PyTorch's memory viewer reads)
and hands the tracer its segments and blocks (gmt_framework), which the
tracer joins to the driver's allocations by address in the episode's
snapshot; at exit, when exit snapshots are on, the same for the exit
snapshot. torch.cuda.empty_cache() is wrapped so that each call of the
program's is placed in that history by PyTorch's accumulated counts, for
the replay of gpumemtrace whatif (docs/whatif.md, "Where the program
emptied the cache").

CuPy has no out-of-memory observer: on_import_cupy() wraps the constructor of
its cupy.cuda.memory.OutOfMemoryError, which its pool raises after it freed
its cached blocks and the driver failed again, so that the state of the pool
the program allocates from (used, total and free bytes, its limit) is handed
over at that moment, before any handler of the program runs; at exit as for
PyTorch. CuPy's pools say no block sizes: no segments, and no largest free
block.

JAX has no out-of-memory observer either: on_import_jax() wraps the
constructor of jax.errors.JaxRuntimeError and, for a RESOURCE_EXHAUSTED
out-of-memory, hands over its allocator's memory_stats() on the device the
message names (in use, its pool, its largest free block, its limit, its
peak) and the request as the message gives it. JAX's allocator refuses most
requests inside the memory it reserved at start, with no driver failure:
the tracer then makes the hand-over a failure of its own (docs/guide.md,
"JAX's allocator").

numba.cuda has neither an observer nor an error of its own (CudaAPIError
carries the driver's code): on_import_numba() wraps its memory manager's
_attempt_allocation, which flushes the frees numba deferred and retries
once at an out-of-memory; an out-of-memory that leaves it reached the
program, and the manager's state is handed over then — its live device
memory, and its pending frees at the first failure with what it flushed.

GPUMEMTRACE_FRAMEWORKS=0 turns all of it off.

Programs started without the launcher, with libgpumemtrace.so preloaded:

    PYTHONPATH=<prefix>/share/gpumemtrace/boot:<prefix>/share/gpumemtrace/python python3 app.py
"""

from __future__ import annotations

import atexit
import collections
import errno
import functools
import importlib
import json
import os
import pickle
import re
import secrets
import sys
import threading
from typing import Any, Callable, Dict, List, Optional, Tuple

# What one hand-over keeps at most: the blocks of all segments, and the
# innermost frames of each block (the pickle beside keeps everything).
MAX_BLOCKS = 200_000
MAX_FRAMES = 16

_lock = threading.Lock()
_count = 0
# Out-of-memory hand-overs so far, and how many of them get PyTorch's pickle:
# as many as the tracer writes episodes one by one (GMT_STORM_EPISODES); in a
# storm of episodes the later ones go without, so that files stay bounded.
_ooms = 0
_OOM_PICKLES = 8
_warned = False
# PyTorch, once its history and observer are in (_start): what before_dump()
# asks.
_torch: Any = None
# Optimizer steps marked, and torch.cuda.memory_allocated() of the current
# device at the latest mark.
_steps = 0
_step_allocated: Dict[int, int] = {}
# The program's torch.cuda.empty_cache() calls, which the replay makes under
# every setting (docs/whatif.md): per device, PyTorch's accumulated counts
# at each call (_Counts), the calls the history can still hold.
_Counts = Tuple[int, int, int]
_cache_calls: Dict[int, "collections.deque[_Counts]"] = {}


def _package() -> Any:
    """The package this module is of, by the name it was loaded under: the
    bootstrap loads it as `_gpumemtrace` where the name `gpumemtrace` is a
    module of the program's (boot/sitecustomize.py), which is never
    imported from here."""
    return sys.modules[__package__]


def _env_on(name: str, default: bool) -> bool:
    v = os.environ.get(name)
    if v is None or v.strip() == "":
        return default
    return v.strip().lower() not in ("0", "false", "no", "off")


def enabled() -> bool:
    """GPUMEMTRACE_FRAMEWORKS (default on), and the tracer loaded."""
    if not _env_on("GPUMEMTRACE_FRAMEWORKS", True):
        return False
    return _package().available()


def _warn(text: str) -> None:
    """One line on stderr, the first time only: the program goes on."""
    global _warned
    if not _warned:
        _warned = True
        print(f"gpumemtrace: {text}", file=sys.stderr, flush=True)


def _history_entries() -> int:
    try:
        n = int(os.environ.get("GPUMEMTRACE_HISTORY", "10000"))
    except ValueError:
        n = 10000
    return max(1, min(n, 10_000_000))


TORCH_HISTORIES = ("alloc", "all", "events", "off")


def _torch_history() -> str:
    """GPUMEMTRACE_TORCH_HISTORY: one of TORCH_HISTORIES, else the default
    (the tracer has warned about the value already)."""
    v = os.environ.get("GPUMEMTRACE_TORCH_HISTORY", "").lower()
    return v if v in TORCH_HISTORIES else "alloc"


def _exit_wanted() -> bool:
    words = {w.strip().lower() for w in os.environ.get("GPUMEMTRACE_SNAPSHOT_ON", "oom").split(",")}
    return "exit" in words and "none" not in words


def on_import_torch(torch: Any) -> None:
    """Called by the bootstrap once `torch` is imported."""
    if not enabled():
        return
    cuda = getattr(torch, "cuda", None)
    mem = getattr(cuda, "memory", None)
    c = getattr(torch, "_C", None)
    need = [(cuda, "_lazy_call"), (mem, "_record_memory_history"), (mem, "_snapshot"),
            (c, "_cuda_attach_out_of_memory_observer")]
    missing = [name for owner, name in need if owner is None or not hasattr(owner, name)]
    if missing:
        _warn(f"torch {getattr(torch, '__version__', '?')} has no {', '.join(missing)}: "
              "PyTorch's allocator state is not recorded")
        return
    cuda._lazy_call(lambda: _start(torch))
    _mark_optimizer_steps(torch)
    _mark_cache_calls(torch)
    if _exit_wanted():
        atexit.register(_at_exit, torch)


def _mark_optimizer_steps(torch: Any) -> None:
    """Each optimizer step marks a step of the tracer's (gmt_step), so that
    the diagnosis knows a training step's own memory and a leak's bytes per
    step — unless the program marks its own (gpumemtrace.step). PyTorch
    before 2.0 has no global optimizer hook: no marks, no warning."""
    # NOTE: torch/optim/__init__.py deletes its `optimizer` attribute after
    # importing from it: the module is reached through the import system,
    # never as torch.optim.optimizer.
    try:
        module = importlib.import_module("torch.optim.optimizer")
    except Exception:  # noqa: BLE001 - no such module: a torch without optimizers
        return
    register = getattr(module, "register_optimizer_step_post_hook", None)
    if register is None:
        return
    gpumemtrace = _package()

    def marked(optimizer: Any, args: Any, kwargs: Any) -> None:
        global _steps
        if gpumemtrace._own_steps:
            return
        _steps += 1
        gpumemtrace._mark_step(_steps)
        # PyTorch's own count at the step's start: its caching allocator
        # serves a step from segments the driver gave long before, so the
        # step's memory is measured in its counters (state_of).
        if getattr(torch.cuda, "is_initialized", lambda: False)():
            try:
                dev = int(torch.cuda.current_device())
                _step_allocated.clear()
                _step_allocated[dev] = int(torch.cuda.memory_allocated(dev))
            except Exception:  # noqa: BLE001 - a count not taken: the step stays marked
                _step_allocated.clear()

    try:
        register(marked)
    except Exception as e:  # noqa: BLE001 - PyTorch's own failure: the program goes on
        _warn(f"torch {getattr(torch, '__version__', '?')}: optimizer steps are not marked "
              f"({type(e).__name__}: {e})")


def _mark_cache_calls(torch: Any) -> None:
    """Each torch.cuda.empty_cache() of the program's is counted
    (_counted_call), so that the replay makes it under every setting — also
    where, under the run's own, it released nothing and left no entry in
    the history. reset_accumulated_memory_stats() forgets the calls counted
    before it: their place is lost with the counts. Both are wrapped under
    torch.cuda and torch.cuda.memory, where PyTorch defines them; a call
    made another way (from C++, or a reference taken before torch was
    imported) is not counted, and the replay infers it from its releases as
    before."""
    cuda = torch.cuda
    if getattr(cuda, "memory_stats", None) is None:
        return
    owners = [m for m in (cuda, getattr(cuda, "memory", None)) if m is not None]
    for name, wrap in (("empty_cache", _counted_call), ("reset_accumulated_memory_stats", _forgetting_call)):
        original = getattr(cuda, name, None)
        if original is None:
            continue
        wrapped = functools.wraps(original)(wrap(torch, original))
        for m in owners:
            if getattr(m, name, None) is original:
                setattr(m, name, wrapped)


def _counted_call(torch: Any, original: Callable[..., Any]) -> Callable[..., Any]:
    """empty_cache, its place taken from the counts before and after it: a
    device whose counts moved meanwhile (another thread's request or free)
    places none — the call might be placed on the wrong side of it."""
    def empty_cache(*args: Any, **kwargs: Any) -> Any:
        before = _counts_at_call(torch)
        out = original(*args, **kwargs)
        if before:
            _count_cache_call(torch, before)
        return out
    return empty_cache


def _forgetting_call(torch: Any, original: Callable[..., Any]) -> Callable[..., Any]:
    def reset_accumulated_memory_stats(*args: Any, **kwargs: Any) -> Any:
        _forget_cache_calls()
        return original(*args, **kwargs)
    return reset_accumulated_memory_stats


_COUNT_KEYS = ("allocation.all.allocated", "allocation.all.freed", "num_ooms")


def _counts(torch: Any, device: int) -> Optional[_Counts]:
    """PyTorch's accumulated counts on device: allocations it served,
    frees asked of it, out-of-memory errors — one each per alloc,
    free_requested and oom entry of its history; None before its
    allocator holds any, or where PyTorch does not count them all."""
    st = torch.cuda.memory_stats(device)
    if not st or any(k not in st for k in _COUNT_KEYS):
        return None
    return int(st["allocation.all.allocated"]), int(st["allocation.all.freed"]), int(st["num_ooms"])


def _all_counts(torch: Any) -> Dict[int, _Counts]:
    out = {}
    for d in range(int(torch.cuda.device_count())):
        c = _counts(torch, d)
        if c is not None:
            out[d] = c
    return out


def _counts_or_none(torch: Any, warning: Optional[str] = None) -> Dict[int, _Counts]:
    """_all_counts, or none where PyTorch fails to tell them (no call is
    placed then; the replay infers it), with the warning if one is given."""
    try:
        return _all_counts(torch)
    except Exception as e:  # noqa: BLE001 - never the program's failure
        if warning:
            _warn(f"{warning} ({type(e).__name__}: {e}): the replay infers it")
        return {}


def _counts_at_call(torch: Any) -> Dict[int, _Counts]:
    """Each device's counts as an empty_cache() call starts; none before the
    history is on (nothing to place the call in)."""
    if _torch is None or _torch_history() == "off":
        return {}
    return _counts_or_none(torch, "torch.cuda.empty_cache() not counted")


def _count_cache_call(torch: Any, before: Dict[int, _Counts]) -> None:
    """The counts of each device at an empty_cache() call (it empties the
    caches of all): the call's place in each device's history, where they
    did not move during the call. A call with no request between it and the
    last is one place; the places further back than the history holds are
    dropped."""
    after = _counts_or_none(torch)
    keep = _history_entries()
    with _lock:
        for d, c in before.items():
            if after.get(d) != c:
                continue
            calls = _cache_calls.setdefault(d, collections.deque())
            if not calls or calls[-1] != c:
                calls.append(c)
            while sum(c) - sum(calls[0]) > keep:
                calls.popleft()


def _forget_cache_calls() -> None:
    with _lock:
        _cache_calls.clear()


def _cache_calls_behind(torch: Any, before: Dict[int, _Counts]) -> Dict[int, List[_Counts]]:
    """Per device, how many allocations, frees and out-of-memory errors
    each counted call came before, as of a snapshot taken between the
    counts before and now; a device whose counts moved meanwhile (another
    thread) places none."""
    if not before:
        return {}
    after = _counts_or_none(torch)
    out: Dict[int, List[_Counts]] = {}
    with _lock:
        for d, calls in _cache_calls.items():
            now = before.get(d)
            if now is None or after.get(d) != now:
                continue
            out[d] = [(now[0] - c[0], now[1] - c[1], now[2] - c[2]) for c in calls
                      if all(n >= k for n, k in zip(now, c))]
    return out


# The history's entries that PyTorch's accumulated counts count.
_COUNTED = {"alloc": 0, "free_requested": 1, "oom": 2}


def place_cache_calls(events: List[List[Any]], behind: List[_Counts]) -> List[int]:
    """Where each call that came before behind[k] counted entries of events
    (oldest first) was made: the index of the first event after it — after
    the last counted entry before it, and after the free_completed entries
    that follow that one (a free's own, or those the call completed before
    it released the cache); in order, each place once. A call the history
    does not reach back to is not placed."""
    wanted = set(behind)
    found = set()
    n = [0, 0, 0]
    for p in range(len(events), -1, -1):
        if (p == 0 or events[p - 1][0] in _COUNTED) and tuple(n) in wanted:
            at = p
            while at < len(events) and events[at][0] == "free_completed":
                at += 1
            found.add(at)
        if p > 0 and events[p - 1][0] in _COUNTED:
            n[_COUNTED[events[p - 1][0]]] += 1
    return sorted(found)


def _backend(torch: Any) -> str:
    return str(getattr(torch.cuda, "get_allocator_backend", lambda: "native")())


def _start(torch: Any) -> None:
    """At PyTorch's CUDA initialisation: its history on, our observer in.
    Not with PyTorch's cudaMallocAsync backend, which keeps neither segments
    nor history (the tracer's stream-ordered pools are the whole view)."""
    backend = _backend(torch)
    if backend != "native":
        if _env_on("GPUMEMTRACE_VERBOSE", False):
            print(f"gpumemtrace: PyTorch's {backend} allocator keeps no segments: its state is not recorded",
                  file=sys.stderr, flush=True)
        return
    mem = torch.cuda.memory
    n = _history_entries()
    mode = _torch_history()
    # The frames of frees ("all") serve PyTorch's own viewer alone; the
    # tensor level reads each allocation's (docs/guide.md, "What PyTorch's
    # history costs").
    context = {"alloc": "alloc", "all": "all", "events": None}.get(mode)
    try:
        if mode != "off":
            try:
                mem._record_memory_history(enabled="all", context=context, stacks="python", max_entries=n)
            except TypeError:  # PyTorch 2.0's keywords
                mem._record_memory_history(True, trace_alloc_max_entries=n,
                                           trace_alloc_record_context=context is not None)
        torch._C._cuda_attach_out_of_memory_observer(lambda *a: _observe(torch, *a))
    except Exception as e:  # noqa: BLE001 - PyTorch's own failure: the program goes on
        _warn(f"torch {torch.__version__}: {type(e).__name__}: {e}: PyTorch's allocator state is not recorded")
        return
    global _torch
    _torch = torch
    _watch("torch")


def before_dump() -> None:
    """Called by gpumemtrace.dump() before it asks for its snapshot: the
    state of PyTorch's allocator (its tensors and history) for that
    snapshot. One torch.cuda.memory._snapshot() a dump."""
    if _torch is not None:
        _hand_over(_torch, "api", None)


def _watch(name: str) -> None:
    """Tells the tracer that this framework's out-of-memory errors are
    handed over from now on, so that an episode it does not report — its
    allocator freed its cache and the retry succeeded — is told as
    recovered, in one line."""
    try:
        _package().framework(json.dumps({"name": name, "reason": "watch"}))
    except Exception as e:  # noqa: BLE001 - never the program's failure
        _warn(f"{name}: the tracer was not told of its observer ({type(e).__name__}: {e})")


def _observe(torch: Any, device: int, alloc: int, limit: int, device_free: int) -> None:
    # PyTorch calls its out-of-memory observers with the device, the size it
    # asked of the driver, the most it may hold there (the allowed maximum
    # under a per-process memory fraction, else the device's total; its
    # binding names it device_allocated) and the device's free bytes.
    _hand_over(torch, "oom", {"device": int(device), "requested_bytes": int(alloc),
                              "device_limit_bytes": int(limit),
                              "device_free_bytes": int(device_free)})


def _at_exit(torch: Any) -> None:
    if getattr(torch.cuda, "is_initialized", lambda: True)() and _backend(torch) == "native":
        _hand_over(torch, "exit", None)


def _hand_over(torch: Any, reason: str, oom: Optional[Dict[str, int]]) -> None:
    global _count, _ooms
    try:
        # The counts around the snapshot place the program's empty_cache()
        # calls in its history; asked only where there were calls.
        with _lock:
            counted = any(_cache_calls.values())
        before = _counts_or_none(torch) if counted else {}
        snap = torch.cuda.memory._snapshot()
        calls = _cache_calls_behind(torch, before)
        with _lock:
            _count += 1
            n = _count
            _ooms += reason == "oom"
            pickled = reason != "oom" or _ooms <= _OOM_PICKLES
        path = _save(snap, n) if pickled else None
        state = state_of(snap, reason, oom, path, str(getattr(torch, "__version__", "")), calls)
        # The most its tensors have held on each device: max_memory_allocated().
        peak = getattr(torch.cuda, "max_memory_allocated", None)
        for d in state["devices"] if peak is not None else []:
            d["peak_allocated_bytes"] = int(peak(d["device"]))
        if reason != "oom":
            _device_bytes(torch, state["devices"])
        elif oom is not None:
            _fraction_limit(torch, state["devices"], oom)
        _package().framework(json.dumps(state))
    except Exception as e:  # noqa: BLE001 - never the program's failure
        _warn(f"PyTorch's allocator state could not be handed over ({type(e).__name__}: {e})")


def _fraction_limit(torch: Any, devices: List[Dict[str, Any]], oom: Dict[str, int]) -> None:
    """Under a per-process memory fraction (set_per_process_memory_fraction)
    PyTorch's allocator refuses a segment that would take its reserved bytes
    past the allowed maximum, without asking the driver: that maximum, which
    its observer is told (the device's total without a fraction), is its own
    limit on the device (limit_bytes, as CuPy's and JAX's)."""
    info = getattr(torch.cuda, "mem_get_info", None)
    if info is None:
        return
    if oom["device_limit_bytes"] < int(info(oom["device"])[1]):
        for d in devices:
            if d["device"] == oom["device"]:
                d["limit_bytes"] = oom["device_limit_bytes"]


def _device_bytes(torch: Any, devices: List[Dict[str, int]]) -> None:
    """Each device's free and total bytes as the driver tells PyTorch at
    the hand-over (mem_get_info): at exit the tracer can no longer ask the
    driver itself, and the replay needs what PyTorch could have held
    (docs/whatif.md). An out-of-memory's are its observer's. Where PyTorch
    says its per-process memory fraction (get_per_process_memory_fraction,
    recent versions) and it is below 1, its allowed bytes, as PyTorch
    computes them, are the device's limit, as _fraction_limit's."""
    info = getattr(torch.cuda, "mem_get_info", None)
    fraction = getattr(torch.cuda, "get_per_process_memory_fraction", None)
    if info is None:
        return
    for d in devices:
        try:
            free, total = info(d["device"])
        except Exception:  # noqa: BLE001 - not told: the snapshot says nothing of it
            continue
        d["device_free_bytes"], d["device_total_bytes"] = int(free), int(total)
        try:
            f = float(fraction(d["device"])) if fraction is not None else 1.0
        except Exception:  # noqa: BLE001 - not told: no limit said
            continue
        if f < 1.0:
            d["limit_bytes"] = int(f * int(total))


def _save(snap: Any, n: int) -> Optional[str]:
    """PyTorch's snapshot as its own tools read it, beside the tracer's;
    its path, or None when it cannot be written (the state still goes).
    Written as the tracer writes snapshots: a temporary file created anew
    (never an existing file or a symlink), mode 0600, then linked to the
    first free gpumemtrace.<pid>.torch.<n>.pickle — never replacing a file
    or following a symlink there — in a directory opened once."""
    d = os.environ.get("GPUMEMTRACE_DIR") or "."
    name = f"gpumemtrace.{os.getpid()}.torch.{n}.pickle"
    try:
        dirfd = os.open(d, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as e:
        _warn(f"cannot write {os.path.join(d, name)}: {e.strerror}")
        return None
    tmp = None
    try:
        tmp, fd = _private_temp(dirfd, name)
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), 0o600)
            pickle.dump(snap, f)
        for k in range(n, n + 64):
            name = f"gpumemtrace.{os.getpid()}.torch.{k}.pickle"
            try:
                os.link(tmp, name, src_dir_fd=dirfd, dst_dir_fd=dirfd, follow_symlinks=False)
                return os.path.abspath(os.path.join(d, name))
            except FileExistsError:
                continue
        raise FileExistsError(errno.EEXIST, "every name taken")
    except OSError as e:
        _warn(f"cannot write {os.path.join(d, name)}: {e.strerror}")
        return None
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp, dir_fd=dirfd)
            except OSError:
                pass
        os.close(dirfd)


def _private_temp(dirfd: int, name: str) -> Tuple[str, int]:
    """A new file .<name>.<random>.tmp in dirfd, mode 0600, opened for
    writing: never an existing file, never through a symlink (O_EXCL); the
    tracer sweeps those of dead writers."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    for _ in range(16):
        tmp = f".{name}.{secrets.token_hex(4)}.tmp"
        try:
            return tmp, os.open(tmp, flags, 0o600, dir_fd=dirfd)
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free temporary name")


def state_of(snap: Dict[str, Any], reason: str, oom: Optional[Dict[str, int]], path: Optional[str],
             version: str, cache_calls: Optional[Dict[int, List[_Counts]]] = None) -> Dict[str, Any]:
    """The state the tracer takes (docs/snapshot-format.md, "framework") from
    a torch.cuda.memory._snapshot(): per device the bytes PyTorch's counters
    name — allocated (its active blocks, memory_allocated()), reserved (its
    segments, memory_reserved()), reserved but unallocated, the largest free
    block — and each segment with its blocks."""
    devices: Dict[int, Dict[str, int]] = {}
    segments: List[Dict[str, Any]] = []
    blocks_left = MAX_BLOCKS
    truncated = False
    for s in snap.get("segments", []):
        dev = int(s.get("device", 0))
        d = devices.setdefault(dev, {"device": dev, "allocated_bytes": 0, "reserved_bytes": 0,
                                     "requested_bytes": 0, "reserved_unallocated_bytes": 0,
                                     "largest_free_block_bytes": 0, "segments": 0, "blocks": 0})
        d["reserved_bytes"] += int(s["total_size"])
        d["segments"] += 1
        out: List[Dict[str, Any]] = []
        at = int(s["address"])
        for b in s.get("blocks", []):
            size = int(b["size"])
            addr = int(b.get("address", at))
            at = addr + size
            d["blocks"] += 1
            if b["state"] == "active_allocated":
                d["allocated_bytes"] += size
                d["requested_bytes"] += int(b.get("requested_size", size))
            elif b["state"] == "inactive":
                d["largest_free_block_bytes"] = max(d["largest_free_block_bytes"], size)
            if blocks_left == 0:
                truncated = True
                continue
            blocks_left -= 1
            out.append({"address": addr, "size": size, "requested_size": int(b.get("requested_size", size)),
                        "state": str(b["state"]),
                        "frames": frames_of(b.get("frames"))})
        segments.append({"device": dev, "address": int(s["address"]), "total_size": int(s["total_size"]),
                         "stream": int(s.get("stream", 0) or 0), "segment_type": str(s.get("segment_type", "")),
                         "is_expandable": bool(s.get("is_expandable", False)), "blocks": out})
    # Steps the bootstrap marked, unless the program marks its own.
    api = sys.modules.get("gpumemtrace")
    own = getattr(api, "_own_steps", False)
    for d in devices.values():
        # never below 0: the tracer refuses a state out of the schema's range
        d["reserved_unallocated_bytes"] = max(0, d["reserved_bytes"] - d["allocated_bytes"])
        if _steps and not own and d["device"] in _step_allocated:
            d["step_allocated_bytes"] = _step_allocated[d["device"]]
    traces, stacks = trace_of(snap, _history_entries(), cache_calls or {})
    conf, conf_from = alloc_conf_of(snap)
    return {"name": "torch", "version": version, "reason": reason, "file": path, "oom": oom,
            "devices": [devices[k] for k in sorted(devices)], "segments": segments, "truncated": truncated,
            "alloc_conf": conf, "alloc_conf_from": conf_from,
            "traces": traces, "trace_stacks": stacks,
            "steps": [[n, t] for n, t in getattr(api, "_steps_marked", ())]}


def alloc_conf_of(snap: Dict[str, Any]) -> Tuple[Optional[str], Optional[str]]:
    """The allocator's settings of the run, as a PYTORCH_CUDA_ALLOC_CONF
    string, and where they were read: what PyTorch's snapshot says it last
    applied (its allocator_settings, PyTorch 2.4 and later: the environment's
    string, or the last _set_allocator_settings()), else the environment's
    now (PYTORCH_CUDA_ALLOC_CONF, else PYTORCH_ALLOC_CONF); (None, None)
    when neither says."""
    settings = snap.get("allocator_settings")
    if isinstance(settings, dict) and isinstance(settings.get("PYTORCH_CUDA_ALLOC_CONF"), str):
        return settings["PYTORCH_CUDA_ALLOC_CONF"], "pytorch"
    for name in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"):
        if name in os.environ:
            return os.environ[name], "environment"
    return None, None


def frames_of(frames: Any) -> List[Dict[str, Any]]:
    """PyTorch's frames as handed over: the MAX_FRAMES innermost, each
    {name, filename, line}."""
    return [{"name": str(f.get("name", "")), "filename": str(f.get("filename", "")), "line": int(f.get("line", 0) or 0)}
            for f in (frames or [])[:MAX_FRAMES]]


# The history's events handed over: the tensors' own (the tensor level),
# and the segments' and failures' (the replay of docs/whatif.md).
_TRACE_ACTIONS = ("alloc", "free_requested", "free_completed", "segment_alloc", "segment_free", "segment_map",
                  "segment_unmap", "oom")


def trace_of(snap: Dict[str, Any], max_entries: int, cache_calls: Optional[Dict[int, List[_Counts]]] = None
             ) -> Tuple[List[Dict[str, Any]], List[List[Dict[str, Any]]]]:
    """PyTorch's allocator history as the tracer replays it (the tensor
    level, docs/guide.md "Two levels"; the segments' replay, docs/whatif.md):
    per device its events of _TRACE_ACTIONS, oldest first, each [action,
    address, size, time_us or None, stack, stream] — the size asked for a
    tensor, the segment's or the range's for a segment event, the rounded
    request for an oom, whose address is the device's free bytes as PyTorch
    records it; the stack an index into the second list (the allocating
    Python frames, innermost first, each distinct chain once; -1 for any
    other event) — whether the history still holds its first entry (it
    keeps at most max_entries), and where the program called
    torch.cuda.empty_cache() (place_cache_calls of cache_calls, the counts
    each call came before; "empty_cache", absent where none was placed)."""
    index: Dict[Tuple[Tuple[str, str, int], ...], int] = {}
    stacks: List[List[Dict[str, Any]]] = []
    traces: List[Dict[str, Any]] = []
    for dev, entries in enumerate(snap.get("device_traces") or []):
        events: List[List[Any]] = []
        for e in entries:
            action = e.get("action")
            if action not in _TRACE_ACTIONS:
                continue
            stack = -1
            if action == "alloc":
                frames = frames_of(e.get("frames"))
                key = tuple((f["name"], f["filename"], f["line"]) for f in frames)
                stack = index.get(key, -1)
                if stack < 0:
                    stack = index[key] = len(stacks)
                    stacks.append(frames)
            t = e.get("time_us")
            # PyTorch names an oom entry's address field (the device's free
            # bytes) device_free; it has no addr.
            where = e["device_free" if action == "oom" else "addr"]
            events.append([action, int(where), int(e.get("size", 0)), int(t) if t is not None else None, stack,
                           int(e.get("stream", 0) or 0)])
        trace = {"device": dev, "complete": len(entries) < max_entries, "events": events}
        places = place_cache_calls(events, (cache_calls or {}).get(dev, []))
        if places:
            trace["empty_cache"] = places
        traces.append(trace)
    return traces, stacks


def _wrap_error(name: str, module: Any, error: Any, error_name: str, what: str,
                on_error: Callable[..., None], at_exit: Callable[[], None]) -> None:
    """Wraps the constructor of a framework's error class (it has no
    out-of-memory observer) so that on_error(args, kwargs) runs as each such
    error is made, before any handler of the program; tells the tracer the
    framework watches, and registers at_exit when exit snapshots are on. One
    warning when the class is missing or cannot take the wrapper."""
    version = getattr(module, "__version__", "?")
    init = getattr(error, "__init__", None)
    if error is None or init is None:
        _warn(f"{name} {version} has no {error_name}: {what} is not recorded")
        return

    def observed(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        on_error(args, kwargs)

    try:
        error.__init__ = observed
    except (AttributeError, TypeError) as e:
        _warn(f"{name} {version}: its {error_name} cannot be observed ({type(e).__name__}: {e}): "
              f"{what} is not recorded")
        return
    _watch(name)
    if _exit_wanted():
        atexit.register(at_exit)


def on_import_cupy(cupy: Any) -> None:
    """Called by the bootstrap once `cupy` is imported."""
    if not enabled():
        return

    def on_error(args: Any, kwargs: Any) -> None:
        # OutOfMemoryError(size, total, limit): the request, the pool's bytes.
        _hand_over_cupy(cupy, "oom", args[0] if args else kwargs.get("size"))

    error = getattr(getattr(getattr(cupy, "cuda", None), "memory", None), "OutOfMemoryError", None)
    _wrap_error("cupy", cupy, error, "cuda.memory.OutOfMemoryError", "its pool's state", on_error,
                lambda: _hand_over_cupy(cupy, "exit", None))


def _cupy_pool(cupy: Any) -> Any:
    """The pool the program allocates from: the owner of the current
    allocator (the default pool's malloc unless the program set another —
    a MemoryAsyncPool's counts as well), or None for an allocator that is
    no pool's."""
    get = getattr(cupy.cuda, "get_allocator", None)
    pool = getattr(get(), "__self__", None) if get is not None else cupy.get_default_memory_pool()
    if all(hasattr(pool, n) for n in ("used_bytes", "total_bytes", "free_bytes")):
        return pool
    return None


def _bytes_or_none(value: Any) -> Optional[int]:
    """A byte count as the tracer takes it (0 to 2^63 - 1), or None: a
    size_t a framework computed by subtraction may have wrapped (CuPy's
    MemoryAsyncPool.free_bytes() is total less used, read apart)."""
    n = int(value)
    return n if 0 <= n < 1 << 63 else None


def cupy_state(cupy: Any, reason: str, requested: Optional[int]) -> Dict[str, Any]:
    """The state the tracer takes (docs/snapshot-format.md, "framework") from
    a CuPy pool on the current device: allocated = used_bytes(), reserved =
    total_bytes(), reserved but unallocated = free_bytes(). A program that
    allocates from no pool hands over the request alone (no devices), so that
    the tracer still knows the program was told of the out-of-memory."""
    pool = _cupy_pool(cupy)
    dev = int(cupy.cuda.runtime.getDevice())
    devices = []
    used = _bytes_or_none(pool.used_bytes()) if pool is not None else None
    total = _bytes_or_none(pool.total_bytes()) if pool is not None else None
    if used is not None and total is not None:
        free = _bytes_or_none(pool.free_bytes())
        d = {"device": dev, "allocated_bytes": used, "reserved_bytes": total,
             "reserved_unallocated_bytes": free if free is not None else max(total - used, 0),
             "largest_free_block_bytes": None}
        # NOTE: a MemoryAsyncPool's "limit" is the CUDA pool's release
        # threshold (what it keeps cached), which refuses nothing.
        limit = getattr(pool, "get_limit", None)
        enforced = limit is not None and type(pool).__name__ != "MemoryAsyncPool"
        d["limit_bytes"] = (_bytes_or_none(limit()) or None) if enforced else None
        devices.append(d)
    oom = None
    if reason == "oom" and requested is not None:
        oom = {"device": dev, "requested_bytes": int(requested)}
        if devices:
            oom["device_allocated_bytes"] = devices[0]["allocated_bytes"]
    return {"name": "cupy", "version": str(getattr(cupy, "__version__", "")), "reason": reason, "file": None,
            "oom": oom, "devices": devices, "segments": [], "truncated": False}


def _hand_over_state(what: str, reason: str, state_of_now: Callable[[], Dict[str, Any]]) -> None:
    """Hands over a state made now (none at exit when it has no devices);
    a failure is one warning naming `what`, never the program's."""
    try:
        state = state_of_now()
        if reason == "exit" and not state["devices"]:
            return
        _package().framework(json.dumps(state))
    except Exception as e:  # noqa: BLE001 - never the program's failure
        _warn(f"{what} could not be handed over ({type(e).__name__}: {e})")


def _hand_over_cupy(cupy: Any, reason: str, requested: Optional[int]) -> None:
    _hand_over_state("CuPy's pool state", reason, lambda: cupy_state(cupy, reason, requested))


# JAX's out-of-memory: "RESOURCE_EXHAUSTED: Out of memory while trying to
# allocate 1.00GiB with allocator GPU_0_bfc on device 0", or "... allocate
# 33762398024 bytes." (the sizes as XLA writes them: bytes, or three
# significant digits of a binary unit).
_JAX_OOM = re.compile(r"allocate\D{0,24}?(\d+(?:\.\d+)?)\s*(bytes|B|KiB|MiB|GiB|TiB|PiB)\b")
_JAX_DEVICE = re.compile(r"on device (?:ordinal )?(\d+)|GPU_(\d+)_bfc")
_UNITS = {"bytes": 0, "B": 0, "KiB": 10, "MiB": 20, "GiB": 30, "TiB": 40, "PiB": 50}


def jax_oom(message: str) -> Optional[Dict[str, Optional[int]]]:
    """The request and device a JAX error names, when it is an
    out-of-memory; None for any other error. The device is None when the
    message names none."""
    if "RESOURCE_EXHAUSTED" not in message or "ut of memory" not in message:
        return None
    m = _JAX_OOM.search(message)
    if m is None:
        return None
    requested = int(float(m.group(1)) * (1 << _UNITS[m.group(2)]))
    d = _JAX_DEVICE.search(message)
    device = int(d.group(1) or d.group(2)) if d is not None else None
    return {"device": device, "requested_bytes": requested}


def on_import_jax(jax: Any) -> None:
    """Called by the bootstrap once `jax` is imported."""
    if not enabled():
        return

    def on_error(args: Any, kwargs: Any) -> None:
        oom = jax_oom(str(args[0])) if args else None
        if oom is not None:
            _hand_over_jax(jax, "oom", oom)

    errors = getattr(jax, "errors", None)
    error = getattr(errors, "JaxRuntimeError", None) or getattr(errors, "XlaRuntimeError", None)
    _wrap_error("jax", jax, error, "errors.JaxRuntimeError", "its allocator's state", on_error,
                lambda: _hand_over_jax(jax, "exit", None))


def _jax_gpus(jax: Any) -> List[Any]:
    """JAX's local GPU devices (CUDA's ordinals: local_hardware_id), or none
    when JAX runs on another platform."""
    try:
        return [d for d in jax.local_devices() if getattr(d, "platform", "") in ("gpu", "cuda")]
    except Exception:  # noqa: BLE001 - no backend: nothing to say
        return []


def _ordinal(device: Any) -> int:
    hw = getattr(device, "local_hardware_id", None)
    return int(hw if hw is not None else device.id)


def jax_state(jax: Any, reason: str, oom: Optional[Dict[str, Optional[int]]]) -> Dict[str, Any]:
    """The state the tracer takes (docs/snapshot-format.md, "framework") from
    each local GPU device's memory_stats(): allocated = bytes_in_use,
    reserved = pool_bytes (what its allocator took from the driver),
    reserved but unallocated = their difference, largest_free_block_bytes,
    limit = bytes_limit, peak = peak_bytes_in_use."""
    devices = []
    for dev in _jax_gpus(jax):
        st = dev.memory_stats() or {}
        if "bytes_in_use" not in st:
            continue
        used = int(st["bytes_in_use"])
        pool = int(st.get("pool_bytes") or st.get("bytes_reserved") or used)
        largest = st.get("largest_free_block_bytes")
        limit = st.get("bytes_limit")
        d = {"device": _ordinal(dev), "allocated_bytes": used, "reserved_bytes": pool,
             "reserved_unallocated_bytes": max(0, pool - used),
             "largest_free_block_bytes": int(largest) if largest is not None else None,
             "limit_bytes": int(limit) if limit else None}
        if st.get("peak_bytes_in_use") is not None:
            d["peak_allocated_bytes"] = int(st["peak_bytes_in_use"])
        devices.append(d)
    devices.sort(key=lambda d: d["device"])
    if oom is not None:
        oom = dict(oom)
        if oom.get("device") is None:
            oom["device"] = devices[0]["device"] if devices else 0
        mine = [d for d in devices if d["device"] == oom["device"]]
        if mine:
            oom["device_allocated_bytes"] = mine[0]["allocated_bytes"]
    return {"name": "jax", "version": str(getattr(jax, "__version__", "")), "reason": reason, "file": None,
            "oom": oom, "devices": devices, "segments": [], "truncated": False}


def _hand_over_jax(jax: Any, reason: str, oom: Optional[Dict[str, Optional[int]]]) -> None:
    _hand_over_state("JAX's allocator state", reason, lambda: jax_state(jax, reason, oom))


# numba.cuda (Debian's python3-numba 0.56): no out-of-memory observer and no
# error of its own — CudaAPIError carries the driver's code. Its memory
# manager allocates through _attempt_allocation(allocator): at
# CUDA_ERROR_OUT_OF_MEMORY it flushes its pending deallocations (frees it
# deferred, _PendingDeallocs.clear) and calls the allocator once more, inside
# its handler of that first error; a second failure reaches the program.
_NUMBA_OOM = 2  # CUDA_ERROR_OUT_OF_MEMORY
# The memory manager that flushed last, for the exit hand-over.
_numba_manager: Any = None
# Per thread: the latest first failure — id() of its error (exceptions take
# no weak reference; the error lives while numba handles it), the pending
# frees then, and what the flush in its handler gave back.
_numba_failure = threading.local()


def on_import_numba(driver: Any) -> None:
    """Called by the bootstrap once `numba.cuda.cudadrv.driver` is imported.
    Nothing of the tracer's stands in the allocation's path (its frames
    would show in the program's tracebacks): it wraps the constructor of
    CudaAPIError and the flush of the pending deallocations. An
    out-of-memory error made while numba handles an earlier one of its own
    thread is its retry's failure, which reaches the program: the memory
    manager's state is handed over then, before any handler of the program
    runs. A failure it recovered from (the flushed retry succeeded) hands
    nothing over: the tracer tells it as recovered, in one line."""
    if not enabled():
        return
    version = str(getattr(sys.modules.get("numba"), "__version__", "?"))
    error = getattr(driver, "CudaAPIError", None)
    pending = getattr(driver, "_PendingDeallocs", None)
    clear = getattr(pending, "clear", None)
    if error is None or clear is None:
        _warn(f"numba {version} has no CudaAPIError or _PendingDeallocs.clear: "
              "its out-of-memory state is not recorded")
        return

    def on_error(err: Any, args: Any, kwargs: Any) -> None:
        code = args[0] if args else kwargs.get("code")
        if code != _NUMBA_OOM:
            return
        f = _numba_failure
        handling = sys.exc_info()[1]
        if handling is not None and id(handling) == getattr(f, "error", None) and f.manager is not None:
            manager, at_failure, flushed = f.manager, f.pending, getattr(f, "flushed", None)
            f.error = None
            _hand_over_state("numba's memory manager state", "oom",
                             lambda: numba_state(manager, "oom", at_failure, flushed))
            return
        # A first failure: numba's manager flushes and retries. The manager
        # is found when it flushes; the pending frees are read now.
        f.error, f.manager, f.flushed = id(err), None, None
        f.pending = None

    def observed_init(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        try:
            on_error(self, args, kwargs)
        except Exception as e:  # noqa: BLE001 - never the program's failure
            _warn(f"numba's out-of-memory could not be observed ({type(e).__name__}: {e})")

    def observed_clear(self: Any) -> None:
        global _numba_manager
        f = _numba_failure
        handling = sys.exc_info()[1]
        ours = handling is not None and id(handling) == getattr(f, "error", None)
        before = (len(self), max(0, int(getattr(self, "_size", 0)))) if ours else None
        clear(self)
        if before is not None:
            after = (len(self), max(0, int(getattr(self, "_size", 0))))
            f.pending = before
            f.flushed = (max(0, before[0] - after[0]), max(0, before[1] - after[1]))
            f.manager = _numba_manager = _manager_of(self)

    init = error.__init__
    try:
        error.__init__ = observed_init
        pending.clear = observed_clear
    except (AttributeError, TypeError) as e:
        error.__init__ = init
        _warn(f"numba {version}: its memory manager cannot be observed ({type(e).__name__}: {e}): "
              "its out-of-memory state is not recorded")
        return
    _watch("numba")
    if _exit_wanted():
        atexit.register(_numba_exit)


def _manager_of(pending: Any) -> Any:
    """The memory manager whose pending deallocations these are: the one
    whose flush runs in the caller's caller (numba's _attempt_allocation)."""
    frame = sys._getframe(2)
    manager = frame.f_locals.get("self") if frame is not None else None
    return manager if getattr(manager, "deallocations", None) is pending else None


def _numba_exit() -> None:
    manager = _numba_manager
    if manager is not None:
        _hand_over_state("numba's memory manager state", "exit", lambda: numba_state(manager, "exit", None, None))


def _numba_pending(manager: Any) -> Tuple[int, int]:
    """The manager's pending deallocations now: how many, and their bytes as
    numba counts them (frees of unknown size count 0)."""
    pending = manager.deallocations
    return len(pending), max(0, int(getattr(pending, "_size", 0)))


# numba's objects of device memory in its allocations (cuMemAlloc's); pinned,
# mapped and managed memory are other classes.
_NUMBA_DEVICE = ("AutoFreePointer", "MemoryPointer")


def numba_state(manager: Any, reason: str, pending_at_failure: Optional[Tuple[int, int]],
                flushed: Optional[Tuple[int, int]]) -> Dict[str, Any]:
    """The state the tracer takes (docs/snapshot-format.md, "framework") from
    numba's memory manager: allocated = reserved = the device memory of its
    live allocations (it keeps no pool), and at an out-of-memory its pending
    deallocations when the allocation first failed and how many of them it
    flushed before its retry (all, unless the program deferred cleanup)."""
    dev = int(manager.context.device.id)
    live = sum(int(getattr(m, "size", 0) or 0) for m in list(manager.allocations.values())
               if type(m).__name__ in _NUMBA_DEVICE)
    state: Dict[str, Any] = {
        "name": "numba", "version": str(getattr(sys.modules.get("numba"), "__version__", "")), "reason": reason,
        "file": None, "oom": {"device": dev} if reason == "oom" else None,
        "devices": [{"device": dev, "allocated_bytes": live, "reserved_bytes": live,
                     "reserved_unallocated_bytes": 0, "largest_free_block_bytes": None}],
        "segments": [], "truncated": False}
    count, nbytes = pending_at_failure if pending_at_failure is not None else _numba_pending(manager)
    gone = flushed if flushed is not None else (0, 0)
    state["pending_frees"] = {"count": count, "bytes": nbytes, "flushed_count": gone[0], "flushed_bytes": gone[1]}
    return state
