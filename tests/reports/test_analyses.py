"""reports/analyses.py: Supp. A.1-A.3 statistics on hand-made groups."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from harness.grpo import group_advantages
from reports.analyses import advantage_signs, p_sign, p_top1, sign_alignment, within_group_std

BLEU = [[0.1, 0.2, 0.3, 0.4], [0.5, 0.5, 0.1, 0.3]]
F1 = [[0.0, 0.5, 0.5, 1.0], [1.0, 0.0, 0.0, 1.0]]


def test_within_group_std_is_population_std():
    s = within_group_std([[1.0, 1.0, 1.0, 1.0], [0.0, 1.0, 0.0, 1.0]])
    assert s.tolist() == [0.0, 0.5]
    with pytest.raises(ValueError, match=r"\[B, G\]"):
        within_group_std([1.0, 2.0])


def test_advantage_signs_match_group_advantages():
    r = np.random.default_rng(0).random((6, 4))
    r[0] = 0.5  # a flat group: all advantages 0
    r[1, :2] = 0.2
    a = group_advantages(torch.tensor(r, dtype=torch.float64)).numpy()
    assert (advantage_signs(r) == np.sign(np.where(np.abs(a) < 1e-9, 0, a))).all()


def test_p_sign_by_hand():
    # group 1: BLEU signs (-,-,+,+), F1 signs (-,0,0,+): candidates 0 and 3 agree, 1 and 2 do not (0 vs -/+)
    # group 2: BLEU signs (+,+,-,-), F1 signs (+,-,-,+): candidates 0 and 2 agree
    res = p_sign(BLEU, F1)  # the paper's formula: all |D_val| x G = 8 candidates
    assert (res["n_agree"], res["n_counted"], res["n_candidates"]) == (4, 8, 8)
    assert res["value"] == pytest.approx(4 / 8) and res["zeros"] == "paper"
    # the variant: only the 6 candidates with two non-zero advantages
    var = p_sign(BLEU, F1, zeros="exclude")
    assert (var["n_agree"], var["n_counted"]) == (4, 6) and var["value"] == pytest.approx(4 / 6)
    assert "variant" in var["denominator"] and "all |D_val| x G" in res["denominator"]
    # a flat F1 group: agreement only where BLEU's advantage is 0 too (paper) / nothing counted (variant)
    flat = p_sign([[0.1, 0.2, 0.2, 0.1]], [[0.4, 0.4, 0.4, 0.4]], zeros="exclude")
    assert flat["n_counted"] == 0 and math.isnan(flat["value"])
    assert p_sign([[0.2, 0.2]], [[0.4, 0.4]])["value"] == 1.0
    assert p_sign([[0.1, 0.2, 0.2, 0.1]], [[0.4, 0.4, 0.4, 0.4]])["value"] == 0.0
    # scale invariance: advantages are normalised, signs only
    assert p_sign(np.array(BLEU) * 100, F1)["value"] == res["value"]
    assert p_sign(BLEU, F1, zeros="literal")["value"] == res["value"]  # the old name of the paper's formula
    with pytest.raises(ValueError):
        p_sign(BLEU, F1, zeros="maybe")


def test_p_sign_is_the_papers_formula_on_eq2_advantages():
    """(1 / (|D_val| G)) sum_i sum_j 1[sign(A_ij^BLEU) = sign(A_ij^F1)], A from Eq. 2 (harness.grpo), with groups
    that are flat, tied and varied."""
    rng = np.random.default_rng(7)
    bleu = rng.random((40, 4)).round(1)
    f1 = rng.choice([0.0, 0.5, 1.0], size=(40, 4))
    f1[:5] = 0.5  # flat groups: every F1 advantage is 0
    adv_b = group_advantages(torch.tensor(bleu, dtype=torch.float64)).numpy()
    adv_f = group_advantages(torch.tensor(f1, dtype=torch.float64)).numpy()

    def sign(a):
        return np.sign(np.where(np.abs(a) < 1e-9, 0.0, a))

    expected = float(np.mean(sign(adv_b) == sign(adv_f)))
    assert p_sign(bleu, f1)["value"] == pytest.approx(expected, abs=1e-15)
    assert p_sign(bleu, f1)["n_counted"] == 40 * 4


def test_p_top1_by_hand_and_ties():
    # group 1: BLEU best {3}, F1 best {3} -> 1; group 2: BLEU best {0, 1}, F1 best {0, 3}
    assert p_top1(BLEU, F1)["value"] == pytest.approx((1 + 1 / 2) / 2)  # fractional: 1 of 2 BLEU-best
    assert p_top1(BLEU, F1, ties="strict")["value"] == pytest.approx(1 / 2)
    assert p_top1(BLEU, F1, ties="any")["value"] == pytest.approx(1.0)
    mismatch = p_top1([[0.9, 0.1, 0.2]], [[0.0, 1.0, 0.5]])
    assert mismatch["value"] == 0.0 and mismatch["n_groups_used"] == 1
    # flat groups (either reward constant) are excluded unless asked
    flat = [[0.3, 0.1, 0.2], [0.1, 0.2, 0.3]]
    f1 = [[0.5, 0.5, 0.5], [0.0, 0.0, 1.0]]
    res = p_top1(flat, f1)
    assert (res["value"], res["n_groups_used"], res["n_flat"]) == (1.0, 1, 1)
    assert p_top1(flat, f1, exclude_flat=False)["value"] == 1.0  # constant F1: everything is F1-best
    assert math.isnan(p_top1([[0.1, 0.1]], [[0.2, 0.3]])["value"])


def test_sign_alignment_bundle():
    out = sign_alignment(BLEU, F1)
    assert set(out) == {"p_sign", "p_sign_nonzero", "p_top1"}
    assert out["p_sign"]["value"] == pytest.approx(4 / 8) and out["p_sign_nonzero"]["value"] == pytest.approx(4 / 6)
    assert out["p_top1"]["denominator"] == "2 of 2 groups (those where both BLEU-4 and F1 vary)"
    with pytest.raises(ValueError, match="shape"):
        p_top1(BLEU, [[0.1, 0.2]])
