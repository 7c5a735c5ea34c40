"""What a run folder is: its stage and config (manifest.json), checked before the folder is reused.

Rerunning a command resumes its run folder. A folder written by another stage, or by the same stage with
another config, is refused with the differing keys named: resuming it would continue the old run and relabel
it with the new config. `--restart` (or another out_dir) is the way out. Keys that say where things are, not
what runs (the same as the experiment runner's stage keys leave out), are not compared.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

from harness.config import ConfigError, RunConfig, to_dict
from harness.config.retired import with_retired
from harness.runs.lock import LOCK_NAME

# Where, not what: a run moved to another disk or device is the same run (cf. harness/experiments/resolve._LOCATIONS).
# The trackers (train.report_to, train.wandb_project) say where the records are mirrored, not what runs; the
# preemption signals how a run is stopped.
LOCATION_KEYS = ("out_dir", "cache_dir", "data.synth_dir", "model.device", "train.num_workers", "train.report_to",
                 "train.wandb_project", "train.preempt_signals")

# Set by `regbench ... --restart`: discard what the run folder holds and start the stage over.
_RESTART = [False]


def request_restart(on: bool = True) -> None:
    _RESTART[0] = on


def restart_requested() -> bool:
    return _RESTART[0]


class RunMismatch(ConfigError):
    """The run folder belongs to another stage or config; the message names the differing keys."""


def flatten(d: dict, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _comparable(config: dict) -> dict[str, Any]:
    flat = flatten(config)
    for k in LOCATION_KEYS:
        flat.pop(k, None)
    return flat


def config_hash(cfg: RunConfig | dict) -> str:
    """sha256 (12 hex digits) of the config without its location keys."""
    d = with_retired(to_dict(cfg) if isinstance(cfg, RunConfig) else cfg)  # a removed field at its old value
    payload = json.dumps(_comparable(d), sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:12]


def config_differences(old: dict, new: dict) -> list[tuple[str, Any, Any]]:
    """(key, old value, new value) for every differing key. A key the old manifest lacks (a field added since)
    counts as its default; a key only the old one has (a field removed since) is ignored."""
    a, b = _comparable(old), _comparable(new)
    defaults = _comparable(to_dict(RunConfig()))
    diffs = []
    for key in sorted(b):
        before = a.get(key, defaults.get(key))
        if _norm(before) != _norm(b[key]):
            diffs.append((key, a.get(key, "<absent>"), b[key]))
    return diffs


def _norm(v: Any) -> Any:
    # JSON round trip: tuples -> lists, ints and floats compared as written in the manifest.
    return json.loads(json.dumps(v, default=str))


def read_manifest(run_dir: Path) -> dict | None:
    p = run_dir / "manifest.json"
    if not p.is_file():
        return None
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (ValueError, OSError) as e:
        raise RunMismatch(f"{p}: unreadable manifest ({type(e).__name__}: {e}); use another out_dir, or rerun with "
                          "--restart to discard this run folder") from e
    if not isinstance(data, dict):
        raise RunMismatch(f"{p}: not a run manifest (a JSON object); use another out_dir or --restart")
    return data


def check_reuse(run_dir: Path, config: dict, stage: str) -> None:
    """Refuse a run folder of another stage or another config (RunMismatch naming the keys); `config`: the
    resolved config's record (harness/config: to_dict), as the manifest holds it."""
    manifest = read_manifest(run_dir)
    if manifest is None:
        return
    where = run_dir / "manifest.json"
    fix = f"use another out_dir, or rerun with --restart to discard the {manifest.get('stage')} run in {run_dir}"
    if manifest.get("stage") != stage:
        raise RunMismatch(f"{where}: out_dir holds a {manifest.get('stage')!r} run, not {stage!r}; {fix}")
    old = manifest.get("config")
    if not isinstance(old, dict):
        raise RunMismatch(f"{where}: the manifest has no 'config' mapping; {fix}")
    diffs = config_differences(old, config)
    if diffs:
        shown = "; ".join(f"{k}: {v0!r} in the run, {v1!r} now" for k, v0, v1 in diffs[:6])
        more = f" (+{len(diffs) - 6} more)" if len(diffs) > 6 else ""
        done = "finished" if (run_dir / "metrics.json").is_file() else "unfinished"
        raise RunMismatch(f"{where}: the {done} {stage} run there has another config: {shown}{more}; {fix}")


# What a stage writes into its folder; --restart removes these (and nothing it does not know).
RUN_ENTRIES = ("manifest.json", "metrics.json", "steps.jsonl", "evals.jsonl", "samples.jsonl", "checkpoint",
               "checkpoint.new", "checkpoint.prev", "model", "model.old", "model.tmp", "classifier", "tb", "error.txt",
               "preemptions.jsonl")


def discard_run(run_dir: Path) -> None:
    """--restart: remove the run's records, checkpoints and outputs (the lock stays: we hold it)."""
    for name in RUN_ENTRIES:
        p = run_dir / name
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        elif p.exists() or p.is_symlink():
            p.unlink()
    for p in run_dir.glob("predictions_*.jsonl"):
        p.unlink()


def has_checkpoint(run_dir: Path) -> bool:
    """Whether any checkpoint generation (checkpoint/, checkpoint.new/, checkpoint.prev/) holds a state file."""
    # lazy: start-up cost (torch)
    from harness.runs.checkpoint_io import generations

    return any(g.is_dir() and any(p.suffix == ".pt" for p in g.iterdir()) for g in generations(run_dir / "checkpoint"))


def check_out_dir(run_dir: Path, key: str = "out_dir") -> None:
    for p in (run_dir, *run_dir.parents):
        if p.exists() and not p.is_dir():
            raise ConfigError(f"{key} = '{run_dir}': '{p}' is a file, not a folder; choose another {key}")
        if p.exists():
            break


__all__ = ["LOCATION_KEYS", "LOCK_NAME", "RunMismatch", "check_out_dir", "check_reuse", "config_differences",
           "config_hash", "discard_run", "has_checkpoint", "request_restart", "restart_requested"]
