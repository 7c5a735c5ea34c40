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
    # group 1: BLEU signs (-,-,+,+), F1 signs (-,0,0,+): counted candidates 0 and 3, both agree
    # group 2: BLEU signs (+,+,-,-), F1 signs (+,-,-,+): all counted, candidates 0 and 2 agree
    res = p_sign(BLEU, F1)
    assert (res["n_agree"], res["n_counted"], res["n_candidates"]) == (4, 6, 8)
    assert res["value"] == pytest.approx(4 / 6)
    # literal formula over all 8 candidates; candidates 1, 2 of group 1 have sign(0) = 0 != -1, +1
    lit = p_sign(BLEU, F1, zeros="literal")
    assert lit["value"] == pytest.approx(4 / 8)
    # a flat F1 group contributes nothing (excluded) / agrees only where BLEU is 0 too (literal)
    flat = p_sign([[0.1, 0.2, 0.2, 0.1]], [[0.4, 0.4, 0.4, 0.4]])
    assert flat["n_counted"] == 0 and math.isnan(flat["value"])
    assert p_sign([[0.2, 0.2]], [[0.4, 0.4]], zeros="literal")["value"] == 1.0
    # scale invariance: advantages are normalised, signs only
    assert p_sign(np.array(BLEU) * 100, F1)["value"] == res["value"]
    with pytest.raises(ValueError):
        p_sign(BLEU, F1, zeros="maybe")


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
    assert set(out) == {"p_sign", "p_sign_literal", "p_top1"}
    assert out["p_sign"]["value"] == pytest.approx(4 / 6)
    with pytest.raises(ValueError, match="shape"):
        p_top1(BLEU, [[0.1, 0.2]])
