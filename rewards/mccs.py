"""MRG-R1's clinical rewards (paper 002, Wang et al., "MRG-R1"): CE-F1 and MCCS.

Both label the candidate and the reference with a CheXpert-style labeler. MRG-R1 uses CheXbert; this
module uses the project's rule labeler (`rewards.chexpert.label_reports`, the `rules` backend), so the
numbers are "MRG-R1's reward definitions on rule labels". Reference labels are cached and can be
overridden by `context["ref_labels"]` (`[N, 14]`), as in `rewards.chexpert_f1`.

`ce_f1` (MRG-R1's "report-level CE-F1" reward). MRG-R1 evaluates CE over the 14 observations with the
standard protocol (positive = 1, everything else 0) and does not spell out the reward's formula; we read the
reward as that CE-F1 computed per report:

    CE-F1_i = 2 TP / (2 TP + FP + FN),    and 0 when neither side has a positive (the protocol's 0 / 0 = 0).

It is the per-sample (example-based) F1 of `harness.scoring.evaluation.ce_scores`: the batch mean of `ce_f1` equals
`ce_scores(...)["ce_example_f1"]`. It differs from `rewards.chexpert_f1` (REVA-PO's CheXpert F1) only where
neither text has a positive label: there `chexpert_f1` gives 1.0 and `ce_f1` gives 0.0.

`mccs` (Margin CheXbert Cosine Similarity). What MRG-R1's text states: labels become signed vectors over the
13 observations without No Finding (positive 1, uncertain 1, negative -1, blank 0), compared by the cosine
similarity `s` of the candidate's and the reference's vectors, with a margin that "suppresses weak matches".
This project's choice (the text gives no formula): reward = `max((s - m) / (1 - m), 0)`, so similarities at or
below the margin m give 0 and a perfect match gives 1.

Cases MRG-R1 leaves open, defined here:
- one vector zero, the other not: the cosine is undefined; the reward is 0.0 (whatever the margin): one
  report states findings the other does not mention at all;
- both vectors zero (neither text mentions any of the 13 observations): 1.0 when both texts agree on
  No Finding (both say the study is normal, or neither has anything labelable, e.g. two empty texts),
  else 0.0. With the rule labeler a zero vector has No Finding = 1 ("no acute cardiopulmonary process") or
  blank (nothing labelable), so an empty candidate does not earn full reward against a "normal study"
  reference.
- the margin must satisfy -1 <= m < 1 (m = 1 divides by zero); m = -1 gives (s + 1) / 2.

`mccs_normal` (issue 42): the same reward, except for one case. A correct short normal report ("no acute
cardiopulmonary process .") has an all-zero vector (it mentions none of the 13 observations: blank 0 by the
paper's definition, and No Finding is excluded), while a normal reference usually lists negatives ("no pleural
effusion or pneumothorax": -1 entries), so `mccs` gives it 0.0 although its CE-F1 is 1.0 (both have No Finding).
With `normal_agreement=True` (this project's rule, where the paper is silent: the cosine is undefined) a zero
vector against a non-zero one gives 1.0 when both reports say No Finding (label 1) and the non-zero vector has no
positive or uncertain entry (the other report only rules observations out), else 0.0 as before. The vectors
themselves stay the paper's; every pair with two non-zero vectors, and two zero vectors, score as in `mccs`.
`mrg_r1_normal` is `mrg_r1` with it (rewards/composite.py). `mccs` and `mrg_r1` keep their numbers (the runs
recorded with them, and their stage-run keys, stay valid).

Margin default: the MRG-R1 text available to this project (paper 002, its equations stripped) says only that
a margin "suppresses weak matches": neither the value of m nor how it enters the reward. `DEFAULT_MARGIN = 0.5`
and the shaping above are therefore this project's choices, to be replaced by MRG-R1's once confirmed;
`make_mccs(margin)` builds the reward for any other value (and registers it under a name, if asked).
docs/paper_vs_code.md ("MRG-R1") lists what the `mrg_r1` arm takes from the paper and what is this project's.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from harness.constants import NO_FINDING, NUM_OBSERVATIONS
from rewards.chexpert_f1 import binary_f1, candidate_and_reference_labels
from rewards.registry import register_reward

__all__ = ["DEFAULT_MARGIN", "ce_f1", "make_mccs", "margin_cosine", "mccs", "mccs_normal", "signed_vectors"]

DEFAULT_MARGIN = 0.5
_KEEP = np.array([i for i in range(NUM_OBSERVATIONS) if i != NO_FINDING])


def ce_f1(candidates: Sequence[str], references: Sequence[str], ref_labels: np.ndarray | None = None) -> np.ndarray:
    """MRG-R1's per-sample CE-F1 of binarised labels (0 when neither side has a positive)."""
    hyp, ref = candidate_and_reference_labels(candidates, references, ref_labels)
    return binary_f1(hyp, ref, both_empty=0.0)


@register_reward("ce_f1")
def ce_f1_reward(candidates: list[str], references: list[str], **context) -> np.ndarray:
    """MRG-R1's report-level CE-F1 reward (paper 002, Table 2 "+CE-F1"): example-based F1 of the 14
    binarised labels, 0 / 0 = 0 as in the CE protocol."""
    return ce_f1(candidates, references, context.get("ref_labels"))


def signed_vectors(labels: np.ndarray) -> np.ndarray:
    """CheXpert labels `[N, 14]` -> MRG-R1's signed vectors `[N, 13]` (No Finding dropped): positive and
    uncertain 1, negative -1, blank 0."""
    labels = np.asarray(labels, dtype=np.float64)
    if labels.ndim != 2 or labels.shape[1] != NUM_OBSERVATIONS:
        raise ValueError(f"labels must have shape [N, {NUM_OBSERVATIONS}], got {labels.shape}")
    kept = labels[:, _KEEP]
    return np.where((kept == 1.0) | (kept == -1.0), 1.0, np.where(kept == 0.0, -1.0, 0.0))


def _check_margin(margin: float) -> float:
    margin = float(margin)
    if not (math.isfinite(margin) and -1.0 <= margin < 1.0):
        raise ValueError(f"MCCS margin must satisfy -1 <= margin < 1, got {margin}")
    return margin


def margin_cosine(
    hyp_labels: np.ndarray, ref_labels: np.ndarray, margin: float = DEFAULT_MARGIN, normal_agreement: bool = False
) -> np.ndarray:
    """MCCS of label arrays `[N, 14]`: `max((cos - m) / (1 - m), 0)` of the signed vectors; zero vectors as in
    the module docstring (`normal_agreement`: the rule of `mccs_normal` for one zero vector)."""
    margin = _check_margin(margin)
    hyp_labels = np.asarray(hyp_labels, dtype=np.float64)
    ref_labels = np.asarray(ref_labels, dtype=np.float64)
    if hyp_labels.shape != ref_labels.shape:
        raise ValueError(f"label arrays differ in shape: {hyp_labels.shape} vs {ref_labels.shape}")
    u, v = signed_vectors(hyp_labels), signed_vectors(ref_labels)
    # Integer entries: dot products and squared norms are exact, so identical vectors give exactly 1.
    nu, nv = (u * u).sum(axis=1), (v * v).sum(axis=1)
    both_nonzero = (nu > 0) & (nv > 0)
    cosine = np.where(both_nonzero, (u * v).sum(axis=1) / np.sqrt(np.where(both_nonzero, nu * nv, 1.0)), 0.0)
    cosine = np.clip(cosine, -1.0, 1.0)
    score = np.maximum((cosine - margin) / (1.0 - margin), 0.0)
    both_zero = (nu == 0) & (nv == 0)
    nf_h, nf_r = hyp_labels[:, NO_FINDING], ref_labels[:, NO_FINDING]
    nf_agree = (nf_h == nf_r) | (np.isnan(nf_h) & np.isnan(nf_r))
    one_zero = np.zeros(len(u))
    if normal_agreement:
        # Project's rule (the cosine is undefined): both say No Finding, and the report that names observations
        # names none present or possible.
        named = np.where((nu > 0)[:, None], u, v)
        one_zero = ((nf_h == 1.0) & (nf_r == 1.0) & ~(named > 0).any(axis=1)).astype(np.float64)
    return np.where(both_zero, nf_agree.astype(np.float64), np.where(both_nonzero, score, one_zero))


def mccs(
    candidates: Sequence[str],
    references: Sequence[str],
    ref_labels: np.ndarray | None = None,
    margin: float = DEFAULT_MARGIN,
    normal_agreement: bool = False,
) -> np.ndarray:
    """MRG-R1's MCCS of each candidate against its reference (rule labels); see the module docstring."""
    margin = _check_margin(margin)
    hyp, ref = candidate_and_reference_labels(candidates, references, ref_labels)
    return margin_cosine(hyp, ref, margin, normal_agreement=normal_agreement)


def make_mccs(margin: float, register_as: str | None = None,
              normal_agreement: bool = False) -> Callable[..., np.ndarray]:
    """An MCCS reward function with margin `margin` (and `mccs_normal`'s rule when `normal_agreement`); registered
    under `register_as` when given."""
    margin = _check_margin(margin)

    def reward(candidates: list[str], references: list[str], **context) -> np.ndarray:
        return mccs(candidates, references, context.get("ref_labels"), margin=margin,
                    normal_agreement=normal_agreement)

    reward.__name__ = f"mccs_m{margin:g}" + ("_normal" if normal_agreement else "")
    reward.__doc__ = f"MRG-R1's MCCS reward (paper 002) with margin {margin:g}" + (
        ", a correct normal report credited (normal_agreement)." if normal_agreement else ".")
    if register_as is not None:
        register_reward(register_as)(reward)
    return reward


@register_reward("mccs")
def mccs_reward(candidates: list[str], references: list[str], **context) -> np.ndarray:
    """MRG-R1's Margin CheXbert Cosine Similarity reward (paper 002) on rule labels; margin DEFAULT_MARGIN and
    the shaping are this project's (module docstring)."""
    return mccs(candidates, references, context.get("ref_labels"), margin=DEFAULT_MARGIN)


@register_reward("mccs_normal")
def mccs_normal(candidates: list[str], references: list[str], **context) -> np.ndarray:
    """MCCS (paper 002's signed vectors, margin DEFAULT_MARGIN) with this project's rule for one zero vector: a
    report that says No Finding and names no observation earns 1.0 against a No Finding report that only rules
    observations out (module docstring; issue 42)."""
    return mccs(candidates, references, context.get("ref_labels"), margin=DEFAULT_MARGIN, normal_agreement=True)
