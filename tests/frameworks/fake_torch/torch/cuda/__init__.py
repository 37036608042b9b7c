"""torch.cuda of the test double: lazy initialisation, the toy caching
allocator and its counters (torch/__init__.py says what it models)."""

import os
import threading
import traceback

from gmt_sim_driver import Driver

from .. import _C

MIB = 1 << 20
SEGMENT = 2 * MIB           # segments are multiples of it
SMALL = 1 * MIB             # requests up to it come from 2 MiB small segments
ROUND = 512

_initialized = False
_queued = []
_lock = threading.RLock()
_state = None


class OutOfMemoryError(RuntimeError):
    pass


def is_initialized():
    return _initialized


def get_allocator_backend():
    """FAKE_TORCH_BACKEND, as PYTORCH_CUDA_ALLOC_CONF=backend:... sets it."""
    return os.environ.get("FAKE_TORCH_BACKEND", "native")


def _lazy_call(fn, **kwargs):
    if _initialized:
        fn()
    else:
        _queued.append(fn)


def init():
    global _initialized, _state
    with _lock:
        if _initialized:
            return
        _state = _Allocator()
        _initialized = True
        for fn in _queued:
            fn()
        _queued.clear()


def _allocator():
    init()
    return _state


def current_device():
    return 0


def memory_allocated(device=0):
    return _allocator().allocated()


def memory_reserved(device=0):
    return _allocator().reserved()


def empty_cache():
    _allocator().release_cached()


class _Block:
    __slots__ = ("address", "size", "requested", "active", "frames")

    def __init__(self, address, size):
        self.address, self.size, self.requested, self.active, self.frames = address, size, 0, False, []


class _Segment:
    def __init__(self, address, size, small):
        self.address, self.size, self.small = address, size, small
        self.blocks = [_Block(address, size)]

    def idle(self):
        return not any(b.active for b in self.blocks)


class Tensor:
    def __init__(self, alloc, block):
        self._alloc, self._block = alloc, block

    def data_ptr(self):
        return self._block.address

    def nbytes(self):
        return self._block.requested

    def __del__(self):
        try:
            self._alloc.free(self._block)
        except Exception:  # noqa: BLE001 - at interpreter exit the driver may be gone
            pass


class _Allocator:
    def __init__(self):
        self.driver = Driver()
        self.segments = []
        self.history = None   # max entries when recording
        self.trace = []

    # -- the counters PyTorch names ----------------------------------------
    def allocated(self):
        return sum(b.size for s in self.segments for b in s.blocks if b.active)

    def reserved(self):
        return sum(s.size for s in self.segments)

    def cached_free(self):
        """Bytes in inactive blocks: reserved but unallocated."""
        return sum(b.size for s in self.segments for b in s.blocks if not b.active)

    # -- allocation ----------------------------------------------------------
    def tensor(self, nbytes):
        with _lock:
            return Tensor(self, self.malloc(nbytes))

    def _fit(self, size, small):
        best = None
        for s in self.segments:
            if s.small != small:
                continue
            for b in s.blocks:
                if not b.active and b.size >= size and (best is None or b.size < best[1].size):
                    best = (s, b)
        return best

    def malloc(self, nbytes):
        size = max(ROUND, (nbytes + ROUND - 1) // ROUND * ROUND)
        small = size <= SMALL
        found = self._fit(size, small)
        if found is None:
            seg_size = SEGMENT if small else (size + SEGMENT - 1) // SEGMENT * SEGMENT
            addr = self.driver.malloc(seg_size)
            if addr is None:
                # PyTorch's way: release the cache, ask again, then give up.
                self.release_cached()
                addr = self.driver.malloc(seg_size)
            if addr is None:
                free, _ = self.driver.mem_info()
                self._record("oom", 0, seg_size, device_free=free)
                for obs in list(_C._observers):
                    obs(0, seg_size, self.reserved(), free)
                raise OutOfMemoryError(f"CUDA out of memory. Tried to allocate {seg_size} bytes")
            seg = _Segment(addr, seg_size, small)
            self.segments.append(seg)
            self._record("segment_alloc", addr, seg_size)
            found = (seg, seg.blocks[0])
        seg, block = found
        if block.size > size:  # split: the rest stays free after it
            rest = _Block(block.address + size, block.size - size)
            seg.blocks.insert(seg.blocks.index(block) + 1, rest)
            block.size = size
        block.active, block.requested = True, nbytes
        block.frames = self._frames() if self.history is not None else []
        self._record("alloc", block.address, block.size)
        return block

    def free(self, block):
        with _lock:
            block.active, block.requested, block.frames = False, 0, []
            self._record("free_completed", block.address, block.size)
            for seg in self.segments:
                if block in seg.blocks:
                    merged = []
                    for b in seg.blocks:
                        if merged and not b.active and not merged[-1].active:
                            merged[-1].size += b.size
                        else:
                            merged.append(b)
                    seg.blocks = merged
                    break

    def release_cached(self):
        for seg in [s for s in self.segments if s.idle()]:
            self.driver.free(seg.address)
            self.segments.remove(seg)
            self._record("segment_free", seg.address, seg.size)

    # -- history -------------------------------------------------------------
    def _frames(self):
        out = []
        for f in reversed(traceback.extract_stack()[:-4]):
            out.append({"name": f.name, "filename": f.filename, "line": f.lineno})
        return out

    def _record(self, action, addr, size, device_free=None):
        if self.history is None:
            return
        e = {"action": action, "addr": addr, "size": size, "stream": 0, "frames": self._frames()}
        if device_free is not None:
            e["device_free"] = device_free
        self.trace.append(e)
        del self.trace[:-self.history]

    def snapshot(self):
        segs = []
        for s in self.segments:
            blocks = [{"address": b.address, "size": b.size, "requested_size": b.requested if b.active else 0,
                       "state": "active_allocated" if b.active else "inactive", "frames": list(b.frames)}
                      for b in s.blocks]
            active = sum(b.size for b in s.blocks if b.active)
            segs.append({"device": 0, "address": s.address, "total_size": s.size, "allocated_size": active,
                         "active_size": active, "requested_size": sum(b.requested for b in s.blocks),
                         "stream": 0, "segment_type": "small" if s.small else "large",
                         "segment_pool_id": "(0, 0)", "is_expandable": False, "frames": [], "blocks": blocks})
        return {"segments": segs, "device_traces": [list(self.trace)], "allocator_settings": {}}


from . import memory  # noqa: E402,F401 - last: it imports _allocator from here
