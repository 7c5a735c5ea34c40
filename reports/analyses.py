"""REVA-PO Supp. A.1-A.3 statistics as pure functions on groups of candidates.

Every function takes rewards of shape [B, G]: row b holds the G candidates sampled for prompt b.

- `within_group_std(rewards)` (Supp. A.1, Fig. S5): the population std (divide by G, as in the advantage of
  Eq. 2) of each group's rewards, shape [B].
- `p_sign(bleu, f1)` (Supp. A.3): the probability that the sign of a candidate's BLEU-4 advantage agrees
  with the sign of its CheXpert-F1 advantage within its group. The advantage is Eq. 2,
  A = (R - mean_G R) / (std_G R + eps); as std + eps > 0, sign(A) = sign(R - mean_G R), which is computed in
  float64 and counted as 0 when |R - mean_G R| <= atol (1e-9). The headline (`zeros="paper"`) is the paper's
  formula exactly: the indicator sign(A_bleu) = sign(A_f1) averaged over all |D_val| x G candidates, with
  sign(0) = 0 (so two zero advantages agree and a zero against a non-zero one disagrees). A variant, labelled
  as such wherever it is shown (`zeros="exclude"`), counts only candidates whose two advantages are both
  non-zero: a group whose F1 rewards are all equal (frequent: F1 over 14 labels takes few values) carries no
  direction. `zeros="literal"` is an old name of "paper".
- `p_top1(bleu, f1)` (Supp. A.3): the probability that the BLEU-4-best candidate of a group is also its
  CheXpert-F1-best. Ties (values within atol of the group maximum are all "best"): by default
  (`ties="fractional"`) a group scores |best_bleu & best_f1| / |best_bleu|, i.e. the chance that a BLEU-best
  candidate picked uniformly at random is F1-best; `ties="strict"` scores 1 only when both argmaxes are
  unique and equal; `ties="any"` scores 1 when the two sets intersect. Groups in which BLEU-4 or F1 is
  constant (no ranking) are excluded unless `exclude_flat=False` (then a constant F1 makes every candidate
  F1-best). The paper gives no formula for P_top1; its denominator here is stated in every result
  (`denominator`): the groups in which both rewards vary (`n_groups_used` of `n_groups`).

All return a dict with `value` and the counts it rests on, so a report can state n.
"""

from __future__ import annotations

import math

import numpy as np

ATOL = 1e-9


def _as_groups(x, name: str) -> np.ndarray:
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim != 2:
        raise ValueError(f"{name} must be [B, G] (one row per prompt), got shape {arr.shape}")
    return arr


def _pair(a, b) -> tuple[np.ndarray, np.ndarray]:
    a, b = _as_groups(a, "bleu"), _as_groups(b, "f1")
    if a.shape != b.shape:
        raise ValueError(f"reward arrays differ in shape: {a.shape} vs {b.shape}")
    return a, b


def within_group_std(rewards) -> np.ndarray:
    """[B] population std of each group's rewards (Supp. A.1, Fig. S5)."""
    return _as_groups(rewards, "rewards").std(axis=1, ddof=0)


def within_group_std_summary(rewards) -> dict:
    """mean, median, quartiles and n of the per-group stds, and the share of groups with zero std."""
    s = within_group_std(rewards)
    if s.size == 0:
        return {"n_groups": 0, "mean": math.nan, "median": math.nan, "q25": math.nan, "q75": math.nan,
                "frac_zero_std": math.nan}
    q25, med, q75 = np.quantile(s, [0.25, 0.5, 0.75])
    return {"n_groups": int(s.size), "mean": float(s.mean()), "median": float(med), "q25": float(q25),
            "q75": float(q75), "frac_zero_std": float(np.mean(s <= ATOL))}


def advantage_signs(rewards, atol: float = ATOL) -> np.ndarray:
    """[B, G] in {-1, 0, 1}: the sign of the group-relative advantage (Eq. 2) of every candidate."""
    r = _as_groups(rewards, "rewards")
    centered = r - r.mean(axis=1, keepdims=True)
    return np.where(np.abs(centered) <= atol, 0, np.sign(centered)).astype(np.int64)


def p_sign(bleu, f1, zeros: str = "paper", atol: float = ATOL) -> dict:
    """Sign agreement of BLEU-4 and CheXpert-F1 advantages (see the module docstring)."""
    a, b = _pair(bleu, f1)
    sa, sb = advantage_signs(a, atol), advantage_signs(b, atol)
    if zeros in ("paper", "literal"):
        zeros = "paper"
        counted = np.ones_like(sa, dtype=bool)
        denominator = "all |D_val| x G candidates (REVA-PO Supp. A.3)"
    elif zeros == "exclude":
        counted = (sa != 0) & (sb != 0)
        denominator = "variant: candidates whose BLEU-4 and F1 advantages are both non-zero"
    else:
        raise ValueError(f"zeros must be 'paper' or 'exclude', got {zeros!r}")
    n = int(counted.sum())
    agree = int(((sa == sb) & counted).sum())
    return {"value": agree / n if n else math.nan, "n_counted": n, "n_agree": agree, "n_candidates": int(sa.size),
            "n_groups": int(a.shape[0]), "n_groups_used": int(counted.any(axis=1).sum()), "zeros": zeros,
            "denominator": denominator}


def best_sets(rewards, atol: float = ATOL) -> np.ndarray:
    """[B, G] bool: the candidates within atol of their group's maximum."""
    r = _as_groups(rewards, "rewards")
    return r >= r.max(axis=1, keepdims=True) - atol


def p_top1(bleu, f1, ties: str = "fractional", exclude_flat: bool = True, atol: float = ATOL) -> dict:
    """Probability that the BLEU-4-best candidate is also the CheXpert-F1-best (see the module docstring)."""
    a, b = _pair(bleu, f1)
    if ties not in ("fractional", "strict", "any"):
        raise ValueError(f"ties must be 'fractional', 'strict' or 'any', got {ties!r}")
    best_a, best_b = best_sets(a, atol), best_sets(b, atol)
    flat = (np.ptp(a, axis=1) <= atol) | (np.ptp(b, axis=1) <= atol)
    used = ~flat if exclude_flat else np.ones(a.shape[0], dtype=bool)
    both = (best_a & best_b).sum(axis=1)
    if ties == "fractional":
        score = both / best_a.sum(axis=1)
    elif ties == "strict":
        score = ((best_a.sum(axis=1) == 1) & (best_b.sum(axis=1) == 1) & (both == 1)).astype(np.float64)
    else:
        score = (both > 0).astype(np.float64)
    n = int(used.sum())
    denominator = (f"{n} of {a.shape[0]} groups (those where both BLEU-4 and F1 vary)" if exclude_flat
                   else f"all {a.shape[0]} groups")
    return {"value": float(score[used].mean()) if n else math.nan, "n_groups_used": n,
            "n_groups": int(a.shape[0]), "n_flat": int(flat.sum()), "ties": ties, "exclude_flat": exclude_flat,
            "denominator": denominator}


def sign_alignment(bleu, f1) -> dict:
    """Both Supp. A.3 statistics: P_sign by the paper's formula, its non-zero-advantage variant, P_top1."""
    return {"p_sign": p_sign(bleu, f1), "p_sign_nonzero": p_sign(bleu, f1, zeros="exclude"),
            "p_top1": p_top1(bleu, f1)}


def _num(v, digits: int = 3) -> str:
    """A number, or "n/a" for NaN or the null JSON holds in its place (e.g. P_sign with nothing to count)."""
    return "n/a" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.{digits}f}"


def policy_stats(kind: str, rewards: dict) -> dict:
    """The statistics of one policy's stored rewards: sign alignment, or the within-group std summary per reward."""
    if kind == "sign-alignment":
        return sign_alignment(rewards["bleu4"], rewards["chexpert_f1"])
    return {name: within_group_std_summary(r) for name, r in rewards.items()}


def summary_lines(record: dict) -> list[str]:
    """Short lines about an analysis record (harness/stages/analyze.py's file), recomputed from its rewards."""
    lines = [f"{record['kind']}: {record['n_prompts']} prompts x G={record['group_size']} (seed {record['seed']})"]
    for pol, res in record["policies"].items():
        st = policy_stats(record["kind"], res["rewards"])
        if record["kind"] == "sign-alignment":
            lines.append(f"  {pol:6s} P_sign={_num(st['p_sign']['value'])} (n={st['p_sign']['n_counted']})  "
                         f"P_top1={_num(st['p_top1']['value'])} (groups={st['p_top1']['n_groups_used']})")
        else:
            lines.append(f"  {pol:6s} " + "  ".join(f"{k}: mean std {_num(v['mean'], 4)}" for k, v in st.items()))
    return lines
