"""What a killed process leaves in a run folder, removed when the folder is next opened and when the run ends
(issue 49): the pixel caches of its epochs (`pixels-*/`, harness/data/pixel_cache.py: a kill -9 skips their
cleanup), the temporary files of its atomic writes (`.NAME.*.tmp`, harness/runs/records.py) and a checkpoint
generation it did not finish (`checkpoint.new/` without its SUMS.json; in a finished run, any `checkpoint.new/`).

Called by the process that holds the folder's lock (harness/runs/lock.py): when it opens the folder (before its
own caches exist) and when it writes the run's metrics (its own pixel cache left to the stage): nothing removed
here can belong to a live process."""

from __future__ import annotations

from pathlib import Path

from harness.runs.checkpoint_names import SUMS_FILE, staging_dir
from harness.runs.durable import remove

PIXEL_PREFIX = "pixels-"
TRACKER_DIRS = ("wandb", "tb")  # the trackers' own files (W&B's may be written by its service meanwhile)


def leftovers(run_dir: str | Path, finished: bool, pixels: bool = True) -> list[Path]:
    """The leftover paths of `run_dir` (see the module's text), in a stable order. `pixels=False` leaves the pixel
    caches (at the end of a run its own cache is still open; the stage removes it)."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return []
    found = [p for p in run_dir.iterdir() if pixels and p.is_dir() and not p.is_symlink() and
             p.name.startswith(PIXEL_PREFIX)]
    found += [p for p in run_dir.rglob(".*.tmp") if p.is_file() and not p.is_symlink() and
              p.relative_to(run_dir).parts[0] not in TRACKER_DIRS]
    staging = staging_dir(run_dir / "checkpoint")
    if staging.is_dir() and (finished or not (staging / SUMS_FILE).is_file()):
        found.append(staging)  # unsealed: never resumed from (checkpoint_io.resume_folder skips it)
    return sorted(found)


def clean(run_dir: str | Path, finished: bool, pixels: bool = True) -> list[Path]:
    """Remove the leftovers of `run_dir`; returns what was removed."""
    found = leftovers(run_dir, finished, pixels)
    for p in found:
        remove(p)
    return found
