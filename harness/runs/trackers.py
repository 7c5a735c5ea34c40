"""Trackers: a run's records mirrored into the tools people read training runs in (`train.report_to`).

The JSONL records (steps.jsonl, evals.jsonl) stay the source of truth; a tracker receives the same rows with the
same keys, each number under `<prefix>/<key>` at the row's step (prefix `train` for steps.jsonl rows, the split,
`val` or `test`, for evals.jsonl rows), and tables of validation completions (RL: prompt, completion, reward,
gold). Every training stage (warm-up, classifier, SFT, RL) opens the trackers of its config in its run directory:

- `tensorboard`: event files in RUN/tb/ (torch's SummaryWriter); `tensorboard --logdir RUN_OR_EXPERIMENT`; tables
  as a text panel (markdown), a table's `image` column as one image summary per row (`<table>/images/<id>`);
- `wandb`: a Weights & Biases run whose files are in RUN/wandb/ (`WANDB_MODE=offline` keeps it on disk, `wandb sync
  RUN/wandb/offline-run-*` uploads it later); tables as a W&B Table. One W&B run per run directory: its id is
  kept in the folder, so a resumed stage continues the same W&B run (W&B keeps the rows an interrupted try logged
  after the checkpoint and ignores the repeated steps; TensorBoard purges them). A run started over (no checkpoint)
  removes both trackers' folders with its logs. A table's `image` column becomes a wandb.Image column.

A study's stage run gets labels from the experiment runner (harness/experiments/tracker_labels.py), kept in
RUN/tracker.json: the W&B group (one per study folder), run name (`arm/seed<k>/stage`) and tags (the study's
factors), and the TensorBoard folder (`<study>/tb/<arm>/seed<k>/<stage>`: the arm folders link the stage runs, so
event files inside a stage run would be listed once per link). A run outside a study has none of them.

A tracker is opened on the first row it is given (a completed run opens none) and only on the process that writes
the records (rank 0). This module holds the trackers and nothing else (this project, issue 25).
"""

from __future__ import annotations

import json
import math
import secrets
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

TB_DIR = "tb"
WANDB_DIR = "wandb"
LABELS_FILE = "tracker.json"
IMAGE_COLUMN = "image"  # a table column of input images (PIL or HxWxC uint8): shown as images, not text
LABEL_KEYS = ("group", "name", "tags", "tb_dir")


def labels_beside(folder: str | Path) -> Path:
    """The labels file of a folder that is replaced as a whole when it is built (stage 0's cached base)."""
    folder = Path(folder)
    return folder.parent / f"{folder.name}.{LABELS_FILE}"


def read_labels(run_dir: str | Path, path: str | Path | None = None) -> dict:
    """The tracker labels of a run directory (RUN/tracker.json, or `path`; written by the experiment runner),
    `tb_dir` made absolute (it is kept relative to the file's folder); {} when there are none."""
    path = Path(path) if path else Path(run_dir) / LABELS_FILE
    if not path.is_file():
        return {}
    try:
        labels = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    out = {k: labels[k] for k in LABEL_KEYS if labels.get(k)}
    if "tb_dir" in out:
        out["tb_dir"] = str((path.parent / out["tb_dir"]).resolve())
    return out


def tensorboard_dir(run_dir: str | Path, tb_dir: str | Path | None = None) -> Path:
    return Path(tb_dir) if tb_dir else Path(run_dir) / TB_DIR


def _image_array(image):
    """An image as HxWxC uint8 (the first view of a list of views)."""
    if isinstance(image, list | tuple):
        image = image[0] if image else None
    if image is None:
        return None
    if hasattr(image, "convert"):  # PIL
        image = image.convert("RGB")
    arr = np.asarray(image)
    return arr[..., None] if arr.ndim == 2 else arr


def split_images(columns: Sequence[str], rows: list[Sequence[Any]]) -> tuple[list[str], list[list], list]:
    """The columns and rows without the image column, and the rows' images (None without one)."""
    columns = list(columns)
    if IMAGE_COLUMN not in columns:
        return columns, [list(r) for r in rows], [None] * len(rows)
    i = columns.index(IMAGE_COLUMN)
    return (columns[:i] + columns[i + 1:], [list(r[:i]) + list(r[i + 1:]) for r in rows],
            [_image_array(r[i]) if len(r) > i else None for r in rows])


def scalars(row: dict) -> dict[str, float]:
    """The numbers of a record row (not the step, not booleans, not non-finite values), keyed as in the row."""
    return {k: float(v) for k, v in row.items()
            if k != "step" and isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)}


def markdown_table(columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A markdown table (TensorBoard's text panel renders it); cells with '|' or newlines are escaped."""
    def cell(v: Any) -> str:
        text = f"{v:.4g}" if isinstance(v, float) else str(v)
        return text.replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(v) for v in r) + " |" for r in rows]
    return "\n".join(lines)


class Tracker:
    """What every tracker does: numbers of a row at a step, a table at a step, close."""

    def log(self, prefix: str, values: dict[str, float], step: int) -> None:
        raise NotImplementedError

    def table(self, name: str, columns: Sequence[str], rows: list[Sequence[Any]], step: int) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class TensorBoardTracker(Tracker):
    def __init__(self, run_dir: Path, purge_step: int | None = None, tb_dir: str | None = None, **_):
        # lazy: start-up cost (torch)
        from torch.utils.tensorboard import SummaryWriter

        # purge_step: a resumed run drops the events an interrupted try wrote after its checkpoint, as the JSONL
        # records drop their rows (RunDir.truncate_logs_after).
        self.writer = SummaryWriter(log_dir=str(tensorboard_dir(run_dir, tb_dir)), purge_step=purge_step)

    def log(self, prefix: str, values: dict[str, float], step: int) -> None:
        for k, v in values.items():
            self.writer.add_scalar(f"{prefix}/{k}", v, step)
        self.writer.flush()

    def table(self, name: str, columns: Sequence[str], rows: list[Sequence[Any]], step: int) -> None:
        columns, text_rows, images = split_images(columns, rows)
        self.writer.add_text(name, markdown_table(columns, text_rows), step)
        for row, image in zip(text_rows, images, strict=True):
            if image is not None:  # one image per row, named by the row's first cell (the sample id)
                self.writer.add_image(f"{name}/images/{row[0]}", image, step, dataformats="HWC")
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


def wandb_run_id(run_dir: Path) -> str:
    """The W&B run id of the run directory, kept in RUN/wandb/run_id: a resumed stage continues the same W&B run,
    and a run started over (its logs cleared, RunDir.clear_logs) gets a new one."""
    path = Path(run_dir) / WANDB_DIR / "run_id"
    if path.is_file():
        return path.read_text().strip()
    run_id = secrets.token_hex(8)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(run_id + "\n")
    return run_id


class WandbTracker(Tracker):
    def __init__(self, run_dir: Path, stage: str = "", config: dict | None = None, project: str = "regbench",
                 group: str | None = None, name: str | None = None, tags: Sequence[str] = (), **_):
        # lazy: start-up cost (wandb)
        import wandb

        run_dir = Path(run_dir)
        (run_dir / WANDB_DIR).mkdir(parents=True, exist_ok=True)
        # dir: W&B writes its `wandb/` folder in it; the mode (online/offline) is W&B's own (WANDB_MODE, login).
        # group/name/tags: a study's labels (read_labels); a run outside a study is named by its folder.
        self.run = wandb.init(project=project, name=name or run_dir.name, group=group or None,
                              tags=[str(t)[:64] for t in tags] or None, job_type=stage or None, config=config or {},
                              dir=str(run_dir), id=wandb_run_id(run_dir), resume="allow", reinit="create_new",
                              settings=wandb.Settings(console="off", silent=True))
        self._wandb = wandb

    def log(self, prefix: str, values: dict[str, float], step: int) -> None:
        self.run.log({f"{prefix}/{k}": v for k, v in values.items()}, step=step)

    def table(self, name: str, columns: Sequence[str], rows: list[Sequence[Any]], step: int) -> None:
        data = [list(r) for r in rows]
        if IMAGE_COLUMN in columns:
            i = list(columns).index(IMAGE_COLUMN)
            for r in data:
                image = _image_array(r[i]) if len(r) > i else None
                r[i:] = [self._wandb.Image(image) if image is not None else None, *r[i + 1:]]
        self.run.log({name: self._wandb.Table(columns=list(columns), data=data)}, step=step)

    def close(self) -> None:
        self.run.finish()


_CLASSES = {"tensorboard": TensorBoardTracker, "wandb": WandbTracker}


def open_trackers(names: Sequence[str], run_dir: str | Path, stage: str = "", config: dict | None = None,
                  project: str = "regbench", purge_step: int | None = None, **labels) -> list[Tracker]:
    """The trackers `names` (harness/config/names.py: tracker_names) of a run directory; `labels`: see read_labels."""
    return [_CLASSES[n](Path(run_dir), stage=stage, config=config, project=project, purge_step=purge_step, **labels)
            for n in names]
