"""torch.cuda.memory of the test double: the allocator history and its
snapshot (torch/__init__.py)."""

from . import _allocator, get_allocator_backend


def _record_memory_history(enabled="all", context="all", stacks="all", max_entries=9223372036854775807,
                           device=None, clear_history=False):
    if get_allocator_backend() != "native":
        raise RuntimeError("cudaMallocAsync does not yet support recordHistory. If you need it, please file an "
                           "issue describing your use case.")
    _allocator().history = None if enabled is None else int(max_entries)


def _snapshot(device=None):
    return _allocator().snapshot()
