"""Resumable checkpoints (`checkpoint/*.pt`): written crash-consistently, verified, read with `weights_only=True`.

A run folder may come from elsewhere (a colleague's disk, an archive); unpickling arbitrary objects from it
would run their code. So a checkpoint holds only tensors, plain containers and primitives, and one that holds
anything else is refused with an error naming the file, as is a truncated or corrupt one.

A checkpoint is a folder generation: its files (the trainer's state, and under DeepSpeed every process's ZeRO
partition) are written into `checkpoint.new/`, fsynced, listed with their sizes and sha256 in its sidecar
`SUMS.json` (written last), and only then rotated in: the previous `checkpoint/` becomes `checkpoint.prev/` (the
one before it is removed) and `checkpoint.new/` becomes `checkpoint/`, with the run folder fsynced. A resume takes
the newest generation whose files match their sidecar (`resume_folder`); a torn one (a crash or a full disk
while writing, a file cut short) is skipped for the previous one with a message naming the file. A full disk while
writing is reported with the path and the checkpoint's size, and leaves `checkpoint.new/` removed.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from harness.runs.checkpoint_names import PREVIOUS, STAGING, SUMS_FILE, staging_dir
from harness.runs.durable import fsync_dir, fsync_file, remove, reporting_disk_full
from harness.runs.records import atomic_write_json

_WHAT_TO_DO = ("delete its checkpoint/ folder (or rerun with --restart) to start the run over, or use a new "
               "out_dir")


class CheckpointError(ValueError):
    """A checkpoint file cannot be loaded safely; the message names the file."""


def previous_dir(folder: str | Path) -> Path:
    folder = Path(folder)
    return folder.with_name(folder.name + PREVIOUS)


def generations(folder: str | Path) -> list[Path]:
    """The folders a checkpoint may live in: the latest, one left by a crash during the rotation, the previous."""
    return [Path(folder), staging_dir(folder), previous_dir(folder)]


def begin(folder: str | Path) -> Path:
    """A fresh, empty `checkpoint.new/` (what a crash left there is removed) to write a checkpoint's files into."""
    staging = staging_dir(folder)
    remove(staging)
    staging.mkdir(parents=True)
    return staging


def state_bytes(obj: Any) -> int:
    """The bytes of the tensors in `obj` (about what torch.save writes)."""
    if torch.is_tensor(obj):
        return obj.numel() * obj.element_size()
    if isinstance(obj, dict):
        return sum(state_bytes(v) for v in obj.values())
    if isinstance(obj, list | tuple):
        return sum(state_bytes(v) for v in obj)
    return 0


def write_state(state: dict[str, Any], path: str | Path) -> None:
    """torch.save into a generation being written (`begin`); a full disk names the file and the size, and the
    whole unfinished generation is removed (the earlier ones stay)."""
    path = Path(path)
    needed = state_bytes(state)
    with reporting_disk_full(path, "the checkpoint", needed or None, cleanup=[path.parent]):
        torch.save(state, path)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()


def commit(folder: str | Path, step: int | None = None) -> None:
    """Seal `checkpoint.new/` (fsync its files, write SUMS.json with their sizes and sha256) and rotate it in as
    `checkpoint/`, the former one kept as `checkpoint.prev/`."""
    folder = Path(folder)
    staging = staging_dir(folder)
    files = sorted(p for p in staging.iterdir() if p.is_file() and p.name != SUMS_FILE)
    sums = {}
    for p in files:
        fsync_file(p)
        sums[p.name] = {"size": p.stat().st_size, "sha256": _sha256(p)}

    with reporting_disk_full(staging / SUMS_FILE, "the checkpoint's checksums", None, cleanup=[staging]):
        atomic_write_json(staging / SUMS_FILE, {"step": step, "files": sums})
    fsync_dir(staging)
    previous = previous_dir(folder)
    if folder.exists():
        remove(previous)
        os.replace(folder, previous)
    os.replace(staging, folder)
    fsync_dir(folder.parent)


def save_state(state: dict[str, Any], path: str | Path) -> None:
    """One checkpoint file as a generation of its folder (begin, write_state, commit); the former one is kept."""
    path = Path(path)
    staging = begin(path.parent)
    write_state(state, staging / path.name)
    commit(path.parent, state.get("step") if isinstance(state, dict) else None)


def check_generation(folder: Path, name: str) -> tuple[int | None, str | None]:
    """(its step, None) when `folder/name` and the generation's other files match SUMS.json; (None, why not)
    otherwise. A folder without SUMS.json (written before checkpoints were verified) is taken as it is."""
    main = folder / name
    if not main.is_file():
        return None, f"{main}: missing"
    sums_path = folder / SUMS_FILE
    if not sums_path.is_file():
        if folder.name.endswith((STAGING, PREVIOUS)):
            return None, f"{folder}: incomplete (no {SUMS_FILE})"
        return checkpoint_step(main), None  # an older run's checkpoint: no sidecar to check against
    try:
        sums = json.loads(sums_path.read_text())
        files = sums["files"]
    except (ValueError, KeyError, TypeError, OSError) as e:
        return None, f"{sums_path}: unreadable ({type(e).__name__})"
    if name not in files:
        return None, f"{sums_path}: does not list {name}"
    for fname, want in files.items():
        p = folder / fname
        if not p.is_file():
            return None, f"{p}: missing, its {SUMS_FILE} lists it"
        size = p.stat().st_size
        if size != want.get("size"):
            return None, f"{p}: {size} bytes, its {SUMS_FILE} records {want.get('size')} (a torn write?)"
        if _sha256(p) != want.get("sha256"):
            return None, f"{p}: checksum differs from its {SUMS_FILE} (a torn or damaged file)"
    step = sums.get("step")
    return (int(step) if step is not None else checkpoint_step(main)), None


def resume_folder(folder: str | Path, name: str, log: Callable[[str], None] | None = print) -> Path | None:
    """The checkpoint generation to resume from: the newest one (latest, a crash's checkpoint.new, previous)
    whose files match their sidecar; a torn one is skipped with a message. None when there is none at all;
    a CheckpointError when every one found is torn."""
    found, bad = [], []
    for gen in generations(folder):
        if not gen.is_dir() or not any(gen.iterdir()):
            continue
        step, why = check_generation(gen, name)
        if why is None:
            found.append((step if step is not None else -1, gen))
        elif (gen / name).exists() or (gen / SUMS_FILE).exists():
            bad.append(why)
    if not found:
        if bad:
            raise CheckpointError(f"no usable checkpoint: {'; '.join(bad)}; {_WHAT_TO_DO}")
        return None
    step, best = max(found, key=lambda t: t[0])  # max keeps the first of equal steps: the latest folder
    if bad and log is not None:
        log(f"[checkpoint] skipped: {'; '.join(bad)}; resuming from {best / name} (step {step})")
    return best


def load_state(path: str | Path, mmap: bool = False) -> dict[str, Any]:
    """The checkpoint at `path`, on the CPU; only tensors, containers and primitives are accepted. `mmap`: the
    tensors memory-mapped, not read (a check that the file loads safely)."""
    path = Path(path)
    try:
        state = torch.load(path, map_location="cpu", weights_only=True, **({"mmap": True} if mmap else {}))
    except pickle.UnpicklingError as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise CheckpointError(f"{path}: refused to load: the checkpoint holds objects other than tensors and plain "
                              f"containers ({first[:200]}); it may not come from this program: {_WHAT_TO_DO}") from e
    except (RuntimeError, EOFError, OSError, zipfile.BadZipFile, ValueError) as e:
        if isinstance(e, FileNotFoundError):
            raise
        raise CheckpointError(f"{path}: corrupt or truncated checkpoint ({type(e).__name__}: "
                              f"{str(e).splitlines()[0][:200] if str(e) else ''}); {_WHAT_TO_DO}") from e
    if not isinstance(state, dict):
        raise CheckpointError(f"{path}: expected a mapping of checkpoint entries, got {type(state).__name__}; "
                              f"{_WHAT_TO_DO}")
    return state


def checkpoint_step(path: str | Path) -> int | None:
    """The `step` recorded in a checkpoint (None if there is none); memory-mapped, so cheap for large states."""
    path = Path(path)
    if not path.is_file():
        return None
    try:
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception:  # noqa: BLE001 - the real load reports it with a clear error
        return None
    return int(state["step"]) if isinstance(state, dict) and "step" in state else None
