"""`regbench eval --out DIR` on a folder that already holds that evaluation (issue 49): the evaluation of a model
of the same stage on the same split, its scores row in DIR/evals.jsonl and its predictions file beside it, is not
run again (before, a rerun decoded the split again and appended a second identical row). The command says so and
prints the stored scores; another --out evaluates again."""

from __future__ import annotations

import json
from pathlib import Path

from harness.runs.records import read_jsonl
from harness.runs.schema import EVALS_FILE


def model_stage(model: str | Path) -> str | None:
    """The stage of a model folder as `evaluate_model` labels its scores: its spec.json's stage, "base" for a
    plain model folder (or a hub id); None when spec.json is unreadable (the evaluation itself reports it)."""
    spec = Path(model) / "spec.json"
    if not spec.is_file():
        return "base"
    try:
        return json.loads(spec.read_text(encoding="utf-8")).get("stage")
    except (OSError, ValueError, AttributeError):
        return None


def predictions_file(out: str | Path, stage: str, split: str) -> Path:
    return Path(out) / f"predictions_{stage}_{split}.jsonl"  # as harness/stages/evaluate.py names it


def finished_evaluation(out: str | Path, model: str | Path, split: str) -> dict | None:
    """The scores row of a finished evaluation in `out` of a `model`-stage model on `split`, or None."""
    out = Path(out)
    stage = model_stage(model)
    if stage is None or not (out / EVALS_FILE).is_file() or not predictions_file(out, stage, split).is_file():
        return None
    try:
        rows = read_jsonl(out / EVALS_FILE)
    except (OSError, ValueError):
        return None
    for row in reversed(rows):
        if row.get("split") == split and row.get("stage") == stage and not row.get("label"):
            return row
    return None
