"""gpumemtrace's Python bootstrap: `gpumemtrace run` and `gpumemtrace check`
put this directory first on PYTHONPATH, so Python's `site` runs it at start-up
(docs/guide.md, "PyTorch's own view").

It does two things and imports nothing of gpumemtrace's until needed:

- it watches for `import torch`, `import cupy` and `import jax`: once the
  package has run, it calls gpumemtrace.frameworks.on_import_torch()
  (PyTorch's allocator history and out-of-memory observer, its snapshot
  beside the tracer's), on_import_cupy() (its pool's state at its
  out-of-memory) or on_import_jax() (its allocator's memory_stats() at its
  out-of-memory). A program that imports none gets nothing but this watcher;
- it then runs the `sitecustomize` the program would have run without it
  (the next one on sys.path), as `sitecustomize`, so that a program's or an
  environment's own start-up code still runs; an error in it is reported by
  `site` as it would be.
"""

import os as _os
import sys as _sys


def _gpumemtrace_boot() -> None:
    import importlib.abc
    import importlib.machinery
    import importlib.util

    hooks = {"torch": "on_import_torch", "cupy": "on_import_cupy", "jax": "on_import_jax"}
    done = set()

    def after(name, module):
        try:
            from gpumemtrace import frameworks
            getattr(frameworks, hooks[name])(module)
        except Exception as e:  # noqa: BLE001 - never the program's failure
            print(f"gpumemtrace: {name} imported, but its allocator state will not be recorded "
                  f"({type(e).__name__}: {e})", file=_sys.stderr, flush=True)

    class Watch(importlib.abc.MetaPathFinder):
        """Finds nothing itself: for a watched name it asks the finders after
        it and wraps that loader's exec_module (on the loader instance, so
        the module's __loader__ stays what it was) to call `after`."""

        def find_spec(self, name, path, target=None):
            if name not in hooks or name in done:
                return None
            done.add(name)
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
            if run is None:
                return spec

            def exec_module(module):
                try:
                    run(module)
                finally:
                    try:
                        del loader.exec_module
                    except AttributeError:
                        pass
                after(name, module)

            try:
                loader.exec_module = exec_module
            except (AttributeError, TypeError):
                pass  # a loader that takes no attribute: torch goes unwatched
            return spec

    _sys.meta_path.insert(0, Watch())

    # The sitecustomize this one stands in front of.
    here = _os.path.dirname(_os.path.abspath(__file__))
    rest = [p for p in _sys.path if _os.path.abspath(p or _os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    _sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


_gpumemtrace_boot()
del _gpumemtrace_boot
