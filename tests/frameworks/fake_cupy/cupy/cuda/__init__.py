"""cupy.cuda of the test double (cupy/__init__.py says what it models)."""

from . import memory  # noqa: F401
from . import runtime  # noqa: F401
from .memory import MemoryAsyncPool  # noqa: F401

_allocator = None


def set_allocator(fn=None):
    global _allocator
    _allocator = fn


def get_allocator():
    return _allocator
