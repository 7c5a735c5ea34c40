"""The training loops' checkpoint protocol, one for all three (the RL engine, the supervised LM loop, the
classifier): how a loop's resumable state becomes a checkpoint generation and comes back.

Writing (`save_generation`): the main process opens a fresh `checkpoint.new/`; every process writes its own
optimizer partition into it (DeepSpeed ZeRO: `partition`, which returns what the main state records of the
optimizer); the main process then builds the state (`build`, called only there and only then, so the RNG and
scheduler it reads are those of this moment), writes it, puts the logs it covers on disk (`before_seal`), seals the
generation (sizes and sha256 in SUMS.json, fsynced) and rotates it in, the former one kept as `checkpoint.prev/` and
the one before that removed; every process waits for that. Reading (`load_latest`): the newest generation whose
files match their sidecar, loaded with the safe loader. The files, their names and contents are those of
harness/runs/checkpoint_io.py, which does the file work; this module only fixes the order around it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from harness.runs.checkpoint_io import begin, commit, load_state, resume_folder, staging_dir, write_state


class Processes(Protocol):
    """What the protocol needs of the process group (harness/parallel/distributed.py: Dist)."""

    main: bool

    def barrier(self) -> None: ...


class _One:
    main = True

    def barrier(self) -> None:
        pass


def save_generation(path: str | Path, step: int | None, build: Callable[[Any], dict], *,
                    partition: Callable[[Path], Any] | None = None, dist: Processes | None = None,
                    before_seal: Callable[[], None] | None = None) -> None:
    """Write `build(partition(staging))` as `path` in a new checkpoint generation of `path`'s folder and rotate it
    in (module docstring); `step` is what SUMS.json records. Every process of `dist` calls it."""
    dist = dist or _One()
    path = Path(path)
    if dist.main:
        begin(path.parent)
    dist.barrier()
    recorded = partition(staging_dir(path.parent)) if partition is not None else None
    dist.barrier()  # every partition is written before the main process seals the generation
    if dist.main:
        write_state(build(recorded), staging_dir(path.parent) / path.name)
        if before_seal is not None:
            before_seal()
        commit(path.parent, step)
    dist.barrier()


def load_latest(path: str | Path, log: Callable[[str], None] | None = print) -> tuple[Path, dict] | None:
    """(the generation's folder, the state of its `path.name`) of the newest verified generation, or None when
    there is none; a torn generation is skipped with a message through `log`, and a CheckpointError names the
    files when every one is torn."""
    path = Path(path)
    folder = resume_folder(path.parent, path.name, log=log)
    return None if folder is None else (folder, load_state(folder / path.name))
