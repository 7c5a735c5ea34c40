"""Crash-consistent writes: a file is written whole, fsynced, renamed into place, and its folder fsynced, so that a
machine crash leaves either the old file or the new one, never a renamed but empty one. A full disk (or quota)
is reported with the path and, when known, the space the write needed, and leaves no temporary file behind.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

_FULL = (errno.ENOSPC, errno.EDQUOT)


class DiskFullError(OSError):
    """No space left (or a quota reached) while writing a named file; the message says where and how much."""


def fsync_dir(folder: str | Path) -> None:
    """Make a folder's entries (a rename, a new file) durable."""
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:  # e.g. a platform without directory fds
        return
    try:
        os.fsync(fd)
    except OSError as e:
        if e.errno not in (errno.EINVAL, errno.EBADF):  # file systems that cannot sync a folder
            raise
    finally:
        os.close(fd)


def fsync_file(path: str | Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(folder: str | Path) -> None:
    """fsync every file under `folder`, then every folder (deepest first)."""
    folder = Path(folder)
    dirs = [folder]
    for p in sorted(folder.rglob("*")):
        if p.is_symlink():
            continue
        if p.is_file():
            fsync_file(p)
        elif p.is_dir():
            dirs.append(p)
    for d in sorted(dirs, key=lambda x: len(x.parts), reverse=True):
        fsync_dir(d)


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 1e5 else f"{n} bytes"


def is_disk_full(e: BaseException, folder: str | Path | None = None, needed: int | None = None) -> bool:
    """An OSError of a full disk / quota, or a library's error (torch's "unexpected pos" / "file write failed")
    raised while the file system of `folder` has less free space than `needed` (or none at all)."""
    if isinstance(e, DiskFullError):
        return True
    if isinstance(e, OSError) and e.errno in _FULL:
        return True
    cause = e.__cause__ or e.__context__
    if cause is not None and cause is not e and isinstance(cause, OSError) and cause.errno in _FULL:
        return True
    text = str(e)
    if "No space left on device" in text or "Disk quota exceeded" in text or "os error 28" in text:
        return True  # a library's own error type carrying the OS's message (safetensors, tokenizers)
    if isinstance(e, RuntimeError) and folder is not None:
        if "unexpected pos" in text or "write failed" in text or "file write" in text.lower():
            free = free_bytes(folder)
            return free is not None and (free == 0 or (needed is not None and free < needed))
    return False


def free_bytes(folder: str | Path) -> int | None:
    p = Path(folder)
    while not p.exists() and p != p.parent:
        p = p.parent
    try:
        return shutil.disk_usage(p).free
    except OSError:
        return None


def disk_full_error(path: str | Path, what: str, needed: int | None, e: BaseException) -> DiskFullError:
    path = Path(path)
    free = free_bytes(path.parent)
    need = f"; it needs about {_mb(needed)}" if needed else ""
    left = f", {_mb(free)} free on that file system" if free is not None else ""
    then = ("rerun the same command: it resumes from the last complete checkpoint" if "checkpoint" in what
            else "run the command again")
    return DiskFullError(errno.ENOSPC, f"{path}: no space left on the device writing {what}{need}{left}; free "
                                      f"space there (or choose another folder), then {then}")


def disk_full_line(e: BaseException) -> str:
    """One line for a full-disk error that no writer turned into a DiskFullError: the path the OS named (the
    error's or its cause's), and what to do."""
    path = None
    for err in (e, e.__cause__, e.__context__):
        if isinstance(err, OSError) and err.filename:
            path = err.filename
            break
    where = f"{path}: " if path else ""
    free = free_bytes(Path(path).parent) if path else None
    left = f" ({_mb(free)} free on that file system)" if free is not None else ""
    return (f"{where}no space left on the device{left}; free space there (or choose another folder), then run "
            "the command again (a stage resumes from its last complete checkpoint)")


@contextlib.contextmanager
def reporting_disk_full(path: str | Path, what: str, needed: int | None = None,
                        cleanup: Iterator[Path] | list[Path] = ()) -> Iterator[None]:
    """Turn a full-disk error inside the block into a DiskFullError naming `path` (and `needed` bytes); on any
    error, remove the `cleanup` paths (temporary files or folders) first."""
    try:
        yield
    except BaseException as e:
        for p in cleanup:
            remove(p)
        if is_disk_full(e, Path(path).parent, needed) and not isinstance(e, DiskFullError):
            raise disk_full_error(path, what, needed, e) from e
        raise


def remove(p: str | Path) -> None:
    p = Path(p)
    with contextlib.suppress(OSError):
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        else:
            p.unlink(missing_ok=True)


def replace_dir(src: str | Path, dst: str | Path) -> None:
    """Put folder `src` (complete and fsynced) in place of `dst`: the old `dst` is moved aside, `src` renamed in,
    the old one removed, the parent fsynced. A crash leaves `dst` whole, or the new one beside `dst.old`."""
    src, dst = Path(src), Path(dst)
    old = dst.with_name(dst.name + ".old")
    remove(old)
    if dst.exists():
        os.replace(dst, old)
    os.replace(src, dst)
    fsync_dir(dst.parent)
    remove(old)
