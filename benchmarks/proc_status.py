"""Reading this process's memory counters from /proc/self/status (Linux), for the memory benchmarks."""

from __future__ import annotations

from pathlib import Path


def status_kb(field: str) -> int | None:
    """A kB field of /proc/self/status (VmRSS, VmHWM, ...), or None where there is no such file."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return None
