#!/usr/bin/env python3
"""PyTorch under the tracer (docs/gpu-suite.md), one allocator per mode:

  caching     the default caching allocator, which cudaMallocs whole
              segments: the tracer's device-kind allocations are exactly
              torch.cuda.memory_snapshot()'s segments (address, total_size),
              and they add up to torch.cuda.memory_reserved();
  expandable  PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (the runner
              sets it): segments are VMM reservations with 2 or 20 MiB pages
              mapped on demand; the tracer's vmm handles on the device add up
              to memory_reserved() (each mapped page's handle once), there is
              no device-kind memory, and a reservation at least as large as
              the device is listed;
  async       PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync: one
              cudaMallocAsync per tensor, listed as kind async at its
              data_ptr() with its storage's nbytes; memory_reserved() is the
              default pool's reserved bytes, which the snapshot's pools give;
  oom         three 64 MiB tensors freed (their segments cached), then an
              oversized tensor (twice the device): the caching allocator's
              cudaMalloc fails, it releases its cache and fails again. The
              out-of-memory snapshot (its episode's) names cuMemAlloc_v2 of at
              least its bytes and the verdict never_fits, with cache_released
              beside it, and holds the one segment in use — not the cached
              ones: it describes the last failure, after the release. Its
              framework section (the bootstrap's hand-over of PyTorch's
              state) has allocated = memory_allocated() and reserved =
              memory_reserved(), equal to its active blocks and segments,
              every segment joined to a driver allocation;
  train-oom   a real training step running out: the device filled but for
              3 GiB, an MLP trained with AdamW at batch sizes doubling until
              the step fails: the out-of-memory snapshot's framework section
              as for oom;
  loss-kept   the training loop's leak the memory articles warn about: each
              step's loss (per element, 32 MiB) kept in a list for later
              statistics, the device filled but for 4 GiB, until a step runs
              out: the primary verdict growth, its growing site the loss's
              line of this script (the tensor level: PyTorch's blocks, not
              its segments), the first remedy to stop keeping it;
  fragment    fragmentation inside the caching allocator with nothing
              growing: a 600 MiB tensor freed (its segment cached), eight
              64 MiB tensors cut from that segment and every other one freed,
              the rest of the device taken but 64 MiB, then 128 MiB asked:
              344 MiB free inside the segments, none of it in one piece. The
              primary verdict allocator_fragmentation, no growth, the first
              remedy expandable_segments;
  fragment-expandable  the same program under
              PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (the runner
              sets it): the remedy shown true — the 128 MiB tensor is made
              (PyTorch unmaps the free pages and maps new ones); failures it
              recovers from on the way may have snapshots of their own;
  fraction    torch.cuda.set_per_process_memory_fraction(0.5), then 1 GiB
              tensors until PyTorch refuses one on its own (its reserved
              bytes past half the device, no driver call failed): the
              failed request is torch's, the primary verdict framework_limit
              (the limit the bootstrap takes from what PyTorch tells its
              observer), the first remedy the fraction that fits.

Every mode also compares torch.cuda.mem_get_info (cudaMemGetInfo) with the
snapshots' footprint between checkpoints; caching and async also check that
a tensor made inside make_activation() has that function, file and line as
its innermost Python frame (PyTorch allocates without the GIL). Without torch, or without a GPU
for it, the script says SKIP.
Usage: torch_memory.py caching|expandable|async|oom|train-oom|loss-kept|fragment|fragment-expandable|fraction
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gmt_probe as gp  # noqa: E402

MIB = 1 << 20
MODES = ("caching", "expandable", "async", "oom", "train-oom", "loss-kept", "fragment", "fragment-expandable",
         "fraction")
GIB = 1 << 30
# A small-pool block (a 2 MiB segment), and large ones of several sizes.
SIZES = [512 * 1024, 3 * MIB, 30 * MIB, 100 * MIB + 1]
DEV = 0
PEAK = [0]  # the highest memory_reserved() seen at a checkpoint


def report(torch, label: str, mode: str, tensors: list) -> None:
    """A checkpoint, and what PyTorch says should be in it."""
    cover = {"caching": ["device"], "async": ["async"]}.get(mode)
    gp.checkpoint(label, cover)
    free, total = torch.cuda.mem_get_info(DEV)
    gp.meminfo(label, DEV, free, total)
    reserved = torch.cuda.memory_reserved(DEV)
    if mode == "caching":
        for seg in torch.cuda.memory_snapshot():
            if seg["device"] == DEV:
                gp.live(label, seg["address"], seg["total_size"], "device", DEV)
        gp.live_bytes(label, DEV, ["device"], reserved)
    elif mode == "expandable":
        gp.live_bytes(label, DEV, ["vmm"], reserved)
        gp.live_bytes(label, DEV, ["device"], 0)
        if reserved:
            gp.reservation(label, torch.cuda.get_device_properties(DEV).total_memory)
    elif mode == "async":
        for t in tensors:
            gp.live(label, t.data_ptr(), t.untyped_storage().nbytes(), "async", DEV)
        gp.pool(label, DEV, reserved)
    PEAK[0] = max(PEAK[0], reserved)


def make_activation(torch, nbytes: int):
    """A tensor made inside a named function, and the line of the call: the
    allocation's innermost Python frame must be this one, although PyTorch
    runs torch.empty (and its allocator's cudaMalloc) without the GIL."""
    t = torch.empty(nbytes, dtype=torch.uint8, device="cuda"); return t, sys._getframe().f_lineno  # noqa: E702


def run_allocator(torch, mode: str) -> None:
    if mode == "async" and torch.cuda.get_allocator_backend() != "cudaMallocAsync":
        sys.exit(f"torch_memory.py async: the backend is {torch.cuda.get_allocator_backend()}: "
                 "run with PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync")
    if mode == "expandable" and os.environ.get("PYTORCH_CUDA_ALLOC_CONF") != "expandable_segments:True":
        sys.exit("torch_memory.py expandable: run with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True")
    tensors = [torch.empty(n, dtype=torch.uint8, device="cuda") for n in SIZES]
    # A new segment of its own (caching: no cached block is that large) or
    # its own cudaMallocAsync: the allocation starts at the tensor.
    act, act_line = make_activation(torch, 37 * MIB)
    tensors.append(act)
    torch.cuda.synchronize()
    report(torch, "allocated", mode, tensors)
    if mode != "expandable":
        gp.pyframe("allocated", act.data_ptr(), "make_activation", __file__, act_line)
    del act
    # Freed: the caching allocators keep the memory (cached, reserved).
    del tensors[1]
    torch.cuda.synchronize()
    report(torch, "cached", mode, tensors)
    torch.cuda.empty_cache()
    report(torch, "emptied", mode, tensors)
    del tensors[:]
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    report(torch, "end", mode, tensors)


def run_oom(torch) -> None:
    keep = torch.empty(8 * MIB, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    segments = [(s["address"], s["total_size"]) for s in torch.cuda.memory_snapshot() if s["device"] == DEV]
    report(torch, "before", "caching", [])
    cached = [torch.empty(64 * MIB, dtype=torch.uint8, device="cuda") for _ in range(3)]
    torch.cuda.synchronize()
    del cached
    total = torch.cuda.get_device_properties(DEV).total_memory
    want = 2 * total
    seen = counters_at_oom(torch)
    try:
        torch.empty(want, dtype=torch.uint8, device="cuda")
    except torch.cuda.OutOfMemoryError:
        pass
    else:
        sys.exit(f"torch_memory.py oom: a tensor of {want} bytes was allocated on a device of {total}")
    gp.checkpoint_at("oom", "@oom", ["device"])
    for address, size in segments:
        gp.live("oom", address, size, "device", DEV)
    free, total_now = torch.cuda.mem_get_info(DEV)
    gp.meminfo("oom", DEV, free, total_now)
    gp.oom("oom", "cuMemAlloc_v2", want, DEV, exact=False)
    gp.verdict("oom", "never_fits", primary=True)
    gp.verdict("oom", "cache_released")
    if not seen:
        sys.exit("torch_memory.py oom: PyTorch called no out-of-memory observer")
    gp.framework("oom", DEV, *seen[-1])
    del keep
    torch.cuda.empty_cache()
    report(torch, "end", "caching", [])


def counters_at_oom(torch) -> list:
    """PyTorch's counters at the moment it reports an out-of-memory: read by
    an out-of-memory observer of the program's own, which runs beside the
    bootstrap's (nothing is allocated or freed between them). Read after the
    exception instead, they would miss what unwinding the failed step freed."""
    seen: list = []
    torch._C._cuda_attach_out_of_memory_observer(
        lambda device, alloc, allocated, free: seen.append(
            (torch.cuda.memory_allocated(device), torch.cuda.memory_reserved(device))))
    return seen


def training(torch, room: int) -> tuple:
    """The device filled but for `room` bytes (one tensor), an out-of-memory
    observer of the program's own, an MLP of two 4096x4096 layers and its
    AdamW: (filler, counters at the out-of-memory, model, optimizer)."""
    free, _ = torch.cuda.mem_get_info(DEV)
    blocker = torch.empty(max(0, free - room), dtype=torch.uint8, device="cuda")
    seen = counters_at_oom(torch)
    model = torch.nn.Sequential(torch.nn.Linear(4096, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 4096)).cuda()
    return blocker, seen, model, torch.optim.AdamW(model.parameters())


def run_train_oom(torch) -> None:
    blocker, seen, model, opt = training(torch, 3 * GIB)
    batch = 1024
    while batch < 1 << 24:
        try:
            x = torch.randn(batch, 4096, device="cuda")
            loss = model(x).square().mean()
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            del x, loss
        except torch.cuda.OutOfMemoryError:
            break
        batch *= 2
    else:
        sys.exit("torch_memory.py train-oom: no out-of-memory")
    gp.checkpoint_at("oom", "@oom")
    gp.oom("oom", "*", 1, DEV, exact=False)
    if not seen:
        sys.exit("torch_memory.py train-oom: PyTorch called no out-of-memory observer")
    gp.framework("oom", DEV, *seen[-1])
    gp.note(f"training step of batch {batch} ran out; at the out-of-memory memory_allocated() {seen[-1][0]}, "
            f"memory_reserved() {seen[-1][1]}; after the exception {torch.cuda.memory_allocated(DEV)}")
    del blocker, model, opt


def marked_line(marker: str) -> int:
    """The line of this script that ends with the comment `marker`."""
    with open(__file__, encoding="utf-8") as f:
        for n, text in enumerate(f, 1):
            if text.rstrip().endswith("# " + marker):
                return n
    raise LookupError(marker)


def run_loss_kept(torch) -> None:
    blocker, seen, model, opt = training(torch, 4 * GIB)
    losses = []
    try:
        while len(losses) < 10_000:
            x = torch.randn(2048, 4096, device="cuda")
            y = torch.randn(2048, 4096, device="cuda")
            loss = (model(x) - y).square()  # LOSS-KEPT
            loss.mean().backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            losses.append(loss)
            del x, y, loss
    except torch.cuda.OutOfMemoryError:
        pass
    else:
        sys.exit("torch_memory.py loss-kept: no out-of-memory")
    gp.checkpoint_at("oom", "@oom")
    gp.oom("oom", "*", 1, DEV, exact=False)
    gp.verdict("oom", "growth", primary=True)
    # Over the optimizer's steps, which the bootstrap marks.
    gp.growth_site("oom", __file__, marked_line("LOSS-KEPT"), steps=4)
    gp.remedy("oom", "free_growing_site", first=True)
    if not seen:
        sys.exit("torch_memory.py loss-kept: PyTorch called no out-of-memory observer")
    gp.framework("oom", DEV, *seen[-1])
    gp.note(f"{len(losses)} losses of 32 MiB kept when a step ran out")
    del blocker, model, opt, losses


def run_fragment(torch, expandable: bool) -> None:
    if expandable and os.environ.get("PYTORCH_CUDA_ALLOC_CONF") != "expandable_segments:True":
        sys.exit("torch_memory.py fragment-expandable: run with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True")
    old = torch.empty(600 * MIB, dtype=torch.uint8, device="cuda")
    del old
    blocks = [torch.empty(64 * MIB, dtype=torch.uint8, device="cuda") for _ in range(8)]
    del blocks[::2]
    torch.cuda.synchronize()
    free, _ = torch.cuda.mem_get_info(DEV)
    blocker = torch.empty(max(0, free - 64 * MIB), dtype=torch.uint8, device="cuda")
    seen = counters_at_oom(torch)
    want = 128 * MIB
    inside = torch.cuda.memory_reserved(DEV) - torch.cuda.memory_allocated(DEV)
    try:
        made = torch.empty(want, dtype=torch.uint8, device="cuda")
    except torch.cuda.OutOfMemoryError:
        if expandable:
            sys.exit(f"torch_memory.py fragment-expandable: {want} bytes ran out with expandable segments "
                     f"({inside} bytes free inside them)")
        gp.checkpoint_at("oom", "@oom")
        gp.oom("oom", "cuMemAlloc_v2", want, DEV, exact=False)
        gp.verdict("oom", "allocator_fragmentation", primary=True)
        gp.no_verdict("oom", "growth")
        gp.remedy("oom", "expandable_segments", first=True)
        # the replay the remedy cites: its yes is what fragment-expandable
        # runs for real
        gp.replay("oom", True)
        if not seen:
            sys.exit("torch_memory.py fragment: PyTorch called no out-of-memory observer")
        gp.framework("oom", DEV, *seen[-1])
        gp.note(f"{inside} bytes free inside the segments, {want} asked")
    else:
        if not expandable:
            sys.exit(f"torch_memory.py fragment: {want} bytes were allocated: the allocator was not fragmented")
        gp.recovered()
        gp.note(f"expandable segments: {want} bytes made with {inside} bytes free inside the segments"
                + (f"; {len(seen)} failure(s) recovered on the way" if seen else ""))
        del made
    del blocks, blocker


def run_fraction(torch) -> None:
    torch.cuda.set_per_process_memory_fraction(0.5, DEV)
    seen = counters_at_oom(torch)
    # What PyTorch's observer is told as its third number: under a fraction,
    # the most it may reserve (its allowed maximum), the snapshot's limit.
    limits: list = []
    torch._C._cuda_attach_out_of_memory_observer(lambda device, alloc, limit, free: limits.append(limit))
    kept = []
    try:
        while len(kept) < 10_000:
            kept.append(torch.empty(GIB, dtype=torch.uint8, device="cuda"))
    except torch.cuda.OutOfMemoryError:
        pass
    else:
        sys.exit("torch_memory.py fraction: no out-of-memory under half the device")
    gp.checkpoint_at("oom", "@oom")
    gp.oom("oom", "torch", GIB, DEV, exact=False)
    gp.verdict("oom", "framework_limit", primary=True)
    gp.remedy("oom", "raise_framework_limit", first=True)
    if not seen:
        sys.exit("torch_memory.py fraction: PyTorch called no out-of-memory observer")
    gp.framework("oom", DEV, *seen[-1])
    gp.limit("oom", DEV, limits[-1])
    # Still under the fraction, the tensors held: a gmt_dump() hand-over
    # says the limit too where PyTorch says its fraction (recent versions),
    # as PyTorch computes it: the fraction times the device's total.
    if hasattr(torch.cuda, "get_per_process_memory_fraction"):
        _, total = torch.cuda.mem_get_info(DEV)
        gp.checkpoint("held")
        gp.limit("held", DEV, int(0.5 * total))
    gp.note(f"{len(kept)} tensors of 1 GiB made under half the device, then refused by PyTorch; "
            f"its limit {limits[-1]} bytes")
    torch.cuda.set_per_process_memory_fraction(1.0, DEV)
    del kept


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in MODES:
        print(__doc__.rstrip(), file=sys.stderr)
        return 2
    mode = argv[0]
    gp.begin(f"torch-{mode}")
    try:
        import torch
    except Exception as e:  # noqa: BLE001 (any import failure: no torch here)
        gp.skip(f"torch does not import: {type(e).__name__}: {e}")
    if not torch.cuda.is_available():
        gp.skip(f"torch {torch.__version__} sees no CUDA device")
    torch.cuda.init()
    # The context, and the first kernel's module, before the first checkpoint.
    warm = torch.ones(1, device="cuda")
    torch.cuda.synchronize()
    del warm
    torch.cuda.empty_cache()
    start_mode = {"async": "async", "expandable": "expandable", "fragment-expandable": "expandable"}
    report(torch, "start", start_mode.get(mode, "caching"), [])
    if mode == "oom":
        run_oom(torch)
    elif mode == "train-oom":
        run_train_oom(torch)
    elif mode == "loss-kept":
        run_loss_kept(torch)
    elif mode in ("fragment", "fragment-expandable"):
        run_fragment(torch, mode == "fragment-expandable")
    elif mode == "fraction":
        run_fraction(torch)
    else:
        run_allocator(torch, mode)
    # train-oom's start checkpoint is before its allocations: no peak to tell.
    gp.note(f"torch {torch.__version__}" + (f", memory_reserved() up to {PEAK[0]} bytes" if PEAK[0] else ""))
    gp.checkpoint_at("exit", "@exit")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
