"""A command for `gpumemtrace check` to judge (test_check.py). It runs under
the gate, so with the real library preloaded, but allocates nothing: it writes
the exit snapshots the test crafted into $GPUMEMTRACE_DIR under made-up pids,
says what environment it saw, and ends as the test asked.

Usage: fake_command.py SPEC.json, SPEC holding:
  files:   [{"name": str, "doc": object} | {"name": str, "text": str}]
  env_out: path to write the environment to, as JSON (optional)
  ready:   path to create once running, then wait for SIGTERM/SIGINT (optional)
  signal:  kill itself with this signal number at the end (optional)
  exit:    the exit status (default 0)
  hard:    leave with os._exit, so that the library writes no exit snapshot
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time


def main() -> int:
    with open(sys.argv[1], encoding="utf-8") as f:
        spec = json.load(f)
    out_dir = os.environ.get("GPUMEMTRACE_DIR", ".")
    for item in spec.get("files", []):
        path = os.path.join(out_dir, item["name"])
        with open(path, "w", encoding="utf-8") as f:
            if "doc" in item:
                json.dump(item["doc"], f)
            else:
                f.write(item["text"])
    if "env_out" in spec:
        with open(spec["env_out"], "w", encoding="utf-8") as f:
            json.dump(dict(os.environ), f)

    status = spec.get("exit", 0)
    if "ready" in spec:
        got: list[int] = []
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda s, _frame: got.append(s))
        with open(spec["ready"], "w", encoding="utf-8") as f:
            f.write(str(os.getpid()))
        deadline = time.monotonic() + 20
        while not got and time.monotonic() < deadline:
            time.sleep(0.02)
        # the signal that arrived, as the status: the test checks it
        status = 60 + got[0] if got else 99
    sys.stdout.flush()
    if "signal" in spec:
        signal.signal(spec["signal"], signal.SIG_DFL)
        os.kill(os.getpid(), spec["signal"])
    if spec.get("hard"):
        os._exit(status)
    return status


if __name__ == "__main__":
    sys.exit(main())
