"""Test program for Python frames read without the GIL: allocations made
through a C extension that releases the GIL around each driver call, as
PyTorch's bindings do (nogil_ext.c, built here with this interpreter's
headers), whose Python call chains the program records itself.

- THREADS Python threads at once each make ALLOCS allocations through three
  kinds of call chain: a fixed one, a recursive one, and a function compiled
  for that one call and dropped after it (its code object freed, so that a
  later one may take its address: the tracer must never give it the old
  one's name; every other one with its body 70 lines below its def: a line
  delta of 71, two bytes in 3.11+'s location table);
- meanwhile another thread keeps making and dropping cyclic garbage and
  forcing collections, starting and joining short-lived threads, and
  compiling and dropping functions;
- then a thread the interpreter did not create (pthread_create in the
  extension) enters Python through PyGILState_Ensure and allocates through
  the same chains, the GIL released inside.

Every COMPILED-EVERY-th allocation goes through a compiled function (3 by
default). Every KEEP-th allocation stays live (the others are freed at once). For each
live one the program prints "PYSTACK <address> <chain>": its Python frames
innermost first, "function@file:line" as the interpreter itself reports them
at the call (sys._getframe), which the tracer's snapshot must repeat exactly;
and "ALLOCS <n>", how many allocations it made. Prints the PID/LIVE report of
the other test programs (run_program.py).
Usage: python_nogil.py [--threads N] [--allocs N] [--keep N] [--compiled-every N]"""

import argparse
import gc
import importlib.machinery
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import threading

HERE = os.path.dirname(os.path.abspath(__file__))


def build_extension():
    """nogil_ext.c compiled for this interpreter, imported; and its directory."""
    out = tempfile.mkdtemp(prefix="gmt-nogil-ext-")
    path = os.path.join(out, "nogil_ext" + importlib.machinery.EXTENSION_SUFFIXES[0])
    # The compiler is no CUDA program: not traced.
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    subprocess.run(["cc", "-shared", "-fPIC", "-O1", "-I", sysconfig.get_paths()["include"], "-o", path,
                    os.path.join(HERE, "nogil_ext.c"), "-ldl", "-lpthread"],
                   env=env, stdin=subprocess.DEVNULL, check=True)
    spec = importlib.util.spec_from_file_location("nogil_ext", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod, out


def name_of(code) -> str:
    return getattr(code, "co_qualname", code.co_name)


def chain() -> str:
    """The caller's Python frames, innermost first, as the interpreter has them."""
    f = sys._getframe(1)
    out = []
    while f is not None:
        out.append(f"{name_of(f.f_code)}@{os.path.basename(f.f_code.co_filename)}:{f.f_lineno}")
        f = f.f_back
    return ",".join(out)


def fixed(ext, size):
    addr = ext.alloc(size); return addr, chain()  # noqa: E702 (one line: the call's)


def recursive(ext, size, depth):
    if depth == 0:
        addr = ext.alloc(size); return addr, chain()  # noqa: E702
    return recursive(ext, size, depth - 1)


def compiled(ext, size, tag, gap=0):
    """Through a function made for this call and dropped after it, its body
    `gap` blank lines below its def."""
    ns = {}
    name = f"once_{tag}"
    source = f"def {name}(ext, size, chain):\n" + "\n" * gap + "    addr = ext.alloc(size); return addr, chain()\n"
    exec(compile(source, f"compiled_{tag}.py", "exec"), ns)
    return ns[name](ext, size, chain)


def work(ext, tag, n, keep, out, every=3):
    for k in range(n):
        size = 4096 + 512 * (k % 7)
        if k % every == every - 1:
            addr, ch = compiled(ext, size, f"{tag}_{k}", 70 * (k % 2))
        elif k % 2 == 0:
            addr, ch = fixed(ext, size)
        else:
            addr, ch = recursive(ext, size, 1 + k % 4)
        if k % keep == 0:
            out.append((addr, size, ch))
        else:
            ext.free(addr)


def churn(stop, counts):
    i = 0
    while not stop.is_set():
        ring = [[] for _ in range(64)]
        for a, b in zip(ring, ring[1:] + ring[:1]):
            a.append(b)
        del ring, a, b
        gc.collect()
        ns = {}
        exec(compile(f"def dropped_{i}(x):\n    return x + {i}\n", f"dropped_{i}.py", "exec"), ns)
        ns[f"dropped_{i}"](i)
        del ns
        t = threading.Thread(target=int)
        t.start()
        t.join()
        i += 1
    counts.append(i)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=3)
    ap.add_argument("--allocs", type=int, default=150)
    ap.add_argument("--keep", type=int, default=1)
    ap.add_argument("--compiled-every", type=int, default=3, metavar="N",
                    help="every N-th allocation through a function compiled for it (each a stack "
                         "of its own, which the snapshot's sites keep)")
    args = ap.parse_args()

    ext, build = build_extension()
    try:
        ext.init()
        stop = threading.Event()
        churned: list = []
        churner = threading.Thread(target=churn, args=(stop, churned))
        churner.start()
        outs = [[] for _ in range(args.threads)]
        workers = [threading.Thread(target=work, args=(ext, f"t{t}", args.allocs, args.keep, outs[t],
                                                      args.compiled_every))
                   for t in range(args.threads)]
        for t in workers:
            t.start()
        for t in workers:
            t.join()
        native: list = []
        ext.native_thread(lambda: work(ext, "native", 30, 1, native))
        stop.set()
        churner.join()
    finally:
        shutil.rmtree(build, ignore_errors=True)
    kept = [item for out in outs for item in out] + native
    total = args.threads * args.allocs + 30
    if len(native) != 30 or not churned:
        print(f"python_nogil: native thread made {len(native)} allocations, churn ran {churned}", file=sys.stderr)
        return 1
    lines = [f"PID {os.getpid()} main", f"ALLOCS {total}"]
    lines += [f"LIVE {addr:#x} {size} device 0" for addr, size, _ in kept]
    lines += [f"PYSTACK {addr:#x} {ch}" for addr, _, ch in kept]
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
