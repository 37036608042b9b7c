#!/usr/bin/env python3
"""JAX under the tracer with XLA_PYTHON_CLIENT_ALLOCATOR=platform (the runner
sets it, and XLA_PYTHON_CLIENT_PREALLOCATE=false): no BFC arena, one driver
allocation per buffer, made through XLA's private loader (dlopen of libcuda,
dlsym by versioned name). Each array's buffer (unsafe_buffer_pointer()) is
then a live device-kind allocation of at least its bytes, or the address of a
VMM mapping that large (JAX 0.11 on CUDA 13 reserves, creates and maps a
handle for each buffer), and is gone once the array is deleted. Without JAX, or without a GPU for it, the script says
SKIP. docs/gpu-suite.md.
Usage: jax_platform.py
"""
from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gmt_probe as gp  # noqa: E402

MIB = 1 << 20
SIZES = [1 * MIB, 24 * MIB + 4]   # bytes, float32 arrays


def wait_for_free(device: int, before: int | None) -> None:
    """Buffers are freed when their last use completes: wait until the
    tracer's live bytes on the device fell below before (at most 5 s)."""
    if before is None:
        return
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        now = gp.traced_live_bytes(device)
        if now is None or now < before:
            return
        time.sleep(0.01)


def main(argv: list[str]) -> int:
    if argv:
        print(__doc__.rstrip(), file=sys.stderr)
        return 2
    gp.begin("jax-platform")
    if os.environ.get("XLA_PYTHON_CLIENT_ALLOCATOR") != "platform":
        sys.exit("jax_platform.py: run with XLA_PYTHON_CLIENT_ALLOCATOR=platform")
    jax, device, ordinal = gp.jax_gpu()
    import numpy as np

    arrays = [jax.device_put(np.ones(n // 4, np.float32), device) for n in SIZES]
    for a in arrays:
        a.block_until_ready()
    pointers = [a.unsafe_buffer_pointer() for a in arrays]
    gp.checkpoint("allocated")
    for p, n in zip(pointers, SIZES):
        gp.has("allocated", p, ["device", "mapped"], ordinal, n // 4 * 4)

    before = gp.traced_live_bytes(ordinal)
    arrays[0].delete()
    wait_for_free(ordinal, before)
    gp.checkpoint("deleted")
    gp.gone("deleted", pointers[0])
    gp.has("deleted", pointers[1], ["device", "mapped"], ordinal, SIZES[1] // 4 * 4)

    before = gp.traced_live_bytes(ordinal)
    arrays[1].delete()
    wait_for_free(ordinal, before)
    gp.checkpoint("end")
    gp.gone("end", pointers[1])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
