"""A resume checked before the run folder is touched (issue 49): a folder whose checkpoint cannot be resumed (every
generation torn, or a file that is not a plain state: a pickle that would run code) is refused with the
folder exactly as it was. Before, the stage rewrote manifest.json and only then found the checkpoint unusable.

The state file a stage resumes from, by stage: rl -> checkpoint/rl_state.pt (harness/grpo/checkpointing.py), the
classifier -> checkpoint/classifier_state.pt (harness/models/classifier/training.py), the supervised loops ->
checkpoint/state.pt (harness/stages/lm_train.py)."""

from __future__ import annotations

from pathlib import Path

from harness.runs.checkpoint_io import CheckpointError, load_state, resume_folder

STATE_FILES = {"rl": "rl_state.pt", "classifier": "classifier_state.pt"}
DEFAULT_STATE_FILE = "state.pt"


def state_file(stage: str) -> str:
    return STATE_FILES.get(stage, DEFAULT_STATE_FILE)


def check_resumable(run_dir: str | Path, stage: str) -> None:
    """CheckpointError naming the file when the run folder's checkpoint of `stage` exists but cannot be resumed;
    nothing when there is none (the run starts from zero) or it is usable. Reads only (the tensors memory-mapped)."""
    name = state_file(stage)
    found = resume_folder(Path(run_dir) / "checkpoint", name, log=None)  # every generation torn: CheckpointError
    if found is not None:
        load_state(found / name, mmap=True)  # only tensors and plain containers: CheckpointError otherwise


__all__ = ["CheckpointError", "check_resumable", "state_file"]
