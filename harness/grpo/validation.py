"""Validation score that picks the best policy for VAPR (REVA-PO Eq. 10 and the official code's variant), and the
event the trainer hands its validation callbacks."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

NLG_KEYS = ("BLEU_1", "BLEU_2", "BLEU_3", "BLEU_4", "METEOR", "ROUGE_L")


# The validation's completions, under this key of the validator's scores: [[id, prompt, completion, reward, gold]] per
# validation prompt (gold = the reference report). The trainer takes them out of the scores (they are no number of
# evals.jsonl) and hands them to the run's trackers as a table (harness/runs/trackers.py).
COMPLETIONS = "completions"
# `image`: the sample's first view (harness/runs/trackers.py shows it as an image: W&B Table, TensorBoard image)
COMPLETION_COLUMNS = ("id", "prompt", "completion", "reward", "gold", "image")
# Rows that carry their image (the first ones; the others None): a paper-size validation set at every validation
# would write thousands of images into the trackers (this project, issue 46).
COMPLETION_IMAGES = 16


def validation_score(scores: dict, mode: str = "paper", lam: float = 0.1, rg: float | None = None) -> float:
    """paper (Eq. 10): (sum_m m + lambda RG) / (|M| + 1); official: mean(M) + lambda RG.

    M = BLEU-1..4, METEOR, ROUGE-L. `rg` is the clinical term (RadGraph F1 or the offline entity F1); it must
    be given when lambda != 0.
    """
    missing = [k for k in NLG_KEYS if k not in scores]
    if missing:
        raise ValueError(f"validation scores lack {', '.join(missing)}")
    if lam != 0 and rg is None:
        raise ValueError("lambda != 0 needs the clinical term RG")
    m = [float(scores[k]) for k in NLG_KEYS]
    term = lam * (rg or 0.0)
    if mode == "paper":
        value = (sum(m) + term) / (len(m) + 1)
    elif mode == "official":
        value = sum(m) / len(m) + term
    else:
        raise ValueError(f"val_score must be 'paper' or 'official', got {mode!r}")
    return value if math.isfinite(value) else float("nan")


@dataclass(frozen=True)
class ValidationEvent:
    """What the trainer tells its `on_validation` callbacks after each validation (on every process).

    `metrics` is the row written to evals.jsonl (val_score, the NLG scores, best-tracking and reference events).
    A callback may end the run by raising harness.errors.RunPruned."""

    step: int
    score: float
    metrics: dict = field(default_factory=dict)


# A callback the trainer calls after every validation.
ValidationCallback = Callable[[ValidationEvent], None]
