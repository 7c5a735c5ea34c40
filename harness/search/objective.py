"""A search's objective (harness/search/run.py): which numbers of a trial's run records it optimises, and reading
them back (RL validation rows, the saved policy's score, or a test-split metric)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.runs.records import read_json, read_jsonl

# Objectives read from the RL stage's evals.jsonl (validation rows after the first optimizer step) ...
VAL_OBJECTIVES = {
    "val_selected": "validation score (Eq. 10) of the RL policy the arm saves and tests (rl.select)",
    "val_final": "validation score (Eq. 10) of the final RL policy",
    "val_best": "best validation score during RL",
    "val_mean": "mean validation score during RL (rewards stable runs)",
}

# ... or `test:<metric>` from the arm's test evaluation (eval/metrics.json), e.g. test:BLEU_4.
TEST_PREFIX = "test:"

def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)

def objective_from_evals(rows: list[dict], metric: str) -> float:
    """val_final / val_best / val_mean over the validation rows written after RL started (step > 0)."""
    scores = [float(r["val_score"]) for r in rows
              if r.get("split") == "val" and r.get("val_score") is not None and r.get("step", 0) > 0]
    if not scores:
        raise ValueError("no validation score after the first RL step in evals.jsonl")
    if metric == "val_final":
        return scores[-1]
    if metric == "val_best":
        return max(scores)
    if metric == "val_mean":
        return sum(scores) / len(scores)
    raise ValueError(f"unknown validation objective {metric!r}")


def run_objective(out: Path, run: dict, metric: str) -> float:
    """The objective of one (arm, seed) run of the experiment index."""
    if metric.startswith(TEST_PREFIX):
        key = metric[len(TEST_PREFIX):]
        scores = read_json(out / run["metrics"])
        if not is_number(scores.get(key)):
            raise ValueError(f"{out / run['metrics']}: no numeric '{key}' (objective {metric})")
        return float(scores[key])
    if metric == "val_selected":
        # The policy the RL stage saved: its score as recorded with the selection (metrics.json).
        path = out / run["stages"]["rl"]["dir"] / "metrics.json"
        value = read_json(path).get("selected_score")
        if not is_number(value):
            raise ValueError(f"{path}: no numeric 'selected_score' (objective val_selected)")
        return float(value)
    evals = out / run["stages"]["rl"]["dir"] / "evals.jsonl"
    try:
        return objective_from_evals(read_jsonl(evals), metric)
    except ValueError as e:
        raise ValueError(f"{evals}: {e}") from e
