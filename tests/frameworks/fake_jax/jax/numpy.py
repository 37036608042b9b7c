"""jax.numpy of the test double: arrays of bytes on device 0."""

from ._bfc import allocator


class Array:
    def __init__(self, chunk):
        self._chunk = chunk

    @property
    def nbytes(self):
        return self._chunk.size


def empty(nbytes, dtype=None):
    return Array(allocator().allocate(int(nbytes)))
