"""DiTPO's reward (paper 003: "a diagnostic F1 score as the reward signal"): `diagnostic_f1`.

The paper's text available to this project names the reward and evaluates clinical efficacy with the usual
CE precision / recall / F1 over the 14 CheXpert observations; it gives no per-report formula. This project's
reading: the per-report F1 of the 14 binarised labels (positive = 1; negative, uncertain and blank = 0) of the
candidate against its reference, `2 TP / (2 TP + FP + FN)`, and 1.0 when neither has a positive (both label
vectors agree; the CE protocol's 0 / 0 = 0 would give a correct normal report no reward). Labels come from the
project's rule labeler (DiTPO uses CheXbert; `eval.ce_backend` / rewards/chexbert.py where its weights exist).
That is exactly REVA-PO's CheXpert F1 (`rewards.chexpert_f1`), so `diagnostic_f1` is that function under DiTPO's
name: the reward matrix's `chexpert_f1` arm is DiTPO's reward without token weights (its "GRPO" row), the
`ditpo` arm adds the gradient-based weights and `ditpo_tfidf` the TF-IDF ones.
"""

from __future__ import annotations

import numpy as np

from rewards.chexpert_f1 import chexpert_f1
from rewards.registry import register_reward

__all__ = ["diagnostic_f1_reward"]


@register_reward("diagnostic_f1")
def diagnostic_f1_reward(candidates: list[str], references: list[str], **context) -> np.ndarray:
    """DiTPO's diagnostic F1 reward (paper 003) as this project reads it: per-report F1 of the 14 binarised rule
    labels, 1.0 when neither text has a positive (module docstring)."""
    return chexpert_f1(candidates, references, context.get("ref_labels"))
