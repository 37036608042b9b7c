"""What the small preload harnesses share (check_names.py, check_argv.py,
check_chdir.py, check_storms.py, check_forks.py): the traced environment and
the end of a run."""
from __future__ import annotations

import os


def env_of(lib: str, **settings: str) -> dict[str, str]:
    """The environment without GMTSIM_* and GPUMEMTRACE_* settings, with
    these settings and LD_PRELOAD naming lib (after the sanitizer's runtime
    in the sanitizer build)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GMTSIM_", "GPUMEMTRACE_"))}
    env.update(settings)
    preload = [lib]
    if os.environ.get("GMT_TEST_ASAN_RUNTIME"):
        preload.insert(0, os.environ["GMT_TEST_ASAN_RUNTIME"])
        env["ASAN_OPTIONS"] = env.get("ASAN_OPTIONS", "") + ":detect_leaks=0"
    env["LD_PRELOAD"] = " ".join(preload)
    return env


def finish(problems: list[str], ok: str) -> int:
    """Prints each problem (or the ok line); the exit status."""
    for p in problems:
        print("FAIL:", p)
    if not problems:
        print("ok:", ok)
    return 1 if problems else 0
