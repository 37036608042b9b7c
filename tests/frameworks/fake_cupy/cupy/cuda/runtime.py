"""cupy.cuda.runtime of the test double: device 0 only."""


def getDevice():
    return 0


def memGetInfo():
    from .memory import _driver
    return _driver().mem_info()
