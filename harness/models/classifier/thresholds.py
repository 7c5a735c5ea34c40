"""Per-class decision thresholds (F1-optimal on validation) and the predicted names put into the prompt."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from harness.constants import NO_FINDING, NUM_OBSERVATIONS, OBSERVATIONS


def _best_threshold(probs: np.ndarray, targets: np.ndarray, candidates: np.ndarray) -> float:
    positives = np.sort(probs[targets == 1])
    negatives = np.sort(probs[targets != 1])
    n_pos = len(positives)
    if n_pos == 0:
        return 0.5  # F1 is undefined without positives: keep the neutral threshold
    # Predicted positive means prob >= threshold; count with binary search, one pass per class.
    tp = n_pos - np.searchsorted(positives, candidates, side="left")
    fp = len(negatives) - np.searchsorted(negatives, candidates, side="left")
    fn = n_pos - tp
    f1 = 2 * tp / np.maximum(2 * tp + fp + fn, 1)
    # Tie-break: maximal F1 (to 1e-12), then closest to 0.5, then the larger threshold (fewer positives).
    best = np.flatnonzero(f1 >= f1.max() - 1e-12)
    order = np.lexsort((-candidates[best], np.abs(candidates[best] - 0.5)))
    return float(candidates[best[order[0]]])


def choose_thresholds(
    probs: np.ndarray, targets: np.ndarray, grid: Sequence[float] | np.ndarray | None = None
) -> np.ndarray:
    """Per class, the threshold (predict positive iff prob >= threshold) that maximises validation F1.

    Candidates: with `grid=None`, the class's sorted unique validation probabilities plus 0.5 (this covers
    every distinct split of the validation set); otherwise the given grid (e.g. `np.linspace(0.05, 0.95, 19)`)
    for every class. Ties in F1 go to the candidate closest to 0.5, then to the larger one. A class with no
    positive in `targets` gets 0.5. Returns float64 [14].
    """
    probs = np.asarray(probs, dtype=np.float64)
    targets = np.asarray(targets)
    if probs.shape != targets.shape or probs.ndim != 2:
        raise ValueError(f"probs {probs.shape} and targets {targets.shape} must be equal [N, C] shapes")
    fixed = None if grid is None else np.unique(np.asarray(grid, dtype=np.float64))
    if fixed is not None and fixed.size == 0:
        raise ValueError("grid must not be empty")
    thresholds = np.empty(probs.shape[1])
    for c in range(probs.shape[1]):
        candidates = fixed if fixed is not None else np.unique(np.append(probs[:, c], 0.5))
        thresholds[c] = _best_threshold(probs[:, c], targets[:, c], candidates)
    return thresholds


def predict_labels(probs: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    """Binary predictions [N, 14] (int64): 1 where prob >= the class threshold."""
    probs = np.asarray(probs, dtype=np.float64)
    thresholds = np.asarray(thresholds, dtype=np.float64)
    if probs.ndim != 2 or thresholds.shape != (probs.shape[1],):
        raise ValueError(f"thresholds {thresholds.shape} need one entry per column of probs {probs.shape}")
    return (probs >= thresholds[None, :]).astype(np.int64)


def positive_names(row: Sequence[int] | np.ndarray, fill_empty: bool = True) -> list[str]:
    """Names of the observations predicted positive, in OBSERVATIONS order; ["No Finding"] if none is (`fill_empty`,
    this project), else [] (the official code, reva_po/models/reva.py: the prompt then lists []).

    These are the disease cues D put into the stage-2/3 prompt (Sec. 3.2). No Finding is kept as predicted,
    even next to findings: the paper appends the predicted labels as they are.
    """
    row = np.asarray(row)
    if row.shape != (NUM_OBSERVATIONS,):
        raise ValueError(f"row must have shape [{NUM_OBSERVATIONS}], got {row.shape}")
    names = [name for name, value in zip(OBSERVATIONS, row, strict=True) if value == 1]
    return names or ([OBSERVATIONS[NO_FINDING]] if fill_empty else [])
