"""CheXpert F1 reward: per-sample F1 over the 14 binarised CheXpert-style labels (REVA-PO Supp. A).

`chexpert_f1(candidates, references)[i]` labels both texts with the project's rule labeler
(`rewards.chexpert.label_reports`), binarises the labels (positive = 1; negative, uncertain and blank = 0,
the CE protocol of `harness.scoring.evaluation.ce_scores`) and returns

    F1_i = 2 TP / (2 TP + FP + FN)      over the 14 observations (No Finding included).

Both-empty convention: when neither text has a positive label, the two binarised vectors are both all zero,
i.e. all 14 binarised labels agree, and the reward is 1.0 (the candidate reproduced the reference's label
vector exactly). One side empty and the other not gives 0.0 (no true positive). With this labeler a normal
report has No Finding = 1, so "no positive anywhere" only happens for texts with nothing labelable (e.g. an
empty report) or with uncertain findings only. `rewards.mccs.ce_f1` (MRG-R1's CE-F1) differs from this reward
in exactly this case: it follows the CE protocol's 0 / 0 = 0.

Reference labels are cached by text (a small LRU dict): in GRPO each reference appears G times per batch
and again every epoch. `context["ref_labels"]` (`[N, 14]`, CheXpert values) replaces the labeler for the
references, e.g. ground-truth labels of a synthetic data set.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

from harness.constants import NUM_OBSERVATIONS
from rewards.registry import register_reward

__all__ = ["binary_f1", "candidate_and_reference_labels", "chexpert_f1", "reference_labels"]

REFERENCE_CACHE_SIZE = 8192
_REFERENCE_CACHE: OrderedDict[str, np.ndarray] = OrderedDict()


def _label_unique(texts: Sequence[str], cache: OrderedDict[str, np.ndarray] | None) -> np.ndarray:
    """Labels `[N, 14]` of `texts`, labelling each distinct text once (and reusing `cache` when given)."""
    # lazy: tests replace label_reports at its source, read at call time
    from rewards.chexpert import label_reports

    out = np.full((len(texts), NUM_OBSERVATIONS), np.nan)
    missing: dict[str, list[int]] = {}
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(f"reports must be strings, got {type(text).__name__} at index {i}")
        if cache is not None and text in cache:
            cache.move_to_end(text)
            out[i] = cache[text]
        else:
            missing.setdefault(text, []).append(i)
    if missing:
        unique = list(missing)
        labels = label_reports(unique)
        for text, row in zip(unique, labels, strict=True):
            out[missing[text]] = row
            if cache is not None:
                cache[text] = row.copy()
                cache.move_to_end(text)
        if cache is not None:
            while len(cache) > REFERENCE_CACHE_SIZE:
                cache.popitem(last=False)
    return out


def reference_labels(references: Sequence[str], ref_labels: np.ndarray | None = None) -> np.ndarray:
    """Labels `[N, 14]` of the references: `ref_labels` if given (shape-checked), else the cached labeler."""
    if ref_labels is not None:
        labels = np.asarray(ref_labels, dtype=np.float64)
        if labels.shape != (len(references), NUM_OBSERVATIONS):
            raise ValueError(
                f"ref_labels has shape {labels.shape}, expected ({len(references)}, {NUM_OBSERVATIONS})"
            )
        return labels
    return _label_unique(references, _REFERENCE_CACHE)


def candidate_and_reference_labels(
    candidates: Sequence[str], references: Sequence[str], ref_labels: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Labels `[N, 14]` of candidates (each distinct text labelled once) and references (cached)."""
    if len(candidates) != len(references):
        raise ValueError(f"{len(candidates)} candidates but {len(references)} references")
    return _label_unique(candidates, None), reference_labels(references, ref_labels)


def binary_f1(hyp_labels: np.ndarray, ref_labels: np.ndarray, both_empty: float) -> np.ndarray:
    """Per-row F1 of binarised labels (positive = 1, all else 0); rows with no positive on either side get
    `both_empty`."""
    hyp = np.asarray(hyp_labels, dtype=np.float64) == 1.0  # nan == 1 is False
    ref = np.asarray(ref_labels, dtype=np.float64) == 1.0
    if hyp.shape != ref.shape or hyp.ndim != 2:
        raise ValueError(f"label arrays must have the same [N, K] shape, got {hyp.shape} and {ref.shape}")
    tp = (hyp & ref).sum(axis=1)
    denominator = hyp.sum(axis=1) + ref.sum(axis=1)  # = 2 TP + FP + FN
    safe = np.maximum(denominator, 1)
    return np.where(denominator > 0, 2.0 * tp / safe, float(both_empty))


def chexpert_f1(
    candidates: Sequence[str], references: Sequence[str], ref_labels: np.ndarray | None = None
) -> np.ndarray:
    """Per-sample CheXpert F1 of each candidate against its reference; see the module docstring."""
    hyp, ref = candidate_and_reference_labels(candidates, references, ref_labels)
    return binary_f1(hyp, ref, both_empty=1.0)


@register_reward("chexpert_f1")
def chexpert_f1_reward(candidates: list[str], references: list[str], **context) -> np.ndarray:
    """REVA-PO's CheXpert F1 reward (Supp. A) with the rule labeler; both without positives = 1.0."""
    return chexpert_f1(candidates, references, context.get("ref_labels"))
