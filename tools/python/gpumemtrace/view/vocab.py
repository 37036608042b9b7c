"""The words of the snapshot format, one list each: the viewer's copies of the
tracer's lists (GMT_KINDS in src/record/event.h, GMT_VERDICTS in
src/analyze/diagnose.h and GMT_REMEDIES beside it, GMT_TRIGGERS and GMT_LEAK_CLASSES in
src/tracer/options.h, GMT_REASONS and GMT_EPISODE_ENDS in src/analyze/capture.h, GMT_FRAME_ROLES in
src/analyze/sites.h, GMT_HIST_OPS in src/state/history.h). tests/unit/test_vocabulary.py holds these, and the
enums of docs/snapshot.schema.json, equal to the C lists."""

KINDS = ("device", "async", "managed", "host", "registered", "vmm", "array")
# Kinds of host memory: no device's pages, no device's timeline.
HOST_KINDS = ("host", "registered")
# Why a snapshot was written: the snapshot triggers, and gmt_dump().
TRIGGERS = ("oom", "exit", "peak", "signal")
REASONS = TRIGGERS + ("api",)
LEAK_CLASSES = ("leaked", "referenced", "cached")
# What a history event is (GMT_HIST_OPS in src/state/history.h).
HIST_OPS = ("alloc", "free", "oom", "step")
# What a frame is to the site rule (docs/guide.md, "Allocation sites").
FRAME_ROLES = ("cuda", "library", "user")
VERDICTS = ("exhaustion", "fragmentation", "pool_reservation", "other_processes", "growth", "untracked",
            "never_fits", "cache_released", "allocator_fragmentation", "framework_limit")
# What to try about an out-of-memory (GMT_REMEDIES in src/analyze/diagnose.h).
REMEDIES = ("split_request", "expandable_segments", "smaller_batch", "checkpointing", "mixed_precision",
            "free_growing_site", "shrink_largest_site", "trim_pools", "large_blocks_first", "other_device", "raise_framework_limit")
# How an out-of-memory episode had ended (GMT_EPISODE_ENDS in src/analyze/capture.h).
EPISODE_ENDS = ("open", "success", "gap", "other_device", "other_site", "reported", "exit")
