"""Resumable checkpoints (`checkpoint/*.pt`): written atomically, read with `weights_only=True`.

A run folder may come from elsewhere (a colleague's disk, an archive); unpickling arbitrary objects from it
would run their code. So a checkpoint holds only tensors, plain containers and primitives, and one that holds
anything else is refused with an error naming the file, as is a truncated or corrupt one.
"""

from __future__ import annotations

import pickle
import zipfile
from pathlib import Path
from typing import Any

import torch

_WHAT_TO_DO = ("delete its checkpoint/ folder (or rerun with --restart) to start the run over, or use a new "
               "out_dir")


class CheckpointError(ValueError):
    """A checkpoint file cannot be loaded safely; the message names the file."""


def save_state(state: dict[str, Any], path: str | Path) -> None:
    """torch.save to a temporary file, then rename: a crash never leaves a half-written checkpoint."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.save(state, tmp)
    tmp.replace(path)


def load_state(path: str | Path) -> dict[str, Any]:
    """The checkpoint at `path`, on the CPU; only tensors, containers and primitives are accepted."""
    path = Path(path)
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
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
