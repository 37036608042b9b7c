#!/usr/bin/env python3
"""The Python bootstrap (tools/python/gpumemtrace/_boot/sitecustomize.py) where a program's
start-up is not the usual one, on the simulated GPU with the PyTorch double
(fake_torch/), under `gpumemtrace run`:

- twice on PYTHONPATH: a symlinked copy of the bootstrap's directory beside
  the launcher's, and `gpumemtrace run` inside `gpumemtrace run` of another
  installation (its own copy) and of the same one: the bootstrap runs once —
  one import watcher (one finder more than untraced), one pickle at the
  out-of-memory — no error at start-up, and the program's own sitecustomize
  (a third directory on PYTHONPATH) runs exactly once;
- find_spec first: `importlib.util.find_spec("torch")` before `import torch`
  (what transformers does), and before `importlib.import_module("torch")`:
  PyTorch's view as after a plain import (the framework section, the pickle);
- a module of the program's named gpumemtrace.py (its directory first on
  sys.path): never imported by the bootstrap, PyTorch's view kept, and the
  program's own `import gpumemtrace` gets its own module — imported before
  torch or after;
- a torch whose attribute access raises KeyboardInterrupt or SystemExit:
  the program's output and status as untraced, one `gpumemtrace:` warning.

Usage: test_bootstrap.py LAUNCHER LIBRARY SOURCE_ROOT"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
from typing import Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import test_torch_double as common  # noqa: E402
from test_torch_double import check, run  # noqa: E402

# A program that counts the import finders, then runs out of memory once.
TWICE = r'''
import sys
print("FINDERS", len(sys.meta_path))
import torch
try:
    torch.empty(1 << 40)
except torch.cuda.OutOfMemoryError:
    print("OOM")
'''

OWN_SITECUSTOMIZE = 'print("OWN SITECUSTOMIZE")\n'


def torch_view(tmp: str) -> Dict[str, object]:
    """What the bootstrap left of PyTorch's view in tmp: the oom
    snapshots, the framework section's name and the pickles."""
    ooms = glob.glob(os.path.join(tmp, "gpumemtrace.*.oom.*.json"))
    fw = {}
    if len(ooms) == 1:
        with open(ooms[0], encoding="utf-8") as f:
            fw = json.load(f).get("framework") or {}
    pickles = glob.glob(os.path.join(tmp, "gpumemtrace.*.torch.*.pickle"))
    return {"ooms": len(ooms), "framework": fw.get("name"), "pickles": len(pickles),
            "file": fw.get("file") in pickles}


def whole_view(view: Dict[str, object]) -> bool:
    return view == {"ooms": 1, "framework": "torch", "pickles": 1, "file": True}


def untraced_finders(env: Dict[str, str], tmp: str) -> int:
    r = subprocess.run([sys.executable, "-c", "import sys; print(len(sys.meta_path))"], env=env, cwd=tmp,
                       capture_output=True, text=True, timeout=60)
    return int(r.stdout.split()[-1])


def installed_copy(launcher: str, library: str, source: str, at: str) -> str:
    """Another installation of gpumemtrace under `at` (bin/, lib/,
    share/gpumemtrace/python/ with its own copy of the package and its
    bootstrap): its launcher."""
    os.makedirs(os.path.join(at, "bin"))
    os.makedirs(os.path.join(at, "lib"))
    share = os.path.join(at, "share", "gpumemtrace")
    os.makedirs(share)
    shutil.copy2(launcher, os.path.join(at, "bin"))
    os.symlink(library, os.path.join(at, "lib", os.path.basename(library)))
    shutil.copytree(os.path.join(source, "tools", "python"), os.path.join(share, "python"),
                    ignore=shutil.ignore_patterns("__pycache__"))
    return os.path.join(at, "bin", os.path.basename(launcher))


def twice(env: Dict[str, str], tmp: str, what: str, outer: List[str], pythonpath: str) -> None:
    """TWICE under `outer` (launchers and their options, up to the inner
    run's `--`), with PYTHONPATH and the program's own sitecustomize."""
    own = os.path.join(tmp, "own")
    os.mkdir(own)
    with open(os.path.join(own, "sitecustomize.py"), "w", encoding="utf-8") as f:
        f.write(OWN_SITECUSTOMIZE)
    e = dict(env, PYTHONPATH=pythonpath + os.pathsep + own)
    base = untraced_finders(dict(env, PYTHONPATH=env["PYTHONPATH"] + os.pathsep + own), tmp)
    script = os.path.join(tmp, "twice.py")
    with open(script, "w", encoding="utf-8") as f:
        f.write(TWICE)
    r = subprocess.run(outer + ["--dir", tmp, "--snapshot-on", "oom", "--", sys.executable, script],
                       env=e, cwd=tmp, capture_output=True, text=True, timeout=300)
    check(r.returncode == 0 and "OOM" in r.stdout and "Error in sitecustomize" not in r.stderr
          and "RecursionError" not in r.stderr, f"{what}: the program ran, no error at start-up",
          r.stdout + r.stderr[-800:])
    check(r.stdout.count("OWN SITECUSTOMIZE") == 1, f"{what}: the program's own sitecustomize ran once",
          r.stdout.count("OWN SITECUSTOMIZE"))
    check(f"FINDERS {base + 1}\n" in r.stdout, f"{what}: one import watcher ({base} finders untraced)",
          r.stdout[:200])
    view = torch_view(tmp)
    check(whole_view(view), f"{what}: PyTorch's view once: one framework section, one pickle", view)


def test_twice(launcher: str, library: str, source: str, env: Dict[str, str]) -> None:
    with tempfile.TemporaryDirectory(prefix="gmt-boot-") as tmp:
        link = os.path.join(tmp, "boot-link")
        os.symlink(os.path.join(source, "tools", "python", "gpumemtrace", "_boot"), link)
        twice(env, tmp, "symlinked copy", [launcher, "run"], link + os.pathsep + env["PYTHONPATH"])
    with tempfile.TemporaryDirectory(prefix="gmt-boot-") as tmp:
        other = installed_copy(launcher, library, source, os.path.join(tmp, "inst"))
        twice(env, tmp, "run inside run of another installation",
              [other, "run", "--dir", tmp, "--", launcher, "run"], env["PYTHONPATH"])
    with tempfile.TemporaryDirectory(prefix="gmt-boot-") as tmp:
        twice(env, tmp, "run inside run", [launcher, "run", "--dir", tmp, "--", launcher, "run"], env["PYTHONPATH"])


FIND_SPEC = r'''
import importlib
import importlib.util
LOOKUP
IMPORT
keep = torch.empty(3 << 20)
try:
    torch.empty(1 << 40)
except torch.cuda.OutOfMemoryError:
    print("OOM")
'''


def test_find_spec(launcher: str, env: Dict[str, str]) -> None:
    """The plain import first: what the other two must give."""
    spec = 'print("FOUND", importlib.util.find_spec("torch") is not None)'
    for what, lookup, line in [("plain import", 'print("FOUND", True)', "import torch"),
                               ("find_spec, then import", spec, "import torch"),
                               ("find_spec, then import_module", spec, "torch = importlib.import_module('torch')")]:
        with tempfile.TemporaryDirectory(prefix="gmt-boot-") as tmp:
            r = run(launcher, env, tmp, FIND_SPEC.replace("LOOKUP", lookup).replace("IMPORT", line), "find_spec.py",
                    on="oom")
            view = torch_view(tmp)
            check(r.returncode == 0 and "FOUND True" in r.stdout and "OOM" in r.stdout and whole_view(view),
                  f"{what}: PyTorch's view (its framework section, its pickle)", (view, r.stderr[-600:]))


# A module of the program's, beside it, named as gpumemtrace's own.
USER_MODULE = 'print("USER MODULE")\nOWN = "theirs"\n'

USER_AFTER = r'''
import torch
try:
    torch.empty(1 << 40)
except torch.cuda.OutOfMemoryError:
    print("OOM")
print("NOW MINE")
import gpumemtrace
print("GOT", getattr(gpumemtrace, "OWN", None))
'''

USER_BEFORE = r'''
import gpumemtrace
print("GOT", getattr(gpumemtrace, "OWN", None))
import torch
try:
    torch.empty(1 << 40)
except torch.cuda.OutOfMemoryError:
    print("OOM")
'''


def test_user_module(launcher: str, env: Dict[str, str]) -> None:
    for what, text, want in [
            ("own gpumemtrace.py imported after torch", USER_AFTER, "OOM\nNOW MINE\nUSER MODULE\nGOT theirs\n"),
            ("own gpumemtrace.py imported before torch", USER_BEFORE, "USER MODULE\nGOT theirs\nOOM\n")]:
        with tempfile.TemporaryDirectory(prefix="gmt-boot-") as tmp:
            with open(os.path.join(tmp, "gpumemtrace.py"), "w", encoding="utf-8") as f:
                f.write(USER_MODULE)
            r = run(launcher, env, tmp, text, "user.py", on="oom")
            check(r.returncode == 0 and r.stdout == want,
                  f"{what}: the program's module imported by the program alone, once", (r.stdout, r.stderr[-600:]))
            view = torch_view(tmp)
            check(whole_view(view) and "torch imported, but" not in r.stderr,
                  f"{what}: PyTorch's view kept, no warning", (view, r.stderr[-600:]))


# A torch whose every attribute the program did not define raises.
RAISING_TORCH = r'''
import os
_RAISE = {"KeyboardInterrupt": KeyboardInterrupt, "SystemExit": SystemExit}[os.environ["FAKE_TORCH_RAISE"]]


def __getattr__(name):
    raise _RAISE(f"torch.{name}")
'''

RAISING = r'''
import torch
print("IMPORTED", torch.__name__)
'''


def test_raising_torch(launcher: str, env: Dict[str, str]) -> None:
    for exc in ("KeyboardInterrupt", "SystemExit"):
        with tempfile.TemporaryDirectory(prefix="gmt-boot-") as tmp:
            pkg = os.path.join(tmp, "site", "torch")
            os.makedirs(pkg)
            with open(os.path.join(pkg, "__init__.py"), "w", encoding="utf-8") as f:
                f.write(RAISING_TORCH)
            e = dict(env, FAKE_TORCH_RAISE=exc, PYTHONPATH=os.path.join(tmp, "site"))
            r = run(launcher, e, tmp, RAISING, "raising.py", on="oom")
            plain = subprocess.run([sys.executable, os.path.join(tmp, "raising.py")], env=e, cwd=tmp,
                                   capture_output=True, text=True, timeout=60)
            check(plain.returncode == 0 and (r.returncode, r.stdout) == (plain.returncode, plain.stdout),
                  f"torch raising {exc}: the program's output and status as untraced",
                  ((r.returncode, r.stdout), (plain.returncode, plain.stdout), r.stderr[-600:]))
            warns = [ln for ln in r.stderr.splitlines() if ln.startswith("gpumemtrace:") and exc in ln]
            check(len(warns) == 1, f"torch raising {exc}: one warning naming it", r.stderr[-600:])


def main(argv: List[str]) -> int:
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    launcher, library, source = os.path.abspath(argv[0]), os.path.abspath(argv[1]), argv[2]
    env = common.base_env(source)
    test_twice(launcher, library, source, env)
    test_find_spec(launcher, env)
    test_user_module(launcher, env)
    test_raising_torch(launcher, env)
    print(f"{'FAIL' if common.FAILURES else 'ok'}: {len(common.FAILURES)} failed")
    return 1 if common.FAILURES else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
