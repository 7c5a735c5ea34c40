"""glibc malloc settings for the processes that train and decode (issue 27).

A training or decoding step allocates and frees the same large buffers (activations, logits, pixel batches) over
and over. glibc's defaults hand the top of its heap back to the OS whenever enough of it is free and serve the
largest blocks with fresh mmaps, so every step touches new pages again: the demo, measured with `/usr/bin/time`,
spent 11% of its CPU time in the kernel (60 million minor page faults). Keeping freed memory in the process instead
(`mallopt`: blocks below 32 MiB from the heap, no trimming below 1 GiB free) removed 90-97% of the page faults of a
stage-0 training step and about a fifth of its CPU time (benchmarks/RESULTS.md). Only where memory comes from
changes: no number does. Set REGBENCH_MALLOC=default to keep glibc's own settings; glibc's own MALLOC_MMAP_THRESHOLD_ /
MALLOC_TRIM_THRESHOLD_ in the environment (e.g. benchmarks/bench_memory_3b.py's way of making RSS follow the live
tensors) are left in charge too.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

# mallopt parameters (glibc's malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20  # glibc's largest allowed value on 64-bit systems
TRIM_THRESHOLD = 1 << 30

_done: list[bool] = []


def keep_freed_memory() -> bool:
    """Apply the settings above to this process (once; child processes started by fork inherit them). Returns
    whether they are in effect: False on a C library without mallopt (macOS, musl) or with REGBENCH_MALLOC=default."""
    if _done:
        return _done[0]
    ok = False
    users = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")
    if os.environ.get("REGBENCH_MALLOC", "") != "default" and not any(k in os.environ for k in users):
        name = ctypes.util.find_library("c")
        try:
            libc = ctypes.CDLL(name) if name else None
            mallopt = getattr(libc, "mallopt", None)
            ok = bool(mallopt and mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
                      and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1)
        except OSError:
            ok = False
    _done.append(ok)
    return ok
