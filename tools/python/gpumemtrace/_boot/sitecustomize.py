"""gpumemtrace's Python bootstrap: `gpumemtrace run` and `gpumemtrace check`
put this directory (the package's _boot) first on PYTHONPATH, so Python's
`site` runs it at start-up (docs/guide.md, "PyTorch's own view").

It does two things and imports nothing of gpumemtrace's until needed:

- it watches for `import torch`, `import cupy`, `import jax` and numba's CUDA
  driver module (`numba.cuda.cudadrv.driver`): once the module has run, it
  calls gpumemtrace.frameworks.on_import_torch() (PyTorch's allocator
  history and out-of-memory observer, its snapshot beside the tracer's),
  on_import_cupy() (its pool's state at its out-of-memory), on_import_jax()
  (its allocator's memory_stats() at its out-of-memory) or on_import_numba()
  (its memory manager's pending frees at its out-of-memory). A program that
  imports none gets nothing but this watcher;
- it then runs the `sitecustomize` the program would have run without it
  (the next one on sys.path after this directory), as `sitecustomize`, so
  that a program's or an environment's own start-up code still runs; an
  error in it is reported by `site` as it would be.

One watcher a process: a second copy of the bootstrap on sys.path (a
symlinked directory, `gpumemtrace run` inside the `gpumemtrace run` of
another installation) is the next `sitecustomize` of the first; it finds the
watcher there and only chains on, so the program's own runs once.

gpumemtrace's package is the one this directory is part of, whether or not
it is on sys.path (a Python that is not the one gpumemtrace was installed
into): a module of the program's named `gpumemtrace` is never imported by
the bootstrap. Where the name is the program's, or another copy's, the
package is loaded under the name `_gpumemtrace` instead.
"""

from __future__ import annotations

import os as _os
import sys as _sys


def _gpumemtrace_boot() -> None:
    import importlib.abc
    import importlib.machinery
    import importlib.util

    hooks = {"torch": "on_import_torch", "cupy": "on_import_cupy", "jax": "on_import_jax",
             "numba.cuda.cudadrv.driver": "on_import_numba"}
    done = set()

    def package():
        """gpumemtrace's package: the one this bootstrap is part of
        (<package>/_boot/sitecustomize.py). The program's `import gpumemtrace`
        gets the same module where that is the package it finds; else the
        package is loaded under a name of its own."""
        init = _os.path.join(_os.path.dirname(_os.path.dirname(_os.path.realpath(__file__))), "__init__.py")
        if not _os.path.isfile(init):
            raise ImportError(f"gpumemtrace's bootstrap is not inside its package (no {init})")
        ours = _os.path.realpath(init)
        module = _sys.modules.get("gpumemtrace")
        if module is None:
            now = importlib.util.find_spec("gpumemtrace")
            if now is not None and now.origin is not None and _os.path.realpath(now.origin) == ours:
                return importlib.import_module("gpumemtrace")
        elif _os.path.realpath(getattr(module, "__file__", None) or "") == ours:
            return module
        module = _sys.modules.get("_gpumemtrace")
        if module is not None:
            return module
        spec = importlib.util.spec_from_file_location("_gpumemtrace", ours,
                                                      submodule_search_locations=[_os.path.dirname(ours)])
        module = importlib.util.module_from_spec(spec)
        _sys.modules["_gpumemtrace"] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del _sys.modules["_gpumemtrace"]
            raise
        return module

    def after(name, module):
        # NOTE: whatever this raises is the bootstrap's, never the program's,
        # BaseException included: the program asked for nothing here, and
        # untraced nothing would have raised (a torch whose attribute access
        # raises KeyboardInterrupt or SystemExit). A real Ctrl-C that lands
        # in these milliseconds is this warning, not the program's end.
        try:
            frameworks = importlib.import_module(package().__name__ + ".frameworks")
            getattr(frameworks, hooks[name])(module)
        except BaseException as e:  # noqa: BLE001 - never the program's failure
            print(f"gpumemtrace: {name} imported, but its allocator state will not be recorded "
                  f"({type(e).__name__}: {e})", file=_sys.stderr, flush=True)

    class Watch(importlib.abc.MetaPathFinder):
        """Finds nothing itself: for a watched name it asks the finders after
        it and wraps that loader's exec_module (on the loader instance, so
        the module's __loader__ stays what it was) to call `after` once the
        module has run. Every spec found is wrapped, not the first only: a
        program may ask importlib.util.find_spec() first (as transformers
        does) and import with the next spec found."""

        gpumemtrace_watch = True  # the one watcher of a process

        def find_spec(self, name, path, target=None):
            if name not in hooks or name in done:
                return None
            for finder in _sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(name, path, target)
                if spec is not None:
                    break
            else:
                return None
            loader = spec.loader
            run = getattr(loader, "exec_module", None)
            if run is None or getattr(run, "gpumemtrace_watch", False):
                return spec

            def exec_module(module):
                try:
                    run(module)
                finally:
                    try:
                        del loader.exec_module
                    except AttributeError:
                        pass
                if name not in done:
                    done.add(name)
                    after(name, module)

            exec_module.gpumemtrace_watch = True
            try:
                loader.exec_module = exec_module
            except (AttributeError, TypeError):
                pass  # a loader that takes no attribute: torch goes unwatched
            return spec

    # NOTE: site drops a second entry of the same absolute path from
    # sys.path, but not a symlinked copy of this directory nor another
    # installation's: that copy runs as this one's next sitecustomize (below)
    # and adds no second watcher.
    if not any(getattr(f, "gpumemtrace_watch", False) for f in _sys.meta_path):
        _sys.meta_path.insert(0, Watch())

    # The sitecustomize this one stands in front of: the next after this
    # directory, never one before it (a copy of this file there would run
    # this one again, and so on).
    here = _os.path.dirname(_os.path.abspath(__file__))
    dirs = [_os.path.abspath(p or _os.curdir) for p in _sys.path]
    first = dirs.index(here) + 1 if here in dirs else 0
    rest = [p for p, d in zip(_sys.path[first:], dirs[first:]) if d != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    _sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


_gpumemtrace_boot()
del _gpumemtrace_boot
