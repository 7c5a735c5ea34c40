"""A command's output folder built aside and moved in whole (issue 49): `report` writes its tables, figures and
page into a staging folder beside `out`, and only a complete build replaces the entries of `out`. A failure (a
full disk, a bad record) removes the staging folder and leaves `out` as it was: absent, or the earlier report.
The free space is checked first against an estimate (the earlier output's size, at least `floor` bytes)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from harness.runs.durable import (
    DiskFullError,
    disk_full_error,
    free_bytes,
    fsync_dir,
    is_disk_full,
    remove,
    replace_dir,
)

REPORT_FLOOR = 1_000_000  # bytes: the smallest report (a page, its tables and a few figures) is about this


def tree_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink()) if \
        folder.is_dir() else 0


def check_space(out: Path, what: str, needed: int) -> None:
    """Refuse before writing when the file system of `out` has less than `needed` bytes free."""
    free = free_bytes(out)
    if free is not None and free < needed:
        raise DiskFullError(28, f"{out}: not enough space for {what}: it needs about {needed / 1e6:.1f} MB, "
                                f"{free / 1e6:.1f} MB free on that file system; free space there or choose another "
                                "folder (nothing was written)")


@contextlib.contextmanager
def staged_folder(out: str | Path, what: str, floor: int = REPORT_FLOOR) -> Iterator[Path]:
    """Yield an empty staging folder beside `out`; when the block ends without an error, its entries replace
    those of `out` (created if absent; other entries of `out` stay). On an error the staging folder is removed
    and a full disk becomes one line naming `out`."""
    out = Path(out)
    needed = max(tree_bytes(out), floor)
    check_space(out, what, needed)
    staging = out.parent / f".{out.name}.staging-{os.getpid()}"
    remove(staging)
    missing = [p for p in staging.parents if not p.exists()]
    created = missing[-1] if missing else staging  # the topmost folder this makes: removed on a failure
    try:
        staging.mkdir(parents=True)
        yield staging
    except BaseException as e:
        remove(created)
        if is_disk_full(e, out.parent, needed) and not isinstance(e, DiskFullError):
            raise disk_full_error(out, what, needed, e) from e
        raise
    try:
        out.mkdir(parents=True, exist_ok=True)
        for entry in sorted(staging.iterdir()):
            if entry.is_dir():
                replace_dir(entry, out / entry.name)
            else:
                os.replace(entry, out / entry.name)
        fsync_dir(out)
    finally:
        remove(staging)
