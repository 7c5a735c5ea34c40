"""Non-finite RL steps (issue 13): what makes a step's inputs unusable, and the count of skipped steps.

The checks on the gradient (and the agreement of all processes on a skip) are the updater's
(harness/parallel/updater.py, `Updater.update`); the trainer checks what only it can name (rewards, the frozen
policies' and the current policy's logits, the loss) and counts the skipped steps here: rl.max_nonfinite_steps in
a row stop the run with a checkpoint.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch


def new_counts() -> dict:
    """Skipped steps: in a row, in total, and the message of the first of the current row."""
    return {"in_a_row": 0, "total": 0, "first": None}


def reward_problem(name: str, raw: np.ndarray, adv: torch.Tensor) -> str | None:
    """Why the rewards of reward `name` cannot train (None when they can)."""
    bad = ~np.isfinite(raw) | (np.abs(raw) > np.finfo(np.float32).max)
    if bad.any():
        return (f"reward {name!r} returned {int(bad.sum())} value(s) that are not finite in float32 (e.g. "
                f"{float(raw[bad][0])!r}); rewards must be finite numbers of moderate size")
    if not bool(torch.isfinite(adv).all()):
        return (f"reward {name!r} gave non-finite advantages (Eq. 2; rewards from {raw.min():.3g} to "
                f"{raw.max():.3g}): rewards too large for the group mean and std in float32")
    return None


def frozen_problem(frozen: dict) -> str | None:
    """Why the frozen passes cannot train (None when they can): `frozen` maps a policy's name to its (log-probs,
    entropies or None)."""
    for name, (lp, ent) in frozen.items():
        if not (torch.isfinite(lp).all() and (ent is None or torch.isfinite(ent).all())):
            return f"logits of the {name} policy are not finite"
    return None


def count_skipped(counts: dict, step: int, cause: str, main: bool = True) -> dict:
    """Count skipped step `step` (1-based) in `counts`; its log fields."""
    message = f"step {step}: {cause}"
    counts["in_a_row"] += 1
    counts["total"] += 1
    if counts["in_a_row"] == 1:
        counts["first"] = message
    if main:
        print(f"[rl] skipped {message} (no optimizer step; {counts['in_a_row']} in a row)", file=sys.stderr)
    return {"skipped": True, "nonfinite_cause": cause, "nonfinite_in_a_row": counts["in_a_row"],
            "nonfinite_total": counts["total"]}


def count_taken(counts: dict) -> None:
    """A step taken ends the row of skipped ones."""
    counts["in_a_row"], counts["first"] = 0, None


def stop_error(counts: dict, limit: int, step: int, folder: Path) -> FloatingPointError:
    """The error that stops a run after `limit` (rl.max_nonfinite_steps) skipped steps in a row, at `step`."""
    return FloatingPointError(
        f"{counts['in_a_row']} RL steps in a row were not finite and skipped (rl.max_nonfinite_steps = {limit}); "
        f"the first: {counts['first']}. The run stopped at step {step} with a checkpoint in {folder}: rerun to resume")
