"""torch._C of the test double: the out-of-memory observers."""

_observers = []


def _cuda_attach_out_of_memory_observer(fn):
    _observers.append(fn)
