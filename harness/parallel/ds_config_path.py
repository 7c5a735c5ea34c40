"""Where a `train.deepspeed` file is: the path as given (absolute, or relative to the working directory), else
relative to the repository, since the paper presets name `experiments/deepspeed/zero1.json` and a stage may be
started from any folder (a Slurm job's, a notebook's)."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def deepspeed_config_path(path: str | Path) -> Path:
    """The file `path` names: as given when it exists there, else under the repository; as given when neither."""
    given = Path(path)
    if given.is_file() or given.is_absolute():
        return given
    in_repo = REPO / given
    return in_repo if in_repo.is_file() else given
