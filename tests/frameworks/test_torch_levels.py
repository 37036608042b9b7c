#!/usr/bin/env python3
"""Tensors, not segments (docs/guide.md, "Two levels of memory"): what a
PyTorch user leaks or runs out of, on the simulated GPU with the PyTorch
double (fake_torch/) under `gpumemtrace run`, one program per scenario the
memory articles describe. Each asserts the primary verdict, the program's
line it names and the remedy offered, and that the terminal summary and the
HTML report show the tensor site first:

- loss: each step's loss kept in a list (24 MiB a step), gradients
  allocated and dropped every step, 2 GiB: growth at the loss line, 24 MiB a
  step, a remedy to stop keeping it (not expandable segments alone), the
  allocator's fragmentation beside it with what would be free without the
  loss;
- batch: a batch too large, nothing kept across steps: exhaustion, a
  smaller batch and checkpointing with the step's own tensors' bytes (what
  the step allocated and still holds) against what earlier steps left;
- weights: the model (768 MiB made before the first step) is most of the
  device: exhaustion, the weights' line named as the model's weights and
  optimizer state, mixed precision offered as a condition;
- fragmentation: free bytes inside the segments in pieces, no growth:
  allocator_fragmentation, expandable segments; the largest live tensor's
  line first, not the line of the 600 MiB tensor freed long ago that made
  the segment;
- eval: evaluation without torch.no_grad(), each output keeping the
  activations of a backward that never comes: growth at the forward's line,
  the remedy torch.no_grad();
- others: another process holds 1.25 GiB of the 2 GiB device, on which the
  loop alone fits: other_processes.

And the level accounting: tensor bytes + free inside the segments + the
memory that is not PyTorch's (a library's own driver allocation) = the
device's live bytes = the simulated driver's ledger, at the out-of-memory
and at exit; and gpumemtrace.dump(): PyTorch hands over its tensors for the
snapshot, and the diff of two dumps says which tensor line grew; at exit
the leak check's suspects are the tensors' sites. Every snapshot is checked
against docs/snapshot.schema.json.

Usage: test_torch_levels.py LAUNCHER SOURCE_ROOT NVML_LIBRARY_PATH"""

from __future__ import annotations

import glob
import json
import os
import pickle
import re
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from typing import Any, Dict, List, Optional, Tuple

import test_torch_double as td
from test_torch_double import check

MIB = 1 << 20

# The loss line: each step keeps its loss (in PyTorch, with its graph).
LOSS = r'''
import torch
MIB = 1 << 20
weights = torch.empty(256 * MIB)
opt = torch.optim.Optimizer([weights])
losses = []


def forward():
    return [torch.empty(8 * MIB) for _ in range(4)]


def train_step():
    acts = forward()
    grads = [torch.empty(40 * MIB) for _ in range(2)]
    del grads
    loss = torch.empty(24 * MIB)  # LOSS
    losses.append(loss)
    del acts
    opt.step()


try:
    while True:
        train_step()
except torch.cuda.OutOfMemoryError:
    print("OOM", len(losses))
'''

# A batch too large: 8 activations of 32 MiB a step fit, 64 do not.
BATCH = r'''
import torch
MIB = 1 << 20
weights = torch.empty(256 * MIB)
opt = torch.optim.Optimizer([weights])


def train_step(batch):
    acts = []
    for _ in range(batch):
        acts.append(torch.empty(32 * MIB))  # ACTS
    del acts
    opt.step()


for _ in range(8):
    train_step(8)
try:
    train_step(64)
except torch.cuda.OutOfMemoryError:
    print("OOM", torch.cuda.memory_allocated())
'''

# The model is most of the 1 GiB device: 768 MiB of weights made before the
# first step, each step's 16 MiB activations freed at its end; a batch of 24
# does not fit beside the weights.
WEIGHTS = r'''
import torch
MIB = 1 << 20
weights = torch.empty(768 * MIB)  # WEIGHTS
opt = torch.optim.Optimizer([weights])


def train_step(batch):
    acts = []
    for _ in range(batch):
        acts.append(torch.empty(16 * MIB))
    del acts
    opt.step()


for _ in range(4):
    train_step(8)
try:
    train_step(24)
except torch.cuda.OutOfMemoryError:
    print("OOM", torch.cuda.memory_allocated())
'''

# Fragmentation inside the allocator: a 600 MiB segment cut into 64 MiB
# blocks, every other one freed, the rest of the device taken, 128 MiB asked.
FRAGMENTED = r'''
import torch
MIB = 1 << 20
t = torch.empty(600 * MIB)  # OLD
del t
blocks = [torch.empty(64 * MIB) for _ in range(8)]  # BLOCKS
del blocks[::2]
blocker = torch.empty(400 * MIB)  # BLOCKER
try:
    torch.empty(128 * MIB)
except torch.cuda.OutOfMemoryError:
    print("OOM")
'''

# Evaluation without torch.no_grad(): each output keeps what its backward
# would need (the double's stand-in for autograd's saved tensors).
EVAL = r'''
import torch
MIB = 1 << 20
weights = torch.empty(128 * MIB)


def forward(x):
    h = torch.empty(24 * MIB)  # FORWARD
    scratch = torch.empty(4 * MIB)
    del scratch
    out = torch.empty(1 * MIB)
    out.saved_for_backward = (x, h)
    return out


outputs = []
try:
    for batch in range(1000):
        x = torch.empty(2 * MIB)
        outputs.append(forward(x))
        del x
except torch.cuda.OutOfMemoryError:
    print("OOM", len(outputs))
'''

# A training loop that fits the device alone, beside another process.
OTHERS = r'''
import torch
MIB = 1 << 20
weights = torch.empty(256 * MIB)
opt = torch.optim.Optimizer([weights])
try:
    for step in range(100):
        acts = [torch.empty(64 * MIB) for _ in range(10)]
        del acts
        opt.step()
except torch.cuda.OutOfMemoryError:
    print("OOM")
'''

# The level accounting: tensors, a library's own driver allocation (a
# workspace), a failure, then the end with the tensors still held.
ACCOUNTING = r'''
import torch
from gmt_sim_driver import Driver
MIB = 1 << 20
kept = [torch.empty(24 * MIB) for _ in range(4)] + [torch.empty(300 * 1024)]
freed = [torch.empty(40 * MIB) for _ in range(3)]
del freed[1]
workspace = Driver().malloc(12 * MIB)
try:
    torch.empty(1 << 40)
except torch.cuda.OutOfMemoryError:
    print("OOM", torch.cuda.memory_allocated(), torch.cuda.memory_reserved(), torch.cuda.max_memory_allocated())
'''


# Two dumps of a training loop that keeps each step's loss: the diff of
# the two says the loss line grew.
DUMPS = r'''
import gpumemtrace
import torch
MIB = 1 << 20
weights = torch.empty(64 * MIB)
opt = torch.optim.Optimizer([weights])
losses = []
for step in range(1, 21):
    acts = [torch.empty(8 * MIB) for _ in range(2)]
    losses.append(torch.empty(4 * MIB))  # LOSS
    del acts
    opt.step()
    if step in (5, 20):
        print("DUMP", gpumemtrace.dump())
'''


def line_of(program: str, marker: str) -> int:
    """The line of program (as run: a file of its text) holding marker."""
    for i, text in enumerate(program.split("\n")):
        if marker in text:
            return i + 1
    raise AssertionError(f"no line holds {marker!r}")


def run_oom(launcher: str, env: Dict[str, str], tmp: str, text: str, name: str, what: str,
            on: str = "oom") -> Optional[Tuple[subprocess.CompletedProcess, Dict[str, Any], str]]:
    """The program's run and its one oom snapshot (and its path), or None
    (a failure noted)."""
    r = td.run(launcher, env, tmp, text, name, on=on)
    ooms = glob.glob(os.path.join(tmp, "gpumemtrace.*.oom.*.json"))
    check(r.returncode == 0 and "OOM" in r.stdout and len(ooms) == 1, f"{what}: one oom snapshot",
          r.stdout + r.stderr[-800:])
    if len(ooms) != 1:
        return None
    with open(ooms[0], encoding="utf-8") as f:
        return r, json.load(f), ooms[0]


def label_of(doc: Dict[str, Any], sid: int) -> str:
    st = next((s for s in doc["stacks"] if s["id"] == sid), None)
    return st["site"]["label"] if st else ""


def first_site_in_views(launcher: str, env: Dict[str, str], tmp: str, path: str, label: str, what: str) -> None:
    """The terminal summary's first top site and the HTML report's first
    site (the level it shows first) are the tensor site `label`."""
    v = subprocess.run([launcher, "view", "--width", "200", "--summary", "--html", os.path.join(tmp, "r.html"), path],
                       env=env, capture_output=True, text=True, timeout=120)
    top = v.stdout.split("Top sites by live bytes", 1)[-1]
    first = re.search(r"^\s+1\. .*\n\s+(.*)$", top, re.M)
    check(v.returncode == 0 and first is not None and first.group(1).strip() == label and " tensors " in top,
          f"{what}: the terminal's first top site is the tensor site {label}",
          first.group(0) if first else v.stdout[-1500:] + v.stderr)
    data: Dict[str, Any] = {}
    try:
        with open(os.path.join(tmp, "r.html"), encoding="utf-8") as f:
            page = f.read()
        block = page.split('<script type="application/json" id="gmt-data">', 1)[1].split("</script>", 1)[0]
        data = json.loads(block)
    except (OSError, IndexError, ValueError):
        pass
    d = (data.get("docs") or [{}])[0]
    sites = (d.get("tensors") or {}).get("sites") or {}
    titles = dict(zip(d.get("stacks", {}).get("id", []), d.get("stacks", {}).get("title", [])))
    best = max(range(len(sites.get("live", []))), key=lambda i: sites["live"][i], default=None)
    check(best is not None and titles.get(sites["stack"][best], "").startswith(label) and 'id="levels"' in page,
          f"{what}: the HTML report shows the tensor level first, its largest site {label}",
          titles.get(sites["stack"][best]) if best is not None else list(d))


def exports_at_tensor_level(launcher: str, env: Dict[str, str], tmp: str, path: str, doc: Dict[str, Any],
                            what: str) -> None:
    """speedscope: the tensors' profile first, its heaviest stack a tensor
    site's, the driver's profile second; Perfetto: the tensor bytes' counter
    ends at the tensors' bytes."""
    sp, pf = os.path.join(tmp, "s.json"), os.path.join(tmp, "p.json")
    v = subprocess.run([launcher, "view", "-q", "--speedscope", sp, "--perfetto", pf, path], env=env,
                       capture_output=True, text=True, timeout=120)
    tensor_bytes = sum(a["size"] for a in doc["tensors"]["allocations"])
    profiles, counter = [], []
    try:
        with open(sp, encoding="utf-8") as f:
            profiles = json.load(f)["profiles"]
        with open(pf, encoding="utf-8") as f:
            counter = [e["args"]["tensors"] for e in json.load(f)["traceEvents"]
                       if e["ph"] == "C" and e["name"] == "GPU 0 tensor bytes (torch)"]
    except (OSError, ValueError, KeyError):
        pass
    check(v.returncode == 0 and [p["name"].rsplit("(", 1)[-1] for p in profiles] ==
          ["tensors)", "driver's allocations)"] and profiles[0]["endValue"] == tensor_bytes,
          f"{what}: speedscope has the tensors' profile first, then the driver's",
          [(p["name"], p["endValue"]) for p in profiles] + [v.stderr])
    check(counter[-1:] == [tensor_bytes], f"{what}: Perfetto's tensor counter ends at the tensors' bytes",
          counter[-3:])


def test_loss(launcher: str, source: str, env: Dict[str, str]) -> None:
    with tempfile.TemporaryDirectory(prefix="gmt-levels-") as tmp:
        got = run_oom(launcher, dict(env, GMTSIM_MEMORY="2G"), tmp, LOSS, "loss.py", "loss")
        if got is None:
            return
        r, doc, path = got
        dg = doc.get("diagnosis") or {}
        nums = dg.get("numbers") or {}
        label = f"train_step (loss.py:{line_of(LOSS, '# LOSS')})"
        check(dg.get("verdict") == "growth", "loss: primary verdict growth", (dg.get("verdict"), dg.get("summary")))
        check(label_of(doc, nums.get("growth_top_stack", 0)) == label, "loss: the growing site is the loss line",
              label_of(doc, nums.get("growth_top_stack", 0)))
        steps = nums.get("growth_top_steps") or 0
        check(steps >= 4 and nums.get("growth_top_step_bytes") == steps * 24 * MIB,
              "loss: 24 MiB a step over whole steps", (nums.get("growth_top_step_bytes"), steps))
        rem = dg.get("remedies") or []
        names = [x["name"] for x in rem]
        check(names[:1] == ["free_growing_site"] and label_of(doc, rem[0]["stack"]) == label and
              "loss.item()" in rem[0]["text"] and "24.0 MiB a step" in rem[0]["text"],
              "loss: the remedy stops keeping the loss, at its line, with its bytes a step",
              [(x["name"], x["text"]) for x in rem])
        check(names != ["expandable_segments"], "loss: expandable segments is not the only remedy", names)
        beside = next((v for v in dg.get("verdicts") or [] if v["name"] == "allocator_fragmentation"), {})
        check(f"without what {label} kept" in beside.get("detail", ""),
              "loss: the allocator's fragmentation beside it, with what would be free without the loss",
              beside.get("detail"))
        check(f"verdict: growth" in r.stderr and label in r.stderr, "loss: the report names the verdict and the line",
              r.stderr[-1200:])
        # The driver's level still tells the segments: the gradients' line
        # made them grow.
        grads = f"<listcomp> (loss.py:{line_of(LOSS, 'grads = [')})"
        seg_sites = [label_of(doc, s["stack"]) for s in doc["sites"] if s["growing"]]
        check(any(x.startswith(("train_step.<locals>.<listcomp>", grads)) for x in seg_sites),
              "loss: at the driver's level the gradients' segments grew", seg_sites)
        first_site_in_views(launcher, env, tmp, path, label, "loss")
        exports_at_tensor_level(launcher, env, tmp, path, doc, "loss")
        td.schema_ok(source, [path], "loss")


def test_batch(launcher: str, source: str, env: Dict[str, str]) -> None:
    with tempfile.TemporaryDirectory(prefix="gmt-levels-") as tmp:
        got = run_oom(launcher, env, tmp, BATCH, "batch.py", "batch")
        if got is None:
            return
        r, doc, path = got
        m = re.search(r"^OOM (\d+)$", r.stdout, re.M)
        allocated = int(m.group(1)) if m else -1
        dg = doc.get("diagnosis") or {}
        nums = dg.get("numbers") or {}
        label = f"train_step (batch.py:{line_of(BATCH, '# ACTS')})"
        check(dg.get("verdict") == "exhaustion", "batch: primary verdict exhaustion",
              (dg.get("verdict"), dg.get("summary")))
        step_bytes = allocated - 256 * MIB
        check((nums.get("step_live_bytes"), nums.get("step_live_source")) == (step_bytes, "tensors"),
              "batch: the step's own tensors: what it allocated and still holds",
              (nums.get("step_live_bytes"), nums.get("step_live_source"), step_bytes))
        check(f"step 8's own hold {step_bytes >> 20} MiB and earlier steps left 256 MiB" in
              (dg.get("verdicts") or [{}])[0].get("detail", ""),
              "batch: the verdict separates the step's tensors from what earlier steps left",
              (dg.get("verdicts") or [{}])[0].get("detail"))
        names = [x["name"] for x in dg.get("remedies") or []]
        batch = next((x for x in dg.get("remedies") or [] if x["name"] == "smaller_batch"), {})
        check(names[:2] == ["smaller_batch", "checkpointing"] and f"still live is {step_bytes >> 20} MiB" in
              batch.get("text", ""), "batch: a smaller batch and checkpointing, with the step's bytes",
              (names, batch.get("text")))
        check(not any(v["name"] == "growth" for v in dg.get("verdicts") or []),
              "batch: no growth (a step's own tensors rise and fall within it)", dg.get("verdicts"))
        first_site_in_views(launcher, env, tmp, path, label, "batch")
        td.schema_ok(source, [path], "batch")


def test_weights(launcher: str, source: str, env: Dict[str, str]) -> None:
    """Exhaustion where the model's weights, made before the first step,
    are the largest tensor site: the remedy speaks of weights and optimizer
    state (not "keep less of what it allocates"), and mixed precision is
    offered as a condition where half the step's tensors cover the
    shortfall."""
    with tempfile.TemporaryDirectory(prefix="gmt-levels-") as tmp:
        got = run_oom(launcher, env, tmp, WEIGHTS, "weights.py", "weights")
        if got is None:
            return
        _, doc, path = got
        dg = doc.get("diagnosis") or {}
        nums = dg.get("numbers") or {}
        rem = {x["name"]: x for x in dg.get("remedies") or []}
        label = f"<module> (weights.py:{line_of(WEIGHTS, '# WEIGHTS')})"
        check(dg.get("verdict") == "exhaustion", "weights: primary verdict exhaustion",
              (dg.get("verdict"), dg.get("summary")))
        check(nums.get("largest_stack_bytes") == 768 * MIB and nums.get("largest_stack_before_steps") is True and
              label_of(doc, nums.get("largest_stack", 0)) == label,
              "weights: the largest site is the weights' line, all of it made before the first step",
              (nums.get("largest_stack_bytes"), nums.get("largest_stack_before_steps"),
               label_of(doc, nums.get("largest_stack", 0))))
        shrink = rem.get("shrink_largest_site", {}).get("text", "")
        check("the model's weights, buffers or optimizer state: 768 MiB" in shrink and "keep less" not in shrink,
              "weights: the largest site's remedy speaks of the model's weights and optimizer state", shrink)
        mixed = rem.get("mixed_precision", {}).get("text", "")
        step = nums.get("step_live_bytes") or 0
        check(mixed.startswith("mixed precision, if the step runs in float32") and
              f"half of the {step >> 20} MiB allocated since step 4" in mixed,
              "weights: mixed precision, as a condition, with half the step's tensors", (step, mixed))
        td.schema_ok(source, [path], "weights")


def test_fragmentation(launcher: str, source: str, env: Dict[str, str]) -> None:
    with tempfile.TemporaryDirectory(prefix="gmt-levels-") as tmp:
        got = run_oom(launcher, env, tmp, FRAGMENTED, "frag.py", "fragmentation")
        if got is None:
            return
        r, doc, path = got
        dg = doc.get("diagnosis") or {}
        check(dg.get("verdict") == "allocator_fragmentation" and
              [x["name"] for x in dg.get("remedies") or []] == ["expandable_segments"] and
              not any(v["name"] == "growth" for v in dg.get("verdicts") or []),
              "fragmentation: allocator_fragmentation, expandable segments, no growth",
              (dg.get("verdict"), dg.get("remedies"), dg.get("verdicts")))
        blocker = f"<module> (frag.py:{line_of(FRAGMENTED, '# BLOCKER')})"
        first_site_in_views(launcher, env, tmp, path, blocker, "fragmentation")
        # The driver's level names the freed tensor's line: its segment.
        old = f"<module> (frag.py:{line_of(FRAGMENTED, '# OLD')})"
        seg = max(doc["allocations"], key=lambda a: a["size"])
        check(seg.get("framework_segment") is True and label_of(doc, seg["stack"]) == old,
              "fragmentation: the largest segment is the 600 MiB tensor's, long freed", label_of(doc, seg["stack"]))
        td.schema_ok(source, [path], "fragmentation")


def test_eval(launcher: str, source: str, env: Dict[str, str]) -> None:
    with tempfile.TemporaryDirectory(prefix="gmt-levels-") as tmp:
        got = run_oom(launcher, env, tmp, EVAL, "eval.py", "eval")
        if got is None:
            return
        r, doc, path = got
        dg = doc.get("diagnosis") or {}
        nums = dg.get("numbers") or {}
        label = f"forward (eval.py:{line_of(EVAL, '# FORWARD')})"
        check(dg.get("verdict") == "growth", "eval: primary verdict growth", (dg.get("verdict"), dg.get("summary")))
        check(label_of(doc, nums.get("growth_top_stack", 0)).startswith(label),
              "eval: the growing site is the forward's line", label_of(doc, nums.get("growth_top_stack", 0)))
        rem = next((x for x in dg.get("remedies") or [] if x["name"] == "free_growing_site"), {})
        check("wrap it in `with torch.no_grad():`" in rem.get("text", ""),
              "eval: the remedy is torch.no_grad() for evaluation", rem.get("text"))
        td.schema_ok(source, [path], "eval")


def test_others(launcher: str, source: str, env: Dict[str, str], nvml: str) -> None:
    with tempfile.TemporaryDirectory(prefix="gmt-levels-") as tmp:
        e = dict(env, GMTSIM_MEMORY="2G", GMTSIM_OTHER_PROCESSES="1280M", LD_LIBRARY_PATH=nvml)
        got = run_oom(launcher, e, tmp, OTHERS, "others.py", "others")
        if got is None:
            return
        r, doc, path = got
        dg = doc.get("diagnosis") or {}
        check(dg.get("verdict") == "other_processes" and
              "other_device" in [x["name"] for x in dg.get("remedies") or []],
              "others: other_processes, and a device they do not use", (dg.get("verdict"), dg.get("remedies")))
        td.schema_ok(source, [path], "others")


def ledger_bytes(path: str) -> Dict[int, int]:
    with open(path, encoding="utf-8") as f:
        led = json.load(f)
    out: Dict[int, int] = {}
    for a in led["live"]:
        if a["device"] >= 0:
            out[a["device"]] = out.get(a["device"], 0) + a["size"]
    return out


def test_accounting(launcher: str, source: str, env: Dict[str, str]) -> None:
    """tensor + cached + other = live = the ledger's, at the out-of-memory
    and at exit; tensor = memory_allocated(), tensor + cached = memory_reserved()."""
    with tempfile.TemporaryDirectory(prefix="gmt-levels-") as tmp:
        led_dir = os.path.join(tmp, "ledger")
        os.mkdir(led_dir)
        got = run_oom(launcher, dict(env, GMTSIM_LEDGER_DIR=led_dir), tmp, ACCOUNTING, "acct.py", "accounting",
                      on="oom,exit")
        if got is None:
            return
        r, oom, path = got
        m = re.search(r"^OOM (\d+) (\d+) (\d+)$", r.stdout, re.M)
        allocated, reserved, peak = (int(m.group(1)), int(m.group(2)), int(m.group(3))) if m else (-1, -1, -1)
        exits = glob.glob(os.path.join(tmp, "gpumemtrace.*.exit.*.json"))
        docs = [("oom", oom, sorted(glob.glob(os.path.join(led_dir, "ledger.*.oom.*.json")))[-1:])]
        if len(exits) == 1:
            with open(exits[0], encoding="utf-8") as f:
                docs.append(("exit", json.load(f), glob.glob(os.path.join(led_dir, "ledger.*.exit.json"))))
        check(len(docs) == 2, "accounting: an exit snapshot too", exits)
        for when, doc, ledgers in docs:
            t = doc.get("tensors") or {}
            dev = next((x for x in t.get("devices") or [] if x["device"] == 0), {})
            live = next((x["live_bytes"] for x in doc["devices"] if x["index"] == 0), -1)
            led = ledger_bytes(ledgers[0]).get(0, -2) if ledgers else -3
            total = dev.get("tensor_bytes", 0) + dev.get("cached_bytes", 0) + dev.get("other_bytes", 0)
            check(total == dev.get("live_bytes") == live == led,
                  f"accounting ({when}): tensors + free inside segments + not PyTorch's = live = the ledger",
                  (dev, live, led))
            check((dev.get("tensor_bytes"), dev.get("tensor_bytes", 0) + dev.get("cached_bytes", 0)) ==
                  (allocated, reserved), f"accounting ({when}): tensors = memory_allocated(), with the cache "
                  "memory_reserved()", (dev, allocated, reserved))
            check(dev.get("other_bytes") == 12 * MIB, f"accounting ({when}): the workspace is not PyTorch's", dev)
            fw_dev = next((x for x in (doc.get("framework") or {}).get("devices") or [] if x["device"] == 0), {})
            check(fw_dev.get("peak_allocated_bytes") == peak,
                  f"accounting ({when}): PyTorch's peak allocated handed over (max_memory_allocated())", fw_dev)
            check(sum(a["size"] for a in t.get("allocations") or []) == allocated and
                  len(t.get("allocations") or []) == 7, f"accounting ({when}): the live tensors listed", len(
                      t.get("allocations") or []))
        td.schema_ok(source, [path] + exits, "accounting")


def test_dumps(launcher: str, source: str, env: Dict[str, str]) -> None:
    """gpumemtrace.dump() from Python: PyTorch hands over its state for the
    snapshot, and a diff of two dumps says which tensors grew."""
    with tempfile.TemporaryDirectory(prefix="gmt-levels-") as tmp:
        r = td.run(launcher, env, tmp, DUMPS, "dumps.py", on="oom")
        paths = re.findall(r"^DUMP (\S+)$", r.stdout, re.M)
        docs = []
        for p in paths:
            with open(p, encoding="utf-8") as f:
                docs.append(json.load(f))
        check(r.returncode == 0 and len(docs) == 2 and all(d["reason"] == "api" and d.get("tensors") for d in docs),
              "dumps: two api snapshots, each with PyTorch's tensors", r.stdout + r.stderr[-600:])
        if len(docs) != 2:
            return
        counts = [len(d["tensors"]["allocations"]) for d in docs]
        check(counts == [1 + 5, 1 + 20], "dumps: the tensors live at each dump (the weights and the losses)", counts)
        label = f"<module> (dumps.py:{line_of(DUMPS, '# LOSS')})"
        v = subprocess.run([launcher, "view", "--width", "200", "--diff", *paths], env=env, capture_output=True,
                           text=True, timeout=120)
        grew = v.stdout.split("Grew", 1)[-1].split("\n")
        first = next((x for x in grew[1:] if x.strip()), "")
        check(v.returncode == 0 and "+60.0 MiB" in first and label in first and "tensors" in v.stdout,
              "dumps: the diff says the loss line grew by 15 steps of 4 MiB", v.stdout[-1500:] + v.stderr)
        td.schema_ok(source, paths, "dumps")


def test_exit_suspects(launcher: str, source: str, env: Dict[str, str]) -> None:
    """At exit, the leak check's suspects are the tensors' sites: the loss
    line's tensor stack, not the driver's segments that grew for it."""
    with tempfile.TemporaryDirectory(prefix="gmt-levels-") as tmp:
        r = td.run(launcher, env, tmp, DUMPS.replace("print(\"DUMP\", gpumemtrace.dump())", "pass"), "exit.py",
                   on="exit")
        exits, doc = [], {}
        for p in glob.glob(os.path.join(tmp, "gpumemtrace.*.exit.*.json")):
            with open(p, encoding="utf-8") as f:
                d = json.load(f)
            if d.get("tensors"):
                exits, doc = [p], d
        base = (doc.get("tensors") or {}).get("stack_base", 1 << 62)
        suspects = (doc.get("leaks") or {}).get("suspects") or []
        label = f"<module> (exit.py:{line_of(DUMPS, '# LOSS')})"
        check(r.returncode == 0 and [label_of(doc, x["stack"]) for x in suspects] == [label] and
              all(x["stack"] > base for x in suspects),
              "exit: the leak suspect is the loss line's tensor site, and only it",
              [(x["stack"], label_of(doc, x["stack"])) for x in suspects] or r.stderr[-600:])
        td.schema_ok(source, exits, "exit")


# The gate at the tensor level: STEPS steps, each keeping its loss when KEEP
# is 1; the weights live to the end either way.
GATE = r'''
import os
import torch
MIB = 1 << 20
weights = torch.empty(64 * MIB)
opt = torch.optim.Optimizer([weights])
losses = []
for step in range(int(os.environ["STEPS"])):
    acts = [torch.empty(8 * MIB) for _ in range(2)]
    loss = torch.empty(4 * MIB)  # LOSS
    if os.environ["KEEP"] == "1":
        losses.append(loss)
    del acts, loss
    opt.step()
print("DONE", torch.cuda.max_memory_allocated())
'''


def gate(launcher: str, env: Dict[str, str], tmp: str, name: str, steps: int, keep: bool,
         *options: str) -> Tuple[subprocess.CompletedProcess, str]:
    """`gpumemtrace check OPTIONS -- python gate.py` in tmp/name; the run and
    its Python process's exit snapshot (the one with the largest peak)."""
    script = os.path.join(tmp, "gate.py")
    with open(script, "w", encoding="utf-8") as f:
        f.write(GATE)
    d = os.path.join(tmp, name)
    r = subprocess.run([launcher, "check", "--dir", d, *options, "--", sys.executable, script],
                       env=dict(env, STEPS=str(steps), KEEP="1" if keep else "0"), cwd=tmp,
                       capture_output=True, text=True, timeout=300)
    best, peak = "", -1
    for p in glob.glob(os.path.join(d, "gpumemtrace.*.exit.*.json")):
        with open(p, encoding="utf-8") as f:
            n = json.load(f)["summary"]["peak_bytes"]
        if n > peak:
            best, peak = p, n
    return r, best


def test_gate(launcher: str, source: str, env: Dict[str, str]) -> None:
    """gpumemtrace check --level tensors: the leak a training loop keeps
    fails it at the loss's line, tensors a program holds to its end do not,
    and the peak and growth limits read the framework's peak of tensors."""
    label = f"<module> (gate.py:{line_of(GATE, '# LOSS')})"
    with tempfile.TemporaryDirectory(prefix="gmt-levels-") as tmp:
        r, _ = gate(launcher, env, tmp, "kept", 20, True, "--level", "tensors")
        leaks = [x for x in r.stderr.splitlines() if "check: leak:" in x]
        check(r.returncode == 23 and len(leaks) == 1 and
              f"leak: {20 * 4 * MIB} bytes (80.0 MiB) in 20 tensors (growing) at {label}" in leaks[0] and
              "level tensors in 1 of" in r.stderr,
              "gate: the kept losses are the one counted leak, at their line, in tensors",
              r.stderr[-1200:])
        # Strict (still referenced memory counts too): the framework's
        # segments, which PyTorch references, are containers of the tensors
        # at this level, not leaks of their own.
        r, _ = gate(launcher, env, tmp, "strict", 20, True, "--level", "tensors", "--strict")
        leaks = [x for x in r.stderr.splitlines() if "check: leak:" in x]
        check(r.returncode == 23 and len(leaks) == 1 and f"in 20 tensors (growing) at {label}" in leaks[0],
              "gate: --strict at the tensor level counts the kept losses alone, not the segments holding them",
              r.stderr[-1200:])
        r, base_path = gate(launcher, env, tmp, "base", 10, True, "--level", "tensors", "--max-leak-bytes", "1G")
        check(r.returncode == 0 and base_path, "gate: a leak within --max-leak-bytes passes", r.stderr[-600:])

        r, _ = gate(launcher, env, tmp, "clean", 20, False, "--level", "tensors", "--max-peak", "100M")
        check(r.returncode == 0 and "passed: 0 counted leaks" in r.stderr,
              "gate: the weights live at exit are no leak at the tensor level; its peak (84 MiB) within 100 MiB",
              r.stderr[-600:])
        r, _ = gate(launcher, env, tmp, "peak", 20, False, "--level", "tensors", "--max-peak", "80M")
        check(r.returncode == 24 and f"peaked at {84 * MIB} bytes (84.0 MiB) of tensors" in r.stderr,
              "gate: --max-peak reads PyTorch's peak of tensors", r.stderr[-600:])

        r, _ = gate(launcher, env, tmp, "grown", 20, True, "--level", "tensors", "--max-leak-bytes", "1G",
                    "--baseline", base_path, "--max-growth", "10%")
        grew = [x for x in r.stderr.splitlines() if "check: grew:" in x]
        check(r.returncode == 24 and grew and label in grew[0] and f"+{10 * 4 * MIB} bytes" in grew[0],
              "gate: growth against the baseline at the tensor level, the loss's line first",
              r.stderr[-800:])

        r, plain = gate(launcher, dict(env, GPUMEMTRACE_FRAMEWORKS="0"), tmp, "plain", 5, True,
                        "--max-leak-bytes", "1G")
        r, _ = gate(launcher, env, tmp, "nolevel", 5, True, "--level", "tensors", "--baseline", plain,
                    "--max-growth", "10%")
        lines = r.stderr.strip().splitlines()
        check(r.returncode == 2 and len(lines) == 1 and "has no tensor level" in lines[0] and plain in lines[0],
              "gate: a baseline without the tensor level is a usage error naming it", r.stderr[-600:])
        r, _ = gate(launcher, env, tmp, "bad", 1, False, "--level", "tensor")
        check(r.returncode == 2 and "--level 'tensor' is invalid" in r.stderr, "gate: a bad --level",
              r.stderr[-300:])


def prom_samples(path: str) -> Dict[Tuple[str, str], float]:
    """(metric, site or device label) -> value of a metrics file's samples."""
    out: Dict[Tuple[str, str], float] = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = re.match(r'^(gpumemtrace_\w+)\{([^}]*)\} (\S+)$', line.strip())
            if m:
                labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2)))
                out[(m.group(1), labels.get("site", labels.get("device", "")))] = float(m.group(3))
    return out


def test_metrics(launcher: str, source: str, env: Dict[str, str]) -> None:
    """The live metrics at the tensor level: the exit snapshot's hand-over
    in the last write, the kept losses a growing tensor site."""
    label = f"<module> (gate.py:{line_of(GATE, '# LOSS')})"
    with tempfile.TemporaryDirectory(prefix="gmt-levels-") as tmp:
        script, mdir = os.path.join(tmp, "gate.py"), os.path.join(tmp, "metrics")
        with open(script, "w", encoding="utf-8") as f:
            f.write(GATE)
        r = subprocess.run([launcher, "run", "--dir", tmp, "--snapshot-on", "exit", "--metrics-dir", mdir, "--",
                            sys.executable, script], env=dict(env, STEPS="20", KEEP="1"), cwd=tmp,
                           capture_output=True, text=True, timeout=300)
        files = [p for p in glob.glob(os.path.join(mdir, "gpumemtrace.*.prom"))
                 if ("gpumemtrace_tensor_live_bytes", "0") in prom_samples(p)]
        check(r.returncode == 0 and len(files) == 1, "metrics: one process's file has the tensor level",
              (r.returncode, os.listdir(mdir) if os.path.isdir(mdir) else None, r.stderr[-400:]))
        if len(files) != 1:
            return
        got = prom_samples(files[0])
        want = {("gpumemtrace_tensor_live_bytes", "0"): (64 + 80) * MIB,
                ("gpumemtrace_tensor_live_tensors", "0"): 21,
                ("gpumemtrace_tensor_site_live_bytes", label): 80 * MIB,
                ("gpumemtrace_tensor_site_live_tensors", label): 20,
                ("gpumemtrace_tensor_site_live_bytes", "<module> (gate.py:5)"): 64 * MIB}
        check(all(got.get(k) == v for k, v in want.items()),
              "metrics: the tensors of the exit snapshot, by device and by site",
              {k: (got.get(k), v) for k, v in want.items()})
        growth = got.get(("gpumemtrace_tensor_growth_suspect_bytes", label), 0)
        check(list(k[1] for k in got if k[0] == "gpumemtrace_tensor_growth_suspect_bytes") == [label] and
              64 * MIB <= growth <= 80 * MIB, "metrics: the loss's line the one growing tensor site", growth)
        check(got.get(("gpumemtrace_tensor_timestamp_seconds", ""), 0) > 0,
              "metrics: the hand-over's time", got.get(("gpumemtrace_tensor_timestamp_seconds", "")))
        promtool = shutil.which("promtool")
        if promtool is not None:
            with open(files[0], "rb") as f:
                p = subprocess.run([promtool, "check", "metrics"], stdin=f, capture_output=True, text=True,
                                   timeout=60)
            check(p.returncode == 0, "metrics: promtool accepts the file", p.stdout + p.stderr)


# The pytest plugin's limits at the tensor level.
PYTEST_TESTS = r'''
import pytest
import torch
MIB = 1 << 20
kept = []


@pytest.mark.gpu_limit_memory("40 MiB")
@pytest.mark.gpu_limit_leaks("0")
def test_within():
    t = torch.empty(32 * MIB)
    del t


@pytest.mark.gpu_limit_leaks("1 MiB")
def test_keeps_tensors():
    kept.append(torch.empty(4 * MIB))  # KEEP


@pytest.mark.gpu_limit_leaks("0")
def test_after_one_that_kept():
    t = torch.empty(2 * MIB)
    del t


@pytest.mark.gpu_limit_memory("16 MiB")
def test_peaks_too_high():
    t = torch.empty(24 * MIB)  # PEAK
    del t


@pytest.mark.gpu_limit_leaks("0", level="driver")
def test_driver_level_sees_the_cache():
    t = torch.empty(48 * MIB)
    del t
'''


def test_pytest_plugin(launcher: str, source: str, env: Dict[str, str]) -> None:
    """The plugin's markers read PyTorch's tensors: a tensor made and freed
    leaves no leak (its segment stays cached), a tensor kept does (and counts
    against no later test), the peak is PyTorch's; level="driver" reads the
    driver's allocations."""
    py = next((p for p in (sys.executable, "/usr/bin/python3") if os.path.exists(p) and
               subprocess.run([p, "-c", "import pytest"], capture_output=True).returncode == 0), None)
    if py is None:
        print("skip: no python3 with pytest (apt-get install python3-pytest): the plugin at the tensor level")
        return
    with tempfile.TemporaryDirectory(prefix="gmt-levels-") as tmp:
        with open(os.path.join(tmp, "test_tensors.py"), "w", encoding="utf-8") as f:
            f.write(PYTEST_TESTS)
        junit = os.path.join(tmp, "out.xml")
        r = subprocess.run([launcher, "run", "--dir", tmp, "--", py, "-m", "pytest", "-p", "no:cacheprovider",
                            "-p", "gpumemtrace.pytest_plugin", f"--junitxml={junit}", "test_tensors.py"],
                           env=env, cwd=tmp, capture_output=True, text=True, timeout=240)
        out = r.stdout + r.stderr
        try:
            cases = {tc.get("name"): tc for tc in ET.parse(junit).getroot().iter("testcase")}
        except (OSError, ET.ParseError) as e:
            check(False, "pytest: the JUnit report", f"{e}\n{out[-1500:]}")
            return

        def failure(name: str) -> str:
            fail = cases[name].find("failure") if name in cases else None
            return (fail.get("message") or "") + (fail.text or "") if fail is not None else ""

        failed = sorted(n for n in cases if failure(n))
        check(r.returncode == 1 and failed == ["test_driver_level_sees_the_cache", "test_keeps_tensors",
                                               "test_peaks_too_high"],
              "pytest: the tests over their limits fail, not the one whose freed tensor stays cached",
              (r.returncode, failed, out[-1500:]))
        text = failure("test_keeps_tensors")
        check("left 4.00 MiB of GPU memory in 1 tensor live" in text and
              f"4.00 MiB in 1 tensor at test_keeps_tensors (test_tensors.py:{line_of(PYTEST_TESTS, '# KEEP')})"
              in text, "pytest: the kept tensor, at its line", text)
        text = failure("test_peaks_too_high")
        check("used 24.0 MiB of PyTorch's tensors at its peak" in text and
              f"24.0 MiB in 1 tensor at test_peaks_too_high (test_tensors.py:{line_of(PYTEST_TESTS, '# PEAK')})"
              in text, "pytest: PyTorch's peak, at the line", text)
        text = failure("test_driver_level_sees_the_cache")
        check("left 48.0 MiB of GPU memory in 1 allocation live" in text,
              "pytest: level=\"driver\": the segment PyTorch keeps cached", text)


# A hand-over, then a fork: the child's metrics are its own.
FORKED = r'''
import os, sys
import gpumemtrace
import torch
MIB = 1 << 20
kept = [torch.empty(4 * MIB) for _ in range(3)]
gpumemtrace.dump()
pid = os.fork()
if pid == 0:
    print("CHILD", os.getpid(), flush=True)
    sys.exit(0)
os.waitpid(pid, 0)
print("PARENT", os.getpid(), flush=True)
'''


def test_metrics_fork(launcher: str, env: Dict[str, str]) -> None:
    """The parent's tensor level stays the parent's: a child forked after a
    hand-over writes metrics without one (it handed nothing over)."""
    with tempfile.TemporaryDirectory(prefix="gmt-levels-") as tmp:
        script, mdir = os.path.join(tmp, "forked.py"), os.path.join(tmp, "metrics")
        with open(script, "w", encoding="utf-8") as f:
            f.write(FORKED)
        r = subprocess.run([launcher, "run", "--dir", tmp, "--metrics-dir", mdir, "--", sys.executable, script],
                           env=env, cwd=tmp, capture_output=True, text=True, timeout=300)
        pids = dict(re.findall(r"^(CHILD|PARENT) (\d+)$", r.stdout, re.M))
        # gpumemtrace.<pid>.<boot>-<pidns>-<start>.prom (docs/fleet.md)
        files = {who: glob.glob(os.path.join(mdir, f"gpumemtrace.{pid}.*.prom")) for who, pid in pids.items()}
        got = {who: prom_samples(paths[0]) for who, paths in files.items() if len(paths) == 1}
        tensors = {who: sorted(k for k in samples if k[0].startswith("gpumemtrace_tensor_"))
                   for who, samples in got.items()}
        check(r.returncode == 0 and set(got) == {"CHILD", "PARENT"} and
              got["PARENT"].get(("gpumemtrace_tensor_live_bytes", "0")) == 12 * MIB and tensors["CHILD"] == [],
              "metrics: the parent's tensor level in its file, none in its forked child's",
              (r.returncode, tensors, r.stderr[-400:]))


def pickle_trace(tmp: str) -> List[Dict[str, Any]]:
    """PyTorch's own trace in the snapshot's pickle (the file its viewer
    reads), [] when none was written."""
    paths = glob.glob(os.path.join(tmp, "gpumemtrace.*.torch.*.pickle"))
    if len(paths) != 1:
        return []
    with open(paths[0], "rb") as f:
        return pickle.load(f)["device_traces"][0]


def test_history_modes(launcher: str, source: str, env: Dict[str, str]) -> None:
    """GPUMEMTRACE_TORCH_HISTORY: what each mode keeps of PyTorch's history
    and what the tensor level loses without it (docs/guide.md)."""
    label = f"train_step (loss.py:{line_of(LOSS, '# LOSS')})"
    for mode in ("alloc", "all", "events", "off", "stacks"):
        with tempfile.TemporaryDirectory(prefix="gmt-levels-") as tmp:
            what = f"history {mode}"
            got = run_oom(launcher, dict(env, GMTSIM_MEMORY="2G", GPUMEMTRACE_TORCH_HISTORY=mode), tmp, LOSS,
                          "loss.py", what)
            if got is None:
                continue
            r, doc, path = got
            dg = doc.get("diagnosis") or {}
            top = label_of(doc, (dg.get("numbers") or {}).get("growth_top_stack", 0))
            t = doc.get("tensors") or {}
            history = t.get("history")
            lined = [a for a in t.get("allocations") or [] if a.get("stack")]
            trace = pickle_trace(tmp)
            allocs = [e for e in trace if e["action"] == "alloc"]
            frees = [e for e in trace if e["action"] == "free_requested"]
            # (the report's own lines, indented, may name the variable too)
            warned = [x for x in r.stderr.splitlines()
                      if "GPUMEMTRACE_TORCH_HISTORY" in x and not x.startswith("gpumemtrace:   ")]
            if mode == "stacks":
                check(len(warned) == 1 and '"stacks" is invalid' in warned[0],
                      f"{what}: one warning naming the variable and its value", r.stderr[-600:])
            else:
                check(not warned, f"{what}: no warning", warned)
            if mode in ("alloc", "all", "stacks"):
                # The default's: every allocation's frames, the frees' only
                # with "all" (PyTorch's own viewer alone reads those).
                check(dg.get("verdict") == "growth" and top == label, f"{what}: growth at the loss's line",
                      (dg.get("verdict"), top))
                check(allocs and all(e["frames"] for e in allocs), f"{what}: every allocation has its frames",
                      len(allocs))
                check(frees and all(bool(e["frames"]) == (mode == "all") for e in frees),
                      f"{what}: the frees' frames {'kept' if mode == 'all' else 'left out'}", len(frees))
            elif mode == "events":
                check(history is not None and history.get("steps", 0) >= 4 and not lined and
                      t.get("allocations"), f"{what}: the tensors and their events and steps, no lines",
                      (history, len(lined)))
                # The tensors' growth is still told, without a line, and how
                # to find it.
                growth = next((v for v in dg.get("verdicts") or [] if v["name"] == "growth"), {})
                rem = next((x for x in dg.get("remedies") or [] if x["name"] == "free_growing_site"), {})
                check(dg.get("verdict") == "growth" and label not in r.stderr and
                      "PyTorch's tensors, their lines not recorded" in growth.get("detail", "") and
                      "24.0 MiB a step" in growth.get("detail", ""),
                      f"{what}: growth of PyTorch's tensors, 24 MiB a step, no line named",
                      (dg.get("verdict"), growth.get("detail")))
                check("GPUMEMTRACE_TORCH_HISTORY=alloc" in rem.get("text", ""),
                      f"{what}: the remedy says how to name the line", rem.get("text"))
            else:
                live = len(t.get("allocations") or [])
                check(history is not None and history.get("events") == 0 and history.get("seeded") == live > 0
                      and not lined and not trace, f"{what}: the live tensors alone (no events, no lines)",
                      (history, live, len(lined), len(trace)))
            td.schema_ok(source, [path], what)


def main(argv: List[str]) -> int:
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    launcher, source, nvml = os.path.abspath(argv[0]), argv[1], argv[2]
    env = td.base_env(source)
    test_loss(launcher, source, env)
    test_batch(launcher, source, env)
    test_weights(launcher, source, env)
    test_fragmentation(launcher, source, env)
    test_eval(launcher, source, env)
    test_others(launcher, source, env, nvml)
    test_accounting(launcher, source, env)
    test_dumps(launcher, source, env)
    test_exit_suspects(launcher, source, env)
    test_history_modes(launcher, source, env)
    test_gate(launcher, source, env)
    test_metrics(launcher, source, env)
    test_metrics_fork(launcher, env)
    test_pytest_plugin(launcher, source, env)
    print(f"{'FAIL' if td.FAILURES else 'ok'}: {len(td.FAILURES)} failed")
    return 1 if td.FAILURES else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
