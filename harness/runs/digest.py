"""Content digests of run folders: the part of a shared result's key that says which model it was computed from
(harness/grpo/start_validation.py, harness/stages/analyze.py)."""

from __future__ import annotations

import hashlib
from pathlib import Path


def model_digest(model_dir: str | Path) -> str:
    """sha256 over the names and bytes of the files of a stage model folder (weights, spec, processor)."""
    h = hashlib.sha256()
    for p in sorted(Path(model_dir).rglob("*")):
        if p.is_file():
            h.update(p.relative_to(model_dir).as_posix().encode() + b"\0")
            h.update(p.read_bytes())
    return h.hexdigest()
