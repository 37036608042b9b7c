"""torch.cuda.memory of the test double: the allocator history and its
snapshot (torch/__init__.py)."""

from . import _allocator


def _record_memory_history(enabled="all", context="all", stacks="all", max_entries=9223372036854775807,
                           device=None, clear_history=False):
    _allocator().history = None if enabled is None else int(max_entries)


def _snapshot(device=None):
    return _allocator().snapshot()
