"""Run records (docs/DESIGN.md "Run records"): one directory per run.

manifest.json  resolved config, seed, package versions, git commit
steps.jsonl    one line per optimizer step
evals.jsonl    one line per validation/test
samples.jsonl  sampled candidates (RL)
metrics.json   final metrics
checkpoint/    the latest resumable checkpoint

Every whole-file write is atomic and durable (temp file in the same folder, fsynced, os.replace, the folder
fsynced; harness/runs/durable.py), so a crash never leaves a half-written or empty JSON file; JSONL lines are
appended with one write and flushed, and fsynced before every checkpoint (`RunDir.sync_logs`), so the lines a
checkpoint covers survive a machine crash. A full disk is reported with the file's path.
"""

from __future__ import annotations

import json
import math
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from harness.runs import leftovers
from harness.runs.durable import fsync_dir, fsync_file, reporting_disk_full
from harness.runs.schema import (
    EVALS_FILE,
    LOG_FILES,
    MANIFEST_FILE,
    METRICS_FILE,
    SAMPLES_FILE,
    STEPS_FILE,
    ManifestKey,
)
from harness.runs.trackers import TB_DIR, WANDB_DIR, open_trackers, scalars

PACKAGES = ("torch", "torchvision", "transformers", "peft", "accelerate", "timm", "numpy", "pycocoevalcap",
            "nltk", "optuna", "scikit-learn")


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, Path):
        return str(obj)
    if hasattr(obj, "item") and callable(obj.item):  # numpy / torch scalars
        try:
            return _jsonable(obj.item())
        except (ValueError, RuntimeError):
            pass
    if hasattr(obj, "tolist"):
        return _jsonable(obj.tolist())
    return obj


def dumps(obj: Any, indent: int | None = None) -> str:
    """JSON with non-finite floats written as null (JSON has no NaN)."""
    return json.dumps(_jsonable(obj), indent=indent, sort_keys=indent is not None, allow_nan=False)


def _read_umask() -> int:
    # Reading the umask means setting it; done once, at import, rather than around every write (threads).
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


_UMASK = _read_umask()


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write `data` to `path` whole: temp file, fsync, rename, fsync of the folder. A full disk is a DiskFullError
    naming `path` and the bytes needed; no temporary file is left."""
    path = Path(path)
    with reporting_disk_full(path, "a file", len(data)):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with reporting_disk_full(path, "a file", len(data), cleanup=[Path(tmp)]):
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        # mkstemp creates the file 0600; give it the permissions a plain open() would (0666 minus the umask),
        # so that run records on a shared cluster disk stay readable by the group.
        os.chmod(tmp, 0o666 & ~_UMASK)
        os.replace(tmp, path)
        fsync_dir(path.parent)


def append_line_durable(path: str | Path, line: str) -> None:
    """Append one line in one write and fsync it (records that must survive a crash: preemptions.jsonl)."""
    path = Path(path)
    data = line.encode("utf-8")
    with reporting_disk_full(path, "a log line", len(data)):
        with open(path, "ab") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | Path, obj: Any) -> None:
    atomic_write_text(path, dumps(obj, indent=2) + "\n")


def kept_result(path: str | Path, field: str, compute) -> Any:
    """`compute()`'s JSON value, kept at `path` under `field` for the next caller with the same key (the file name):
    read back when it is there, else computed and written. A folder that cannot be written only means computing
    it each time (a shared, read-only model folder)."""
    path = Path(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))[field]
    except (OSError, ValueError, KeyError):
        pass
    value = compute()
    try:
        path.parent.mkdir(exist_ok=True)
        atomic_write_text(path, json.dumps({field: value}) + "\n")
    except OSError:
        pass
    return value


def read_json(path: str | Path) -> Any:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"missing file: {path}")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON ({e})") from e


def read_jsonl(path: str | Path) -> list[dict]:
    path = Path(path)
    if not path.is_file():
        return []
    rows = []
    lines = path.read_text().splitlines()
    for i, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as e:
            # A torn last line (crash mid-write) is dropped; a torn line in the middle is an error.
            if i == len(lines):
                break
            raise ValueError(f"{path}:{i}: not valid JSON ({e})") from e
    return rows


def package_versions() -> dict[str, str]:
    out = {"python": sys.version.split()[0], "platform": platform.platform()}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def git_commit() -> str | None:
    try:
        root = Path(__file__).resolve().parent.parent
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=5)
        if out.returncode != 0:
            return None
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=root, capture_output=True, text=True,
                               timeout=5).stdout.strip()
        return out.stdout.strip() + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return None


class RunDir:
    """A run directory; appends JSONL records and writes JSON files atomically. `trackers` (harness/runs/
    trackers.py: tensorboard, wandb) receive every numeric field of the step and eval rows, and the tables;
    they are opened on the first row (`tracker_info`: stage, config, project of a W&B run, and a study's labels:
    harness/runs/trackers.py read_labels)."""

    def __init__(self, path: str | Path, tensorboard: bool = False, trackers: Sequence[str] = (),
                 tracker_info: dict | None = None):
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self._tracker_names = list(dict.fromkeys([*trackers, *(["tensorboard"] if tensorboard else [])]))
        self._tracker_info = dict(tracker_info or {})
        self._trackers = None
        self._purge_step = None  # set on resume (truncate_logs_after): TensorBoard drops the later events

    def _open_trackers(self) -> list:
        if self._trackers is None:
            self._trackers = open_trackers(self._tracker_names, self.path, purge_step=self._purge_step,
                                           **self._tracker_info)
        return self._trackers

    def _mirror(self, prefix: str, row: dict) -> None:
        if not self._tracker_names or "step" not in row:
            return

        values = scalars(row)
        for tracker in self._open_trackers():
            tracker.log(prefix, values, int(row["step"]))

    def log_table(self, name: str, columns: Sequence[str], rows: list[Sequence[Any]], step: int) -> None:
        """A table (e.g. the validation completions) into the trackers only: W&B Table, TensorBoard text."""
        if not self._tracker_names:
            return
        for tracker in self._open_trackers():
            tracker.table(name, columns, rows, int(step))

    def close(self) -> None:
        for tracker in self._trackers or []:
            tracker.close()
        self._trackers = None

    # -- whole files --------------------------------------------------------------------------------
    def write_manifest(self, config: dict, seed: int, stage: str, extra: dict | None = None) -> None:
        manifest = {
            ManifestKey.STAGE: stage,
            ManifestKey.SEED: seed,
            ManifestKey.CONFIG: config,
            "versions": package_versions(),
            "git_commit": git_commit(),
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "argv": sys.argv,
        }
        manifest.update(extra or {})
        atomic_write_json(self.path / MANIFEST_FILE, manifest)

    def write_metrics(self, metrics: dict) -> None:
        atomic_write_json(self.path / METRICS_FILE, metrics)
        leftovers.clean(self.path, finished=True, pixels=False)  # a torn checkpoint.new/ is never resumed now

    @property
    def complete(self) -> bool:
        return (self.path / METRICS_FILE).is_file()

    # -- line logs ------------------------------------------------------------------------------------
    def _append(self, name: str, row: dict) -> None:
        line = dumps(row) + "\n"
        with reporting_disk_full(self.path / name, "a log line", len(line.encode("utf-8"))), \
                open(self.path / name, "a", encoding="utf-8") as f:
            f.write(line)
            f.flush()

    def sync_logs(self) -> None:
        """fsync the line logs (before a checkpoint: the lines it covers must survive a machine crash)."""
        for name in LOG_FILES:
            if (self.path / name).is_file():
                fsync_file(self.path / name)

    def log_step(self, row: dict) -> None:
        self._append(STEPS_FILE, row)
        self._mirror("train", row)

    def log_eval(self, row: dict) -> None:
        self._append(EVALS_FILE, row)
        self._mirror(str(row.get("split", "eval")), row)

    def log_samples(self, row: dict) -> None:
        self._append(SAMPLES_FILE, row)

    def steps(self) -> list[dict]:
        return read_jsonl(self.path / STEPS_FILE)

    def evals(self) -> list[dict]:
        return read_jsonl(self.path / EVALS_FILE)

    def clear_logs(self) -> None:
        """A run that starts from zero (no checkpoint) keeps no rows of an earlier, interrupted try (nor its trackers'
        folders: harness/runs/trackers.py)."""
        for name in LOG_FILES:
            (self.path / name).unlink(missing_ok=True)
        folders = [self.path / TB_DIR, self.path / WANDB_DIR]
        if self._tracker_info.get("tb_dir"):  # a study's stage run keeps its events in the study's tb/ folder
            folders.append(Path(self._tracker_info["tb_dir"]))
        for folder in folders:
            if folder.is_dir() and self._trackers is None:
                shutil.rmtree(folder)

    def truncate_logs_after(self, step: int) -> None:
        """On resume, drop log lines written after the checkpoint we resume from (TensorBoard: its events too)."""
        if self._trackers is None:
            self._purge_step = step + 1
        for name in LOG_FILES:
            p = self.path / name
            if not p.is_file():
                continue
            rows = [r for r in read_jsonl(p) if int(r.get("step", 0)) <= step]
            atomic_write_text(p, "".join(dumps(r) + "\n" for r in rows))


class FollowerRun:
    """A run directory as a process other than rank 0 of a data-parallel run sees it: it reads, never writes
    (rank 0 holds the RunDir that writes; harness/parallel/distributed.py)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    @property
    def complete(self) -> bool:
        return (self.path / METRICS_FILE).is_file()

    def write_manifest(self, *args, **kwargs) -> None:
        pass

    def write_metrics(self, metrics: dict) -> None:
        pass

    def log_step(self, row: dict) -> None:
        pass

    def log_eval(self, row: dict) -> None:
        pass

    def log_samples(self, row: dict) -> None:
        pass

    def log_table(self, *args, **kwargs) -> None:
        pass

    def truncate_logs_after(self, step: int) -> None:
        pass

    def sync_logs(self) -> None:
        pass

    def clear_logs(self) -> None:
        pass

    def close(self) -> None:
        pass

    def steps(self) -> list[dict]:
        return []

    def evals(self) -> list[dict]:
        return []
