#!/usr/bin/env python3
"""JAX's default allocator under the tracer (docs/gpu-suite.md), mode oom:
XLA's BFC allocator takes its limit (75 % of the device) from the driver at
the first array and serves every buffer inside it, so its out-of-memory
never reaches the driver. The program keeps a buffer of a quarter of the
limit, then asks for an array larger than what is left of the limit (a whole
number of GiB, which XLA's message writes exactly): JAX raises
RESOURCE_EXHAUSTED with no driver failure, and the bootstrap's hand-over
makes it a failure of the tracer's own — the snapshot's failed request is
JAX's (api "jax") of the asked bytes, the verdict framework_limit, and its
framework section holds exactly the bytes_in_use and pool_bytes the
program's handler reads from memory_stats() (FRAMEWORK). Without JAX, or
without a GPU for it, the script says SKIP.
Usage: jax_memory.py oom
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gmt_probe as gp  # noqa: E402

GIB = 1 << 30


def main(argv: list[str]) -> int:
    if argv != ["oom"]:
        print(__doc__.rstrip(), file=sys.stderr)
        return 2
    gp.begin("jax-oom")
    jax, device, ordinal = gp.jax_gpu()
    import jax.numpy as jnp
    error = getattr(jax.errors, "JaxRuntimeError", None) or getattr(jax.errors, "XlaRuntimeError")

    keep = jax.device_put(jnp.zeros((1,), jnp.uint8), device)
    keep.block_until_ready()
    limit = (device.memory_stats() or {}).get("bytes_limit")
    if not limit:
        gp.skip(f"jax {jax.__version__}: memory_stats() has no bytes_limit (not the BFC allocator)")
    keep = jnp.zeros((limit // 4,), jnp.uint8, device=device)
    keep.block_until_ready()
    asked = (limit - limit // 4) // GIB * GIB + GIB
    try:
        jnp.zeros((asked,), jnp.uint8, device=device).block_until_ready()
    except error as e:
        if "RESOURCE_EXHAUSTED" not in str(e):
            raise
        st = device.memory_stats()
        used, pool = int(st["bytes_in_use"]), int(st.get("pool_bytes") or 0)
    else:
        sys.exit("jax_memory.py oom: no out-of-memory")
    gp.checkpoint_at("oom", "@oom")
    gp.oom("oom", "jax", asked, ordinal, exact=True)
    gp.verdict("oom", "framework_limit", primary=True)
    gp.framework("oom", ordinal, used, pool)
    gp.note(f"jax {jax.__version__}: limit {limit}, {used} in use of a pool of {pool}, {asked} asked")
    del keep
    gp.checkpoint_at("exit", "@exit")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
