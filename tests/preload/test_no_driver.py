#!/usr/bin/env python3
"""A program that finds no CUDA device or no CUDA driver gets one line saying
why nothing will be traced (docs/guide.md, "No CUDA device"), and otherwise
runs as it does untraced (same status, same stdout, same stderr but that
line):

- no device (the simulated driver with GMTSIM_DEVICES=0: cuInit returns
  CUDA_ERROR_NO_DEVICE, as a driver whose devices are all hidden does): one
  line naming the error and its cause, under a plain LD_PRELOAD and under
  `gpumemtrace run` alike;
- no driver (a shared CUDA runtime with no libcuda.so.1 to load: the
  runtime's "CUDA driver version is insufficient"): under `gpumemtrace run`,
  one line at exit; under a plain LD_PRELOAD (where every process, CUDA or
  not, carries the tracer) nothing;
- a shell under `gpumemtrace run` with no driver: nothing.

usage: test_no_driver.py LAUNCHER LIBRARY STATIC_RUNTIME_PROGRAM SHARED_RUNTIME_PROGRAM"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from typing import Dict, List

NO_DEVICE = ("gpumemtrace: cuInit failed with CUDA_ERROR_NO_DEVICE: no CUDA device is visible to this process "
             "(CUDA_VISIBLE_DEVICES, a container started without GPUs); nothing will be traced; without a GPU, "
             "CUDA programs run on the simulated GPU of a gpumemtrace build (docs/simulator.md)")
NO_DRIVER = ("gpumemtrace: no CUDA driver was loaded: the program's CUDA runtime found no libcuda.so.1 (the "
             "NVIDIA driver), so nothing was traced; without a GPU, CUDA programs run on the simulated GPU of a "
             "gpumemtrace build (docs/simulator.md)")


def run(cmd: List[str], env: Dict[str, str], cwd: str) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60, cwd=cwd)


def main() -> int:
    launcher, library, static_prog, shared_prog = (os.path.abspath(a) for a in sys.argv[1:5])
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUMEMTRACE_")}
    preload = [library]
    if os.environ.get("GMT_TEST_ASAN_RUNTIME"):
        # uninstrumented programs: the sanitizer's runtime must come first
        preload.insert(0, os.environ["GMT_TEST_ASAN_RUNTIME"])
        env["ASAN_OPTIONS"] = env.get("ASAN_OPTIONS", "") + ":detect_leaks=0"
        env["LD_PRELOAD"] = os.environ["GMT_TEST_ASAN_RUNTIME"]
    no_device = dict(env, GMTSIM_DEVICES="0")
    # The simulated driver's directory left out: libcuda.so.1 is nowhere.
    no_driver = dict(env, LD_LIBRARY_PATH="")
    failures = 0
    with tempfile.TemporaryDirectory(prefix="gmt-nodriver-") as tmp:
        cases = [
            ("no device, LD_PRELOAD", [static_prog], no_device, True, [NO_DEVICE]),
            ("no device, run", [launcher, "run", "--dir", tmp, "--", static_prog], no_device, False, [NO_DEVICE]),
            ("no driver, run", [launcher, "run", "--dir", tmp, "--", shared_prog], no_driver, False, [NO_DRIVER]),
            ("no driver, LD_PRELOAD", [shared_prog], no_driver, True, []),
            ("a shell, run, no driver", [launcher, "run", "--dir", tmp, "--", "sh", "-c", "true"], no_driver,
             False, []),
        ]
        for what, cmd, case_env, plain, want in cases:
            untraced = run(cmd[cmd.index("--") + 1:] if "--" in cmd else cmd, case_env, tmp)
            traced_env = dict(case_env, LD_PRELOAD=":".join(preload)) if plain else case_env
            traced = run(cmd, traced_env, tmp)
            ours = [ln for ln in traced.stderr.splitlines() if ln.startswith("gpumemtrace:")]
            rest = [ln for ln in traced.stderr.splitlines() if not ln.startswith("gpumemtrace:")]
            if (ours != want or traced.returncode != untraced.returncode or traced.stdout != untraced.stdout
                    or rest != untraced.stderr.splitlines()):
                print(f"FAIL {what}: status {traced.returncode} (untraced {untraced.returncode}), the tracer's "
                      f"lines {ours}, {want} expected\n--- traced stderr\n{traced.stderr[-1500:]}"
                      f"--- untraced stderr\n{untraced.stderr[-800:]}")
                failures += 1
            else:
                print(f"ok   {what}: {len(ours)} line{'s' if len(ours) != 1 else ''}, status {traced.returncode} "
                      "as untraced")
        # Unchanged files: nothing was written.
        written = [f for f in os.listdir(tmp) if f.startswith("gpumemtrace.")]
        if written:
            print(f"FAIL nothing written: {written}")
            failures += 1
    print(f"{failures} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
