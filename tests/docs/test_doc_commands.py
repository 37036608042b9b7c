#!/usr/bin/env python3
"""The command lines of README.md and docs/fleet.md, read from the documents
and run as written, on the simulated GPU: a documented line that stops
working fails here.

Every line of every code block (fenced or indented; a line ending in `\\`
joined to the next) is a command, run by bash, unless SKIPPED below names it
with the reason and where it is checked instead; a skip rule that matches no
line fails, so the list stays what the documents hold. A section's lines
(under one heading) run in order in a directory of their own, a variable
assignment alone on a line (`JOB_ID=...`) holding for the lines after it; a
`console` block (`$ command` and what it prints) runs last in its section,
and what it prints must be what the block shows, but for what varies by run
(normalise(): pids, hosts, times, paths, addresses), up to its last line
where that is `…`.

What stands in for what the documents assume is the least that makes them
run here:

- the user's `train.py` is demo/train.py, with the PyTorch test double
  (tests/frameworks/fake_torch) on PYTHONPATH; `./app` (and
  `./some-cuda-program`) is app.c, built (APP), and app.c is there for the
  line that builds it; `python` is this interpreter;
- `gpumemtrace` on PATH is the build's, and libgpumemtrace.so is on the
  loader's path (LD_LIBRARY_PATH) as an installed one is; `build/` and
  `tools/` (lines run from the source tree) are links to the build and the
  source's tools;
- the simulated GPU: its driver and NVML first on LD_LIBRARY_PATH, 2 GiB
  (GMTSIM_MEMORY), the CUDA headers where meson found them;
- `torchrun` and `srun` are the doubles in launchers/ (each says what it
  does); an `srun` line runs inside a job allocation, as in an sbatch
  script: SLURM_JOB_ID=4242 (fleet.md's example job), SLURM_NTASKS=2;
- a cluster's paths are temporary directories, made as they are there:
  /nfs/gpumemtrace, /var/lib/prometheus/node-exporter; and README's /tmp/l.

Each line must exit 0, or with its program's own out-of-memory exception (a
PyTorch program's uncaught torch.cuda.OutOfMemoryError). A traced line
(`gpumemtrace run`, `LD_PRELOAD=`) must print the tracer's out-of-memory
report and write a new out-of-memory snapshot; where a launcher started
ranks, each rank wrote one, naming its rank, and where they wrote metrics
(--metrics-dir), each rank's file carries the launcher's job id as its
job_id label (not empty, not torchrun's "none"), the name of the directory
their snapshots lie in. A `gpumemtrace view` line exits 0 and prints a
report (and writes its --html file).

usage: test_doc_commands.py SOURCE_ROOT BUILD_ROOT CUDA_ROOT APP"""

from __future__ import annotations

import difflib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Set, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
DOCS = ["README.md", os.path.join("docs", "fleet.md")]
# The job allocation an srun line runs in: fleet.md's example job, 2 tasks.
SLURM_JOB = "4242"
SLURM_TASKS = 2
# An out-of-memory snapshot's name, a rank's (".rank3") included.
OOM_SNAPSHOT = r"/gpumemtrace\.\d+\.oom\.\d+(\.rank\d+)?\.json$"

# The documented lines not run here: (pattern, why, and where they are
# checked). Every other line of the documents' code blocks runs.
SKIPPED: List[Tuple[str, str]] = [
    # The developer path, README's first block.
    (r"^\./scripts/(demo|test)\b",
     "the developer path: demo-script runs scripts/demo; scripts/test runs every suite, this one among them"),
    # Configuring, building, installing and testing the tree: this test runs
    # in a build made so; install-pkgconfig installs one.
    (r"^(CC=clang )?meson |^ninja |^TSAN_OPTIONS=\S+ .*meson test ",
     "building, installing and testing the tree itself"),
    # The wheel: its own test builds it and installs it into a fresh venv.
    (r"^python3 -m build --wheel\b|^pip install\b", "the wheel: its own test builds and installs it"),
    # Prometheus' side: tests/metrics runs node_exporter and Prometheus on
    # loopback ports and asks them the dashboard's queries.
    (r"^prometheus-node-exporter\b", "node_exporter: tests/metrics runs it"),
    (r"^(sum|max|topk|increase)\b.*gpumemtrace_\w+", "a PromQL query, not a shell command"),
]


@dataclass
class Command:
    doc: str
    line: int                # where it starts in its document
    section: str             # its heading, numbered ("5 The whole path")
    text: str                # continuation lines joined
    console: bool = False    # from a console block: expected output follows
    expected: List[str] = field(default_factory=list)


@dataclass
class Outcome:
    command: Command
    problems: List[str]
    skipped: str = ""


def code_blocks(text: str) -> List[Tuple[int, str, str, List[str]]]:
    """(first line number, section, fence language or "", lines) of each
    code block: fenced, or indented by four spaces after a blank line. The
    section is its heading, numbered in the document's order."""
    blocks: List[Tuple[int, str, str, List[str]]] = []
    section, headings = "0", 0
    fence: Optional[str] = None
    indented = False
    cur: List[str] = []
    start = 0
    prev_blank = True
    for n, line in enumerate(text.splitlines(), 1):
        if fence is not None:
            if line.strip() == "```":
                blocks.append((start, section, fence, cur))
                fence = None
            else:
                cur.append(line)
            continue
        if indented and (line.startswith("    ") or not line.strip()):
            cur.append(line[4:])
            continue
        if indented:
            blocks.append((start, section, "", cur))
            indented = False
        if line.startswith("```"):
            fence, start, cur = line[3:].strip(), n + 1, []
        elif line.startswith("    ") and prev_blank and line.strip():
            indented, start, cur = True, n, [line[4:]]
        elif line.startswith("#"):
            headings += 1
            section = f"{headings} {line.lstrip('#').strip()}"
        prev_blank = not line.strip()
    if indented:
        blocks.append((start, section, "", cur))
    return blocks


def commands_of(doc: str, text: str) -> List[Command]:
    """The commands of a document's code blocks, continuation lines joined."""
    out: List[Command] = []
    for start, section, lang, lines in code_blocks(text):
        while lines and not lines[-1].strip():
            lines.pop()
        if lang == "console":
            last: Optional[Command] = None
            for i, ln in enumerate(lines):
                if ln.startswith("$ "):
                    last = Command(doc, start + i, section, ln[2:], console=True)
                    out.append(last)
                elif last is not None:
                    last.expected.append(ln)
            continue
        pending: Optional[Command] = None
        for i, ln in enumerate(lines):
            if pending is not None:
                pending.text += "\n" + ln
            elif ln.strip():
                pending = Command(doc, start + i, section, ln)
            else:
                continue
            if not ln.endswith("\\"):
                out.append(pending)
                pending = None
        if pending is not None:
            out.append(pending)
    return out


def skip_reason(cmd: Command, used: Set[int]) -> str:
    flat = " ".join(cmd.text.replace("\\\n", " ").split())
    for i, (pattern, why) in enumerate(SKIPPED):
        if re.search(pattern, flat):
            used.add(i)
            return why
    return ""


def substituted(text: str, paths: Dict[str, str]) -> str:
    for old, new in paths.items():
        text = text.replace(old, new)
    return text


def normalise(lines: List[str]) -> List[str]:
    """What varies from run to run, made the same: pids, the host, times
    and durations, absolute paths, addresses."""
    out = []
    for ln in lines:
        ln = re.sub(r"\bpid \d+ on \S+", "pid PID on HOST", ln)
        ln = re.sub(r"\bgpumemtrace\.\d+\.", "gpumemtrace.PID.", ln)
        ln = re.sub(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(\.\d+)? UTC", "TIME", ln)
        ln = re.sub(r"\b\d+(\.\d+)? (ns|µs|us|ms|s)\b", "DURATION", ln)
        ln = re.sub(r"(?<![\w.])/[^\s:()]*/", "/PATH/", ln)
        ln = re.sub(r"\b0x[0-9a-f]{6,}\b", "0xADDR", ln)
        out.append(ln.rstrip())
    return out


def files_under(roots: List[str]) -> Set[str]:
    found: Set[str] = set()
    for root in roots:
        for d, _, names in os.walk(root):
            found.update(os.path.join(d, n) for n in names)
    return found


def read_json(path: str) -> dict:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def prom_job_ids(paths: List[str]) -> Dict[int, str]:
    """pid: job_id label, from the metrics files given."""
    jobs: Dict[int, str] = {}
    for p in paths:
        with open(p, encoding="utf-8") as f:
            m = re.search(r'\{[^}]*\bpid="(\d+)"[^}]*\bjob_id="([^"]*)"', f.read())
        if m:
            jobs[int(m.group(1))] = m.group(2)
    return jobs


def check_launches(launches: List[dict], new: Set[str], metrics: bool) -> List[str]:
    """Each rank a launcher started wrote one out-of-memory snapshot naming
    its rank; with metrics, each rank's job_id label is the launcher's job
    id and names the directory of their snapshots."""
    problems: List[str] = []
    snaps = {}
    for p in sorted(new):
        if re.search(OOM_SNAPSHOT, p):
            snaps.setdefault(read_json(p)["pid"], []).append(p)
    jobs = prom_job_ids([p for p in new if p.endswith(".prom")])
    if metrics and launches and not jobs:
        problems.append("--metrics-dir: no metrics file written")
    for launch in launches:
        dirs = set()
        for w in launch["workers"]:
            mine = snaps.get(w["pid"], [])
            if len(mine) != 1:
                problems.append(f"{launch['launcher']} rank {w['rank']} (pid {w['pid']}): "
                                f"{len(mine)} out-of-memory snapshots, not 1")
                continue
            rank = read_json(mine[0])["process"].get("rank")
            if rank != w["rank"]:
                problems.append(f"{launch['launcher']} rank {w['rank']}: its snapshot says rank {rank}")
            dirs.add(os.path.dirname(mine[0]))
            if jobs:
                label = jobs.get(w["pid"])
                if label != launch["job"] or label in ("", "none"):
                    problems.append(f"{launch['launcher']} rank {w['rank']}: job_id label {label!r}, "
                                    f"the launcher's job is {launch['job']!r}")
        if len(dirs) > 1:
            problems.append(f"{launch['launcher']}: the ranks' snapshots lie in {sorted(dirs)}, not one directory")
        elif jobs and dirs and os.path.basename(next(iter(dirs))) != launch["job"]:
            problems.append(f"{launch['launcher']}: the snapshots lie in {next(iter(dirs))}, "
                            f"not in a directory named by the job id {launch['job']!r}")
    return problems


@dataclass
class Section:
    """Where one section's lines run, and the shell variables they set."""
    cwd: str
    env: Dict[str, str]


def run_command(cmd: Command, sec: Section, paths: Dict[str, str], watch: List[str],
                launch_log: str) -> List[str]:
    """Runs one documented line in its section; what is wrong with its run."""
    text = substituted(cmd.text, paths)
    flat = " ".join(text.replace("\\\n", " ").split())
    env = dict(sec.env)
    if flat.startswith("srun "):
        env.update(SLURM_JOB_ID=SLURM_JOB, SLURM_NTASKS=str(SLURM_TASKS))
    assign = re.match(r"^([A-Za-z_]\w*)=\S*\s*(#.*)?$", flat)
    # A variable set alone on its line holds for the section's later lines.
    script = f'{text}\nprintf "%s" "${assign.group(1)}"' if assign else text
    before = files_under(watch)
    launched = os.path.getsize(launch_log) if os.path.exists(launch_log) else 0
    r = subprocess.run(["bash", "-c", script], cwd=sec.cwd, env=env, stdin=subprocess.DEVNULL,
                       capture_output=True, text=True, timeout=600)
    if assign:
        sec.env[assign.group(1)] = r.stdout
    new = files_under(watch) - before
    out = r.stdout + r.stderr
    problems: List[str] = []
    if r.returncode != 0 and "OutOfMemoryError" not in out:
        problems.append(f"exit status {r.returncode}")
    if cmd.console:
        want, got = normalise(cmd.expected), normalise(r.stdout.splitlines())
        if want and want[-1] == "…":
            want, got = want[:-1], got[:len(want) - 1]
        if want != got:
            diff = "\n".join(difflib.unified_diff(want, got, "the document", "the tool now", lineterm=""))
            problems.append(f"what it prints is not what the document shows (normalised):\n{diff}")
    if re.search(r"\bgpumemtrace run\b|\bLD_PRELOAD=", flat):
        if "gpumemtrace: out of memory:" not in r.stderr:
            problems.append("no out-of-memory report from the tracer on stderr")
        if not any(re.search(OOM_SNAPSHOT, p) for p in new):
            problems.append("no new out-of-memory snapshot")
    if os.path.exists(launch_log):
        with open(launch_log, encoding="utf-8") as f:
            f.seek(launched)
            launches = [json.loads(ln) for ln in f if ln.strip()]
        problems += check_launches(launches, new, "--metrics-dir" in flat)
    if re.search(r"\bgpumemtrace view\b", flat):
        html = re.search(r"--html (\S+)", flat)
        # With --html the page is the answer (the summary only with --summary).
        if not html and not r.stdout.strip():
            problems.append("the viewer printed nothing")
        if html and not os.path.isfile(os.path.join(sec.cwd, html.group(1))):
            problems.append(f"no HTML report {html.group(1)}")
    if problems:
        problems.append("its output ends:\n" + out[-1500:])
    return problems


def base_env(build: str, launchers: str, fakebin: str, launch_log: str) -> Dict[str, str]:
    drop = ("GPUMEMTRACE_", "GMTSIM_", "SLURM_", "TORCHELASTIC_")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(drop) and k not in ("LD_PRELOAD", "PYTHONPATH", "COLUMNS", "LINES", "JOB_ID")}
    fakes = os.path.join(os.path.dirname(HERE), "frameworks")
    env.update(
        PATH=os.pathsep.join([fakebin, launchers, env.get("PATH", "")]),
        LD_LIBRARY_PATH=os.pathsep.join(os.path.join(build, d) for d in ("sim/driver", "sim/nvml", "src")),
        PYTHONPATH=os.pathsep.join(os.path.join(fakes, d, "site-packages") for d in ("fake_torch", "fake_common")),
        PYTHONDONTWRITEBYTECODE="1",
        GMTSIM_MEMORY="2G",
        GMT_TEST_LAUNCH_LOG=launch_log,
    )
    return env


def main() -> int:
    source, build, cuda_root, app = sys.argv[1:5]
    app = os.path.abspath(app)
    outcomes: List[Outcome] = []
    used: Set[int] = set()
    with tempfile.TemporaryDirectory(prefix="gmt-docs-") as tmp:
        fakebin = os.path.join(tmp, "bin")
        os.makedirs(fakebin)
        os.symlink(sys.executable, os.path.join(fakebin, "python"))
        os.symlink(os.path.join(build, "src", "cli", "gpumemtrace"), os.path.join(fakebin, "gpumemtrace"))
        launch_log = os.path.join(tmp, "launches.jsonl")
        env = base_env(build, os.path.join(HERE, "launchers"), fakebin, launch_log)
        cluster = os.path.join(tmp, "cluster")
        paths = {"/nfs/gpumemtrace": os.path.join(cluster, "nfs", "gpumemtrace"),
                 "/var/lib/prometheus/node-exporter": os.path.join(cluster, "node-exporter"),
                 "./some-cuda-program": "./app"}
        if cuda_root != "/usr/local/cuda":
            paths["/usr/local/cuda/"] = cuda_root.rstrip("/") + "/"
        # The cluster's shared snapshot directory and node_exporter's
        # textfile directory exist there; `--dir` makes only the last level.
        for d in (paths["/nfs/gpumemtrace"], paths["/var/lib/prometheus/node-exporter"]):
            os.makedirs(d)
        sections: Dict[Tuple[str, str], Section] = {}
        cmds: List[Command] = []
        for doc in DOCS:
            with open(os.path.join(source, doc), encoding="utf-8") as f:
                cmds += commands_of(doc, f.read())
        # A console block shows what its commands print after the section's
        # other lines ran: it runs last in its section.
        order = sorted(cmds, key=lambda c: (DOCS.index(c.doc), int(c.section.split()[0]), c.console, c.line))
        for cmd in order:
            why = skip_reason(cmd, used)
            if why:
                outcomes.append(Outcome(cmd, [], why))
                continue
            key = (cmd.doc, cmd.section)
            if key not in sections:
                slug = re.sub(r"\W+", "-", f"{os.path.basename(cmd.doc)} {cmd.section}").strip("-")[:48]
                cwd = os.path.join(tmp, f"{len(sections):02d}-{slug}")
                os.makedirs(cwd)
                shutil.copy(os.path.join(source, "demo", "train.py"), cwd)
                shutil.copy(os.path.join(HERE, "app.c"), cwd)
                shutil.copy(app, os.path.join(cwd, "app"))
                os.symlink(build, os.path.join(cwd, "build"))
                os.symlink(os.path.join(source, "tools"), os.path.join(cwd, "tools"))
                sections[key] = Section(cwd, dict(env))
            sec = sections[key]
            local = dict(paths, **{"/tmp/l": os.path.join(sec.cwd, "l")})
            outcomes.append(Outcome(cmd, run_command(cmd, sec, local, [sec.cwd, cluster], launch_log)))
    failed = 0
    for o in outcomes:
        where = f"{o.command.doc}:{o.command.line}"
        first = o.command.text.splitlines()[0]
        if o.skipped:
            print(f"skip {where}: {first}  ({o.skipped})")
        elif o.problems:
            failed += 1
            print(f"FAIL {where}: {o.command.text}")
            for p in o.problems:
                print("     " + p.replace("\n", "\n     "))
        else:
            print(f"ok   {where}: {first}")
    for i, (pattern, _) in enumerate(SKIPPED):
        if i not in used:
            failed += 1
            print(f"FAIL the skip rule {pattern!r} matches no documented line: remove it")
    ran = sum(1 for o in outcomes if not o.skipped)
    print(f"{ran} documented lines run, {failed} failed, {len(outcomes) - ran} skipped")
    return 1 if failed or ran == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
