"""The names of a checkpoint folder's files and generations (harness/runs/checkpoint_io.py writes them): apart, so
that the leftover cleaning (harness/runs/leftovers.py), which the run records call, reads them without importing
the checkpoint writer, which imports the records."""

from __future__ import annotations

from pathlib import Path

SUMS_FILE = "SUMS.json"
STAGING, PREVIOUS = ".new", ".prev"


def staging_dir(folder: str | Path) -> Path:
    folder = Path(folder)
    return folder.with_name(folder.name + STAGING)
