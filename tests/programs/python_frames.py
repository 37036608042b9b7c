"""Test program for Python frames: allocations whose Python call chains are
known. Each allocation has a size of its own, so that a checker can find its
stack in a snapshot:

- 3 MiB + 1 through ctypes.PyDLL, which keeps the GIL during the call: the
  stack must show allocate -> build_workspace -> main -> <module>, at the lines
  printed as ALLOC_LINE, BUILD_LINE, MAIN_LINE and MODULE_LINE;
- 3 MiB + 2 through ctypes.CDLL, which releases the GIL during the call: the
  thread does not hold the GIL in the hook, and its frames are read from
  memory: allocate -> main -> <module>, at NOGIL_LINE, MAIN_NOGIL_LINE and
  MODULE_LINE;
- 3 MiB + 3 through PyDLL on a second Python thread: its chain is
  allocate -> worker -> Thread.run ..., with WORKER_LINE for worker;
- 3 MiB + 4 through CDLL inside a subinterpreter: from 3.12, where a thread
  state becomes the thread's own when it is attached, the subinterpreter's
  frames allocate -> sub_main -> <module> (SUB_ALLOC_LINE, SUB_MAIN_LINE);
  before, the thread's own state stays its main interpreter's: the call that
  entered the subinterpreter, in_subinterpreter -> main -> <module>
  (ENTER_LINE, MAIN_SUB_LINE, MODULE_LINE).

Prints the PID/LIVE report of the other test programs (run_program.py)."""

import ctypes
import os
import sys
import threading

from cudactx import CudaError, check, make_current

MIB = 1024 * 1024


def load(loader: type) -> ctypes.CDLL:
    lib = loader("libcuda.so.1", mode=os.RTLD_LOCAL)
    lib.cuMemAlloc_v2.restype = ctypes.c_int
    lib.cuMemAlloc_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
    return lib


LINES = {}


def here(name: str) -> None:
    """Records the caller's line under `name` (printed for the checker)."""
    LINES[name] = sys._getframe(1).f_lineno


def allocate(lib: ctypes.CDLL, size: int, name: str) -> int:
    ptr = ctypes.c_uint64(0)
    result = lib.cuMemAlloc_v2(ctypes.byref(ptr), size); here(name)  # noqa: E702 (one line: the call's)
    check(result, f"cuMemAlloc_v2({size})")
    return ptr.value


def build_workspace(lib: ctypes.CDLL) -> int:
    ptr = allocate(lib, 3 * MIB + 1, "ALLOC_LINE"); here("BUILD_LINE")  # noqa: E702
    return ptr


def worker(lib: ctypes.CDLL, out: list) -> None:
    out.append(allocate(lib, 3 * MIB + 3, "THREAD_ALLOC_LINE")); here("WORKER_LINE")  # noqa: E702


def sub_main(out: int) -> None:
    """Runs in the subinterpreter (this module imported there anew); the
    address allocated into the 64-bit word at `out`."""
    lib = load(ctypes.CDLL)
    ptr = allocate(lib, 3 * MIB + 4, "SUB_ALLOC_LINE"); here("SUB_MAIN_LINE")  # noqa: E702
    ctypes.c_uint64.from_address(out).value = ptr
    print("\n".join(f"{name} {LINES[name]}" for name in ("SUB_ALLOC_LINE", "SUB_MAIN_LINE")), flush=True)


def in_subinterpreter(out: ctypes.c_uint64) -> bool:
    """sub_main in a new subinterpreter, on this thread (its context current
    there too); False where this Python has no way to make one."""
    try:
        import _interpreters as interpreters  # 3.13+
        make = lambda: interpreters.create("legacy")  # noqa: E731 (ctypes may load there)
        run = interpreters.exec
    except ImportError:
        try:
            import _xxsubinterpreters as interpreters  # 3.9 to 3.12
        except ImportError:
            return False
        make = (lambda: interpreters.create(isolated=False)) if sys.version_info >= (3, 12) else interpreters.create
        run = interpreters.run_string
    code = (f"import sys\nsys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})\n"
            f"import python_frames\npython_frames.sub_main({ctypes.addressof(out)})\n")
    sys.stdout.flush()
    interp = make()
    failed = run(interp, code); here("ENTER_LINE")  # noqa: E702
    interpreters.destroy(interp)
    if failed:
        print(f"python_frames: the subinterpreter failed: {failed}", file=sys.stderr)
    return not failed


def main() -> int:
    with_gil = load(ctypes.PyDLL)
    without_gil = load(ctypes.CDLL)
    ctx = make_current(with_gil)

    kept = [(build_workspace(with_gil), 3 * MIB + 1)]; here("MAIN_LINE")  # noqa: E702
    kept.append((allocate(without_gil, 3 * MIB + 2, "NOGIL_LINE"), 3 * MIB + 2)); here("MAIN_NOGIL_LINE")  # noqa: E702

    out: list = []

    def thread_main() -> None:
        # The context is current per thread.
        check(with_gil.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
        worker(with_gil, out)

    thread = threading.Thread(target=thread_main)
    thread.start()
    thread.join()
    if not out:
        return 1
    kept.append((out[0], 3 * MIB + 3))
    sub_ptr = ctypes.c_uint64(0)
    entered = in_subinterpreter(sub_ptr); here("MAIN_SUB_LINE")  # noqa: E702
    if not entered:
        return 1
    kept.append((sub_ptr.value, 3 * MIB + 4))

    lines = [f"PID {os.getpid()} main"]
    lines += [f"{name} {line}" for name, line in sorted(LINES.items())]
    lines += [f"LIVE {addr:#x} {size} device 0" for addr, size in kept]
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    try:
        status = main(); here("MODULE_LINE")  # noqa: E702
    except CudaError as err:
        print(f"python_frames: {err}", file=sys.stderr)
        status = 1
    if "MODULE_LINE" in LINES:
        print(f"MODULE_LINE {LINES['MODULE_LINE']}")
    sys.exit(status)
