"""Which epoch's weights the classifier keeps: lowest validation loss (this project's) or highest mean AUC (the
official REVA-PO classifier: reva_po/tasks/report_generation.py `compute_metrics`, agg_metrics = the NaN-ignoring
mean of scikit-learn's per-label ROC AUC; reva_po/runners/runner_base.py keeps an epoch whose agg_metrics is
strictly above the best so far)."""

from __future__ import annotations

import numpy as np


def scorable_labels(targets: np.ndarray) -> np.ndarray:
    """Indices of the labels with both classes (a 1 and a non-1) among the validation targets [N, 14]; the AUC of
    any other label is undefined (the official code's NaN, left out of its mean)."""
    positive = np.asarray(targets) == 1
    return np.flatnonzero(positive.any(axis=0) & (~positive).any(axis=0))


def mean_auc(probs: np.ndarray, targets: np.ndarray) -> float | None:
    """The mean of sklearn's roc_auc_score over the labels with both classes in `targets`; None when none has."""
    # lazy: start-up cost (sklearn)
    from sklearn.metrics import roc_auc_score

    labels = scorable_labels(targets)
    if len(labels) == 0:
        return None
    positive = (np.asarray(targets) == 1).astype(np.int64)
    return float(np.mean([roc_auc_score(positive[:, c], np.asarray(probs)[:, c]) for c in labels]))
