"""A test double for PyTorch (tests/frameworks): the functions gpumemtrace's
bootstrap uses, over the simulated GPU through ctypes, with a toy caching
allocator shaped like PyTorch's (docs/guide.md, "PyTorch's own view").

    torch.empty(nbytes)            a tensor of nbytes on cuda:0 (uint8)
    del tensor                     its block goes back to the cache
    torch.cuda.empty_cache()       cached segments freed to the driver
    torch.cuda.memory_allocated()  bytes in active blocks (rounded sizes)
    torch.cuda.memory_reserved()   bytes in segments
    torch.cuda.memory._snapshot()  segments and blocks as PyTorch documents
                                   them (address, total_size, stream,
                                   segment_type, is_expandable, blocks with
                                   address, size, requested_size, state,
                                   frames), and the device traces
    torch.cuda.OutOfMemoryError    raised after the allocator released its
                                   cache and the driver failed again, once
                                   the out-of-memory observers ran
    torch.optim.Optimizer().step() runs the hooks registered with
                                   torch.optim.optimizer.register_optimizer_step_post_hook

Segments are whole multiples of 2 MiB (a small pool of 2 MiB segments for
requests up to 1 MiB, as PyTorch's); blocks are 512-byte multiples, split
from a segment best-fit and merged back when freed. FAKE_TORCH_MINIMAL=1
leaves out the functions gpumemtrace needs (a torch too old for it)."""

import os as _os

__version__ = "2.11.0+fake"

from . import _C  # noqa: E402
from . import cuda  # noqa: E402
from . import optim  # noqa: E402


def empty(nbytes, dtype=None, device="cuda"):
    return cuda._allocator().tensor(int(nbytes))


if _os.environ.get("FAKE_TORCH_MINIMAL") == "1":
    del cuda.memory._record_memory_history
