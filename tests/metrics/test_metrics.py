#!/usr/bin/env python3
"""The live metrics file (docs/fleet.md), on the simulated GPU, against the
simulated driver's ledger:

- ledger: a traced rank (rank.py: RANK=1, LOCAL_RANK=0 — the second of
  two machines of one GPU each —, WORLD_SIZE=2, SLURM_JOB_ID set) holds known blocks at two sites and writes the ledger of
  that moment; the next write of its metrics file (every second) has per
  device and kind exactly the ledger's live bytes and allocations, the two
  sites with their bytes, the process's labels, nothing in flight; at exit
  the last write has gpumemtrace_running 0 and exactly the exit ledger; every
  file passes `promtool check metrics`;
- oom: an out-of-memory is in the file while the process runs, though the
  interval is a day;
- gpumemtrace run --metrics-dir DIR sets the directory;
- bad input: an unwritable directory, an interval of 0, a K of 0 and one too
  large — each one warning, defaults, the program's output and status
  unchanged;
- names: a process's file is gpumemtrace.<pid>.<boot>-<pidns>-<start>.prom
  (its machine's boot id, the inode of its pid namespace, its start time);
- stale files: a file of a gone process of this boot and this pid namespace
  (its pid running no more, or running a process started at another time)
  not rewritten for a long time is removed by the next process's first
  write; one of another pid namespace, another boot, a live process, a recent
  one, or an earlier version's gpumemtrace.<pid>.prom (whose name cannot say
  whose it is) stays;
- namespaces (with --namespaces; skipped, exit 77, where this machine cannot
  make pid namespaces): ranks as pid 1 and pid 2 of their own pid
  namespaces, sharing the directory, write one file each, and none removes
  or replaces another's while it runs, though its pid is gone in theirs;
- hostile names: the exposition tests/output/test_metrics writes of names a
  program could give (quotes, newlines, invalid UTF-8, control characters,
  a label too long) passes promtool;
- prometheus (with --prometheus): Debian's prometheus and node_exporter on
  loopback ports, temporary data, bounded in time: two ranks write metrics,
  node_exporter's textfile collector reads them, Prometheus scrapes it, and
  its HTTP API's gpumemtrace_live_bytes per rank equals each rank's ledger;
  every query of the Grafana dashboard (tools/grafana) answers there, and
  offline each metric it asks for is one the file has.

Usage: test_metrics.py LAUNCHER TEST_METRICS_PROGRAM [--prometheus | --namespaces]"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from typing import Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
RANK = os.path.join(HERE, "rank.py")
FAILURES: List[str] = []
MIB = 1 << 20
SAMPLE = re.compile(r'^(gpumemtrace_[a-z_]+)\{(.*)\} (\S+)$')
LABEL = re.compile(r'([a-z_]+)="((?:[^"\\]|\\.)*)"')
NAME = re.compile(r'^gpumemtrace\.(\d+)\.([0-9a-f]{32})-(\d+)-(\d+)\.prom$')


def check(ok: bool, what: str, got: object = None) -> None:
    if not ok:
        FAILURES.append(what)
        print(f"FAIL {what}" + (f": {got!r}" if got is not None else ""))
    else:
        print(f"ok   {what}")


def base_env() -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("GPUMEMTRACE_", "GMTSIM_")) and k not in (
               "LD_PRELOAD", "RANK", "LOCAL_RANK", "WORLD_SIZE", "SLURM_JOB_ID", "TORCHELASTIC_RUN_ID")}
    env["GMTSIM_MEMORY"] = "1G"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    if os.environ.get("GMT_TEST_ASAN_RUNTIME"):
        env["LD_PRELOAD"] = os.environ["GMT_TEST_ASAN_RUNTIME"]
        env["ASAN_OPTIONS"] = env.get("ASAN_OPTIONS", "") + ":detect_leaks=0"
    return env


def parse(text: str) -> List[Tuple[str, Dict[str, str], float]]:
    out = []
    for line in text.splitlines():
        m = SAMPLE.match(line)
        if m:
            out.append((m.group(1), dict(LABEL.findall(m.group(2))), float(m.group(3))))
    return out


def read_metrics(path: str) -> Tuple[str, List[Tuple[str, Dict[str, str], float]]]:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError:
        return "", []
    return text, parse(text)


def value(samples, name: str, **labels: str) -> Optional[float]:
    for n, lb, v in samples:
        if n == name and all(lb.get(k) == want for k, want in labels.items()):
            return v
    return None


def by_device_kind(samples, name: str) -> Dict[Tuple[str, str], int]:
    return {(lb["device"], lb["kind"]): int(v) for n, lb, v in samples if n == name}


def ledger_by_device_kind(ledger: dict) -> Tuple[Dict[Tuple[str, str], int], Dict[Tuple[str, str], int]]:
    nbytes: Dict[Tuple[str, str], int] = {}
    count: Dict[Tuple[str, str], int] = {}
    for e in ledger["live"]:
        key = ("host" if e["device"] < 0 else str(e["device"]), e["kind"])
        nbytes[key] = nbytes.get(key, 0) + e["size"]
        count[key] = count.get(key, 0) + 1
    return nbytes, count


def promtool_ok(paths: List[str], what: str) -> None:
    promtool = shutil.which("promtool")
    check(promtool is not None, f"{what}: promtool is installed (scripts/test installs prometheus)")
    for p in paths:
        if promtool is None:
            return
        with open(p, encoding="utf-8") as f:
            r = subprocess.run([promtool, "check", "metrics"], stdin=f, capture_output=True, text=True, timeout=60)
        check(r.returncode == 0, f"{what}: promtool check metrics {os.path.basename(p)}", r.stdout + r.stderr)


def boot_id() -> str:
    with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
        return f.read().strip().replace("-", "")


def start_time(pid: int | str = "self") -> int:
    """Field 22 of /proc/PID/stat: clock ticks since boot."""
    with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as f:
        return int(f.read().rsplit(")", 1)[1].split()[19])


def file_name(pid: int, boot: str, pidns: int, start: int) -> str:
    """A metrics file's name (docs/fleet.md): gpumemtrace.<pid>.<boot>-<pidns>-<start>.prom."""
    return f"gpumemtrace.{pid}.{boot}-{pidns}-{start}.prom"


def metrics_path(directory: str, pid: int) -> str:
    """The file of a running process of this pid namespace."""
    return os.path.join(directory, file_name(pid, boot_id(), os.stat("/proc/self/ns/pid").st_ino, start_time(pid)))


def start_rank(launcher: str, env: Dict[str, str], workdir: str, metrics_dir: Optional[str], rank: int,
               extra: Optional[List[str]] = None, tail: Optional[List[str]] = None,
               local_rank: Optional[int] = None) -> Tuple[subprocess.Popen, str, str]:
    ledger = os.path.join(workdir, f"ledger.rank{rank}.json")
    go = os.path.join(workdir, f"go.rank{rank}")
    env = dict(env, RANK=str(rank), LOCAL_RANK=str(rank if local_rank is None else local_rank), WORLD_SIZE="2",
               GMTSIM_LEDGER_DIR=workdir)
    cmd = [launcher, "run", "--dir", workdir]
    if metrics_dir is not None:
        env["GPUMEMTRACE_METRICS_DIR"] = metrics_dir
    cmd += (extra or []) + ["--", sys.executable, RANK, ledger, go] + (tail or [])
    p = subprocess.Popen(cmd, env=env, cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return p, ledger, go


def wait_ready(p: subprocess.Popen, timeout: float = 120) -> bool:
    line = p.stdout.readline() if p.stdout is not None else ""
    return line.strip() == "READY"


def wait_write_after(path: str, t: float, timeout: float = 60) -> List[Tuple[str, Dict[str, str], float]]:
    """The metrics file's samples once a write taken after time t is there."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        _, samples = read_metrics(path)
        stamp = value(samples, "gpumemtrace_metrics_timestamp_seconds")
        if stamp is not None and stamp > t:
            return samples
        time.sleep(0.1)
    return []


def test_ledger(launcher: str, env: Dict[str, str]) -> None:
    with tempfile.TemporaryDirectory(prefix="gmt-metrics-") as tmp:
        env = dict(env, GPUMEMTRACE_METRICS_INTERVAL="1", SLURM_JOB_ID="4242")
        p, ledger_path, go = start_rank(launcher, env, tmp, tmp, 1, local_rank=0)
        ready = wait_ready(p)
        t = time.time()
        path = metrics_path(tmp, p.pid)
        samples = wait_write_after(path, t) if ready else []
        check(ready and samples != [], "ledger: a write after the ledger's moment, under the process's name "
              "(pid, boot, pid namespace, start time)", (os.path.basename(path), os.listdir(tmp)))
        with open(ledger_path, encoding="utf-8") as f:
            ledger = json.load(f)
        want_bytes, want_count = ledger_by_device_kind(ledger)
        check(by_device_kind(samples, "gpumemtrace_live_bytes") == want_bytes,
              "ledger: live bytes by device and kind = the ledger's",
              (by_device_kind(samples, "gpumemtrace_live_bytes"), want_bytes))
        check(by_device_kind(samples, "gpumemtrace_live_allocations") == want_count,
              "ledger: live allocations by device and kind = the ledger's")
        sites = {lb["site"]: int(v) for n, lb, v in samples if n == "gpumemtrace_site_live_bytes"}
        # The site rule names the rank's calls (the driver's wrapper is the
        # site's own frame, the rank's function the caller that tells them apart).
        weights = [v for k, v in sites.items() if "weights (rank.py:" in k]
        acts = [v for k, v in sites.items() if "activations (rank.py:" in k]
        check(weights == [3 * 9 * MIB] and acts == [5 * 3 * MIB] and len(sites) == 2,
              "ledger: the two sites, by their lines, with their bytes", sites)
        labels = next((lb for n, lb, _ in samples if n == "gpumemtrace_running"), {})
        check((labels.get("pid"), labels.get("rank"), labels.get("local_rank"), labels.get("world_size"),
               labels.get("job_id"), labels.get("host")) ==
              (str(p.pid), "1", "0", "2", "4242", socket.gethostname()),
              "ledger: the process's labels (pid, rank, local rank, world size, job, host)", labels)
        check(value(samples, "gpumemtrace_running") == 1 and
              value(samples, "gpumemtrace_events_recorded_total") == value(samples, "gpumemtrace_events_applied_total"),
              "ledger: running, nothing in flight")
        check(value(samples, "gpumemtrace_peak_bytes", device="0") == 3 * 9 * MIB + 5 * 3 * MIB,
              "ledger: the device's peak")
        test_dashboard_names({n for n, _, _ in samples} | {
            line.split()[2] for line in read_metrics(path)[0].splitlines() if line.startswith("# TYPE")})
        mid = os.path.join(tmp, "mid.prom")
        shutil.copy(path, mid)
        open(go, "w").close()
        out, err = p.communicate(timeout=120)
        check(p.returncode == 0 and "DONE" in out and "gpumemtrace:" not in err, "ledger: the rank ran", err[-600:])
        exit_ledger = os.path.join(tmp, f"ledger.{p.pid}.exit.json")
        text, final = read_metrics(path)
        with open(exit_ledger, encoding="utf-8") as f:
            want_bytes, _ = ledger_by_device_kind(json.load(f))
        check(value(final, "gpumemtrace_running") == 0 and
              by_device_kind(final, "gpumemtrace_live_bytes") == want_bytes and
              value(final, "gpumemtrace_allocations_total") == 8 and value(final, "gpumemtrace_frees_total") == 5,
              "ledger: the last write, at exit, is the exit ledger's, running 0",
              (by_device_kind(final, "gpumemtrace_live_bytes"), want_bytes))
        check(not [f for f in os.listdir(tmp) if f.endswith(".tmp")], "ledger: no temporary file left")
        promtool_ok([mid, path], "ledger")


def test_many_sites(launcher: str, env: Dict[str, str]) -> None:
    """More sites than the writer keeps stacks for (4 × GPUMEMTRACE_METRICS_TOP):
    the top K are still exactly the K largest, with their bytes."""
    with tempfile.TemporaryDirectory(prefix="gmt-metrics-") as tmp:
        env = dict(env, GPUMEMTRACE_METRICS_INTERVAL="1", GPUMEMTRACE_METRICS_TOP="3")
        p, _, go = start_rank(launcher, env, tmp, tmp, 0, tail=["many"])
        ready = wait_ready(p)
        t = time.time()
        samples = wait_write_after(metrics_path(tmp, p.pid), t) if ready else []
        open(go, "w").close()
        p.communicate(timeout=120)
        sites = {lb["site"]: int(v) for n, lb, v in samples if n == "gpumemtrace_site_live_bytes"}
        got = sorted((v, (re.findall(r"site_\d+", k) or [k])[-1]) for k, v in sites.items())
        check(got == [(34 * MIB, "site_34"), (35 * MIB, "site_35"), (36 * MIB, "site_36")],
              "many sites: the 3 largest of 38, exactly, with their bytes", sites)


def test_oom(launcher: str, env: Dict[str, str]) -> None:
    """An out-of-memory is in the file soon, not an interval later."""
    with tempfile.TemporaryDirectory(prefix="gmt-metrics-") as tmp:
        env = dict(env, GPUMEMTRACE_METRICS_INTERVAL="86400")
        p, _, go = start_rank(launcher, env, tmp, tmp, 0, tail=["oom"])
        ready = wait_ready(p)
        path = metrics_path(tmp, p.pid)
        deadline = time.monotonic() + 30
        samples: List[Tuple[str, Dict[str, str], float]] = []
        # A write may come between the failure and its snapshot's file: the
        # one after the snapshot is asked for when it is written.
        while ready and time.monotonic() < deadline and value(samples, "gpumemtrace_snapshots_written_total") != 1:
            _, samples = read_metrics(path)
            time.sleep(0.05)
        check(value(samples, "gpumemtrace_oom_failures_total") == 1 and
              value(samples, "gpumemtrace_oom_episodes_total") == 1 and
              value(samples, "gpumemtrace_snapshots_written_total") == 1 and
              value(samples, "gpumemtrace_running") == 1,
              "oom: the file has the out-of-memory while the process runs (the interval is a day)",
              [s for s in samples if "oom" in s[0]])
        open(go, "w").close()
        p.communicate(timeout=120)


def test_launcher_option(launcher: str, env: Dict[str, str]) -> None:
    with tempfile.TemporaryDirectory(prefix="gmt-metrics-") as tmp:
        metrics = os.path.join(tmp, "made")
        p, _, go = start_rank(launcher, env, tmp, None, 0, ["--metrics-dir", metrics])
        ready = wait_ready(p)
        path = metrics_path(metrics, p.pid) if ready else ""
        open(go, "w").close()
        _, err = p.communicate(timeout=120)
        check(ready and p.returncode == 0 and os.path.exists(path),
              "run --metrics-dir: the directory made, the file written", err[-400:])
        r = subprocess.run([launcher, "run", "--metrics-dir", "/proc/version/x", "--", "true"], env=env,
                           capture_output=True, text=True, timeout=60)
        check(r.returncode == 2 and "--metrics-dir '/proc/version/x'" in r.stderr,
              "run --metrics-dir: a directory that cannot be made is a usage error naming it", r.stderr)


def run_plain(launcher: str, env: Dict[str, str], tmp: str) -> subprocess.CompletedProcess:
    """rank.py with GO already there: it allocates, frees and exits."""
    open(os.path.join(tmp, "go.rank0"), "w").close()
    return subprocess.run([launcher, "run", "--dir", tmp, "--", sys.executable, RANK,
                           os.path.join(tmp, "ledger.json"), os.path.join(tmp, "go.rank0")],
                          env=dict(env, GMTSIM_LEDGER_DIR=tmp), cwd=tmp, capture_output=True, text=True, timeout=120)


def test_bad_input(launcher: str, env: Dict[str, str]) -> None:
    with tempfile.TemporaryDirectory(prefix="gmt-metrics-") as tmp:
        plain = run_plain(launcher, env, tmp)
        blocker = os.path.join(tmp, "a-file")
        open(blocker, "w").close()
        for where in (os.path.join(tmp, "missing"), blocker):
            r = run_plain(launcher, dict(env, GPUMEMTRACE_METRICS_DIR=where), tmp)
            warn = [ln for ln in r.stderr.splitlines() if ln.startswith("gpumemtrace:")]
            check(r.returncode == plain.returncode == 0 and r.stdout == plain.stdout and len(warn) == 1 and
                  f"cannot write the metrics file in {where}" in warn[0],
                  f"bad input: metrics directory {os.path.basename(where)}: one warning, the program unchanged",
                  r.stderr)
        metrics = os.path.join(tmp, "m")
        os.mkdir(metrics)
        for var, bad, want in (("GPUMEMTRACE_METRICS_INTERVAL", "0", "an integer from 1 to 86400"),
                               ("GPUMEMTRACE_METRICS_INTERVAL", "soon", "an integer from 1 to 86400"),
                               ("GPUMEMTRACE_METRICS_TOP", "0", "an integer from 1 to 1000"),
                               ("GPUMEMTRACE_METRICS_TOP", "100000", "an integer from 1 to 1000")):
            r = run_plain(launcher, dict(env, GPUMEMTRACE_METRICS_DIR=metrics, **{var: bad}), tmp)
            warn = [ln for ln in r.stderr.splitlines() if ln.startswith("gpumemtrace:")]
            files = [f for f in os.listdir(metrics) if f.endswith(".prom")]
            _, samples = read_metrics(os.path.join(metrics, files[-1])) if files else ("", [])
            check(r.returncode == 0 and r.stdout == plain.stdout and len(warn) == 1 and var in warn[0] and
                  want in warn[0] and value(samples, "gpumemtrace_metrics_interval_seconds") == 10,
                  f"bad input: {var}={bad}: one warning, the default, the program unchanged", warn)
            for f in files:
                os.unlink(os.path.join(metrics, f))


def test_stale(launcher: str, env: Dict[str, str]) -> None:
    """Files planted under the names processes would have written: only
    those provably of a gone process of this boot and pid namespace go."""
    with tempfile.TemporaryDirectory(prefix="gmt-metrics-") as tmp:
        gone = subprocess.Popen(["true"])
        gone.wait()
        alive = subprocess.Popen(["sleep", "600"])
        try:
            boot, ns, host = boot_id(), os.stat("/proc/self/ns/pid").st_ino, socket.gethostname()
            started = start_time(alive.pid)
            old = time.time() - 3600
            planted = {
                "dead": (file_name(gone.pid, boot, ns, 12345), old),
                "pid used again": (file_name(alive.pid, boot, ns, started + 1), old),
                "alive": (file_name(alive.pid, boot, ns, started), old),
                "dead, recent": (file_name(gone.pid + 2, boot, ns, 12345), time.time()),
                "another pid namespace": (file_name(gone.pid, boot, ns + 1, 12345), old),
                "another boot": (file_name(gone.pid, "0" * 32, ns, 12345), old),
                "an earlier version's": (f"gpumemtrace.{gone.pid}.prom", old),
            }
            for name, (base, when) in planted.items():
                path = os.path.join(tmp, base)
                with open(path, "w", encoding="utf-8") as f:
                    f.write(f'gpumemtrace_running{{pid="{gone.pid}",host="{host}"}} 0\n')
                os.utime(path, (when, when))
            r = run_plain(launcher, dict(env, GPUMEMTRACE_METRICS_DIR=tmp), tmp)
        finally:
            alive.kill()
            alive.wait()
        left = {k for k, (base, _) in planted.items() if os.path.exists(os.path.join(tmp, base))}
        check(r.returncode == 0 and left == set(planted) - {"dead", "pid used again"},
              "stale files: a gone process's of this boot and pid namespace removed (its pid running no more, "
              "or used again); a live one's, a recent one, another pid namespace's, another boot's, an earlier "
              "version's kept", {"removed": sorted(set(planted) - left)})


def can_unshare() -> Tuple[List[str], str]:
    """The unshare(1) command that makes a pid namespace of its own with its
    own /proc here (through a user namespace when not root), or [] and why
    not."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return [], "no unshare(1) (util-linux)"
    why = ""
    for extra in ([], ["--user", "--map-root-user"]):
        cmd = [unshare] + extra + ["--pid", "--fork", "--mount-proc"]
        r = subprocess.run(cmd + ["true"], capture_output=True, text=True, timeout=60)
        if r.returncode == 0:
            return cmd, ""
        why = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f"exit status {r.returncode}"
    return [], f"cannot make a pid namespace here ({why})"


def rank_in_namespace(unshare: List[str], launcher: str, env: Dict[str, str], workdir: str, metrics_dir: str,
                      rank: int, second: bool) -> Tuple[subprocess.Popen, str]:
    """A rank in a pid namespace of its own: pid 1 there, or pid 2 (`second`:
    a shell, pid 1, runs it)."""
    go = os.path.join(workdir, f"go.rank{rank}")
    env = dict(env, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="3", GMTSIM_LEDGER_DIR=workdir,
               GPUMEMTRACE_METRICS_DIR=metrics_dir, GPUMEMTRACE_METRICS_INTERVAL="86400")
    cmd = [launcher, "run", "--dir", workdir, "--", sys.executable, RANK,
           os.path.join(workdir, f"ledger.rank{rank}.json"), go]
    if second:
        cmd = ["sh", "-c", '"$@"; exit $?', "sh"] + cmd
    p = subprocess.Popen(unshare + cmd, env=env, cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    return p, go


def files_by_rank(directory: str) -> Dict[str, Tuple[str, Dict[str, str], float]]:
    """rank label -> (file, the labels of its gpumemtrace_running, its value)."""
    out = {}
    for f in sorted(os.listdir(directory)):
        if f.endswith(".prom"):
            _, samples = read_metrics(os.path.join(directory, f))
            for n, lb, v in samples:
                if n == "gpumemtrace_running":
                    out.setdefault(lb.get("rank", ""), (f, lb, v))
    return out


def test_namespaces(launcher: str, env: Dict[str, str]) -> int:
    """Ranks in pid namespaces of their own share a metrics directory, as
    containers on one machine share a host path: rank 0 runs as pid 2 of its
    namespace, its file made to look long unwritten (an interval of a day);
    rank 1 runs as pid 1 of another (where no pid 2 runs), rank 2 as pid 2 of
    a third. Each writes its own file; none removes or replaces rank 0's."""
    unshare, why = can_unshare()
    if not unshare:
        print(f"SKIP namespaces: {why}")
        return 77
    with tempfile.TemporaryDirectory(prefix="gmt-metrics-ns-") as tmp:
        mdir = os.path.join(tmp, "metrics")
        os.mkdir(mdir)
        first, go = rank_in_namespace(unshare, launcher, env, tmp, mdir, 0, True)
        try:
            ready = wait_ready(first)
            deadline = time.monotonic() + 60
            while ready and "0" not in files_by_rank(mdir) and time.monotonic() < deadline:
                time.sleep(0.05)
            mine = files_by_rank(mdir).get("0")
            check(mine is not None and mine[1].get("pid") == "2" and mine[2] == 1,
                  "namespaces: rank 0, pid 2 of its pid namespace, writes its file", mine)
            if mine is None:
                return 1
            path = os.path.join(mdir, mine[0])
            then = time.time() - 3600
            os.utime(path, (then, then))
            for rank, second in ((1, False), (2, True)):
                p, go_other = rank_in_namespace(unshare, launcher, env, tmp, mdir, rank, second)
                open(go_other, "w").close()
                _, err = p.communicate(timeout=120)
                check(p.returncode == 0, f"namespaces: rank {rank} ran", err[-400:])
            got = files_by_rank(mdir)
            check(os.path.exists(path) and got.get("0") == mine,
                  "namespaces: rank 0's file neither removed nor replaced by ranks of other pid namespaces "
                  "(one where its pid is gone, one where its pid is another's)", got.get("0"))
            names = {k: NAME.match(v[0]) for k, v in got.items()}
            ns = {k: m.group(3) if m is not None else None for k, m in names.items()}
            # NOTE: ranks 1 and 2 ran one after the other: the kernel may
            # give the second pid namespace the inode number of the first,
            # gone by then (the start time in the name tells them apart);
            # neither may have rank 0's, alive beside both.
            check({k: (v[1].get("pid"), v[2]) for k, v in got.items()} == {"0": ("2", 1), "1": ("1", 0), "2": ("2", 0)}
                  and all(m is not None and m.group(2) == boot_id() for m in names.values())
                  and ns.get("0") not in (ns.get("1"), ns.get("2"), None) and len(got) == 3,
                  "namespaces: one file for each rank, named for its boot and its own pid namespace",
                  sorted(os.listdir(mdir)))
        finally:
            open(go, "w").close()
            _, err = first.communicate(timeout=120)
        got = files_by_rank(mdir)
        check(first.returncode == 0 and got.get("0", ("", {}, -1))[2] == 0,
              "namespaces: rank 0's last write, at exit, in its own file", (first.returncode, err[-400:]))
    return 0


DASHBOARD = os.path.join(HERE, "..", "..", "tools", "grafana", "gpumemtrace-dashboard.json")
# What the dashboard's variables stand for when its queries are asked of
# Prometheus directly.
GRAFANA_VARS = {"$job_id": ".*", "$__range": "5m", "$__rate_interval": "1m"}


def dashboard_queries() -> List[Tuple[str, str]]:
    """(panel title, PromQL) of every target of the dashboard."""
    with open(DASHBOARD, encoding="utf-8") as f:
        dash = json.load(f)
    out = []
    for p in dash["panels"]:
        for t in p["targets"]:
            expr = t["expr"]
            for k, v in GRAFANA_VARS.items():
                expr = expr.replace(k, v)
            out.append((p["title"], expr))
    return out


def test_dashboard_names(names: set) -> None:
    """Every metric the dashboard asks for is one the tracer writes."""
    used = set()
    for _, expr in dashboard_queries():
        used |= set(re.findall(r"\bgpumemtrace_[a-z_]+", expr))
    check(bool(used) and used <= names, "dashboard: every metric it asks for is one the file has", used - names)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_json(url: str) -> Optional[dict]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return json.loads(r.read().decode("utf-8"))
    except (OSError, ValueError):
        return None


def http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status == 200
    except OSError:
        return False


def test_prometheus(launcher: str, env: Dict[str, str]) -> None:
    exporter, prometheus = shutil.which("prometheus-node-exporter"), shutil.which("prometheus")
    check(exporter is not None and prometheus is not None,
          "prometheus: Debian's prometheus and prometheus-node-exporter are installed (scripts/test installs them)")
    if exporter is None or prometheus is None:
        return
    procs: List[subprocess.Popen] = []
    with tempfile.TemporaryDirectory(prefix="gmt-prom-") as tmp:
        textdir = os.path.join(tmp, "textfile")
        os.mkdir(textdir)
        p_exp, p_prom = free_port(), free_port()
        config = os.path.join(tmp, "prometheus.yml")
        with open(config, "w", encoding="utf-8") as f:
            f.write("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                    "scrape_configs:\n  - job_name: node\n    static_configs:\n"
                    f"      - targets: ['127.0.0.1:{p_exp}']\n")
        try:
            procs.append(subprocess.Popen(
                [exporter, "--collector.disable-defaults", "--collector.textfile",
                 f"--collector.textfile.directory={textdir}", f"--web.listen-address=127.0.0.1:{p_exp}"],
                stdout=subprocess.DEVNULL, stderr=open(os.path.join(tmp, "exporter.log"), "w")))
            procs.append(subprocess.Popen(
                [prometheus, f"--config.file={config}", f"--storage.tsdb.path={os.path.join(tmp, 'data')}",
                 f"--web.listen-address=127.0.0.1:{p_prom}", "--log.level=warn"],
                stdout=subprocess.DEVNULL, stderr=open(os.path.join(tmp, "prometheus.log"), "w")))
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not (
                    http_ok(f"http://127.0.0.1:{p_exp}/metrics") and http_ok(f"http://127.0.0.1:{p_prom}/-/ready")):
                time.sleep(0.2)
            check(time.monotonic() < deadline, "prometheus: node_exporter and Prometheus are up")
            env = dict(env, GPUMEMTRACE_METRICS_INTERVAL="1")
            ranks = [start_rank(launcher, env, tmp, textdir, r) for r in (0, 1)]
            procs += [r[0] for r in ranks]
            ready = all(wait_ready(r[0]) for r in ranks)
            want = {}
            for rank, (_, ledger_path, _) in enumerate(ranks):
                with open(ledger_path, encoding="utf-8") as f:
                    want[str(rank)] = sum(e["size"] for e in json.load(f)["live"])
            query = urllib.parse.quote("sum by (rank) (gpumemtrace_live_bytes)")
            got: Dict[str, int] = {}
            deadline = time.monotonic() + 60
            while ready and time.monotonic() < deadline and got != want:
                doc = http_json(f"http://127.0.0.1:{p_prom}/api/v1/query?query={query}") or {}
                got = {r["metric"].get("rank", ""): int(float(r["value"][1]))
                       for r in (doc.get("data") or {}).get("result", [])}
                time.sleep(0.5)
            check(ready and got == want and want["0"] != want["1"],
                  "prometheus: gpumemtrace_live_bytes per rank, through node_exporter and Prometheus, "
                  "= each rank's ledger", (got, want))
            # The dashboard's queries, asked of this Prometheus while both ranks
            # hold their memory: each is valid PromQL with an answer.
            # Nothing grows and nothing runs out of memory here, and an
            # increase needs two scrapes: those panels may have no series yet.
            may_be_empty = {"Growth suspects", "Out-of-memory episodes", "Out-of-memory events per rank"}
            bad = []
            for title, expr in dashboard_queries():
                doc = http_json(f"http://127.0.0.1:{p_prom}/api/v1/query?query={urllib.parse.quote(expr)}") or {}
                if doc.get("status") != "success" or (
                        title not in may_be_empty and not (doc.get("data") or {}).get("result")):
                    bad.append((title, expr, doc.get("error")))
            check(not bad, "prometheus: every query of the Grafana dashboard is valid and answers", bad)
            ranks_now = http_json(f"http://127.0.0.1:{p_prom}/api/v1/query?query=" + urllib.parse.quote(
                dict(dashboard_queries())["Ranks reporting"])) or {}
            got_ranks = [r["value"][1] for r in (ranks_now.get("data") or {}).get("result", [])]
            check(got_ranks == ["2"], "prometheus: the dashboard counts the two ranks", got_ranks)
            for _, _, go in ranks:
                open(go, "w").close()
            for r in ranks:
                r[0].communicate(timeout=120)
                check(r[0].returncode == 0, "prometheus: the rank ran")
            promtool_ok([os.path.join(textdir, f) for f in os.listdir(textdir) if f.endswith(".prom")],
                        "prometheus")
        finally:
            for p in procs:
                if p.poll() is None:
                    p.send_signal(signal.SIGTERM)
            for p in procs:
                try:
                    p.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()


def test_hostile(program: str) -> None:
    with tempfile.TemporaryDirectory(prefix="gmt-metrics-") as tmp:
        out = os.path.join(tmp, "hostile.prom")
        r = subprocess.run([program, out], capture_output=True, text=True, timeout=60)
        check(r.returncode == 0 and os.path.exists(out), "hostile names: the exposition written", r.stderr)
        if os.path.exists(out):
            promtool_ok([out], "hostile names")


def main(argv: List[str]) -> int:
    if len(argv) < 2 or argv[2:] not in ([], ["--prometheus"], ["--namespaces"]):
        print(__doc__.rstrip(), file=sys.stderr)
        return 2
    launcher = os.path.abspath(argv[0])
    env = base_env()
    if argv[2:] == ["--namespaces"]:
        rc = test_namespaces(launcher, env)
        print(f"{'FAIL' if FAILURES else 'ok'}: {len(FAILURES)} failed")
        return 1 if FAILURES else rc
    test_ledger(launcher, env)
    test_oom(launcher, env)
    test_many_sites(launcher, env)
    test_launcher_option(launcher, env)
    test_bad_input(launcher, env)
    test_stale(launcher, env)
    test_hostile(os.path.abspath(argv[1]))
    if argv[2:] == ["--prometheus"]:
        test_prometheus(launcher, env)
    print(f"{'FAIL' if FAILURES else 'ok'}: {len(FAILURES)} failed")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
