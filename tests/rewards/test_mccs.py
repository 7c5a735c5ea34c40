"""Tests of MRG-R1's CE-F1 and MCCS rewards (rewards/mccs.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from harness.constants import NUM_OBSERVATIONS, OBSERVATIONS
from harness.scoring.evaluation import ce_scores
from rewards.chexpert import label_reports
from rewards.chexpert_f1 import chexpert_f1
from rewards.mccs import DEFAULT_MARGIN, ce_f1, make_mccs, margin_cosine, mccs, signed_vectors
from rewards.registry import REWARDS
from rewards.spec import compute_reward

IDX = {name: i for i, name in enumerate(OBSERVATIONS)}


def labels(**values: float) -> np.ndarray:
    """One label row [1, 14]; keyword names are observation names with spaces replaced by underscores."""
    row = np.full((1, NUM_OBSERVATIONS), np.nan)
    for key, value in values.items():
        row[0, IDX[key.replace("_", " ")]] = value
    return row


def test_signed_vectors_drop_no_finding_and_map_values():
    row = labels(No_Finding=1, Cardiomegaly=1, Edema=-1, Pleural_Effusion=0, Fracture=np.nan)
    vec = signed_vectors(row)
    assert vec.shape == (1, 13)
    expected = np.zeros(13)
    expected[IDX["Cardiomegaly"] - 1] = 1  # positive
    expected[IDX["Edema"] - 1] = 1  # uncertain counts as positive
    expected[IDX["Pleural Effusion"] - 1] = -1  # negative
    assert vec[0].tolist() == expected.tolist()


def test_margin_cosine_hand_computed():
    hyp = labels(Cardiomegaly=1, Pleural_Effusion=1, Pneumothorax=0)  # (1, 1, -1)
    ref = labels(Cardiomegaly=1, Pleural_Effusion=1)  # (1, 1, 0)
    cos = 2 / (math.sqrt(3) * math.sqrt(2))
    assert margin_cosine(hyp, ref, 0.5)[0] == pytest.approx((cos - 0.5) / 0.5)
    assert margin_cosine(hyp, ref, 0.0)[0] == pytest.approx(cos)
    assert margin_cosine(hyp, ref, -1.0)[0] == pytest.approx((cos + 1) / 2)
    # orthogonal vectors: cos = 0, below any non-negative margin
    hyp2, ref2 = labels(Cardiomegaly=1, Pleural_Effusion=0), labels(Cardiomegaly=1, Pleural_Effusion=1)
    assert margin_cosine(hyp2, ref2, 0.5)[0] == 0.0
    assert margin_cosine(hyp2, ref2, -1.0)[0] == pytest.approx(0.5)
    # opposite polarity: cos = -1
    assert margin_cosine(labels(Edema=0), labels(Edema=1), -1.0)[0] == pytest.approx(0.0)


def test_uncertain_equals_positive_and_no_finding_is_ignored():
    assert margin_cosine(labels(Edema=-1), labels(Edema=1))[0] == 1.0
    assert margin_cosine(labels(No_Finding=0, Edema=1), labels(No_Finding=1, Edema=1))[0] == 1.0


def test_zero_vector_conventions():
    nothing = labels()  # empty text: everything blank
    normal = labels(No_Finding=1)  # "no acute cardiopulmonary process": only No Finding
    finding = labels(Edema=1)
    assert margin_cosine(nothing, nothing)[0] == 1.0
    assert margin_cosine(normal, normal)[0] == 1.0
    assert margin_cosine(nothing, normal)[0] == 0.0
    assert margin_cosine(normal, nothing)[0] == 0.0
    for margin in (0.5, 0.0, -1.0):
        assert margin_cosine(nothing, finding, margin)[0] == 0.0
        assert margin_cosine(finding, normal, margin)[0] == 0.0


def test_mccs_on_text():
    ref = "small left pleural effusion . no pneumothorax ."
    out = mccs([ref, "no pleural effusion .", "", "no acute cardiopulmonary process ."], [ref] * 4)
    # identical -> 1; "no effusion" vs (effusion +1, pneumothorax -1): u = (-1, 0), v = (1, -1), cos = -1/sqrt(2)
    assert out.tolist() == [1.0, 0.0, 0.0, 0.0]
    assert mccs([""], [""])[0] == 1.0
    normal = "no acute cardiopulmonary process ."
    assert mccs([normal, ""], [normal, normal]).tolist() == [1.0, 0.0]


def test_random_labels_stay_in_unit_interval():
    rng = np.random.default_rng(1)
    values = np.array([1.0, 0.0, -1.0, np.nan])
    hyp = values[rng.integers(0, 4, size=(300, NUM_OBSERVATIONS))]
    ref = values[rng.integers(0, 4, size=(300, NUM_OBSERVATIONS))]
    for margin in (0.0, DEFAULT_MARGIN, 0.9):
        out = margin_cosine(hyp, ref, margin)
        assert np.isfinite(out).all() and (out >= 0).all() and (out <= 1).all()
    assert np.allclose(margin_cosine(hyp, hyp), 1.0)


def test_margin_is_configurable_and_checked():
    hyp = labels(Cardiomegaly=1, Pleural_Effusion=1, Pneumothorax=0)
    ref = labels(Cardiomegaly=1, Pleural_Effusion=1)
    texts = (["cardiomegaly . pleural effusion . no pneumothorax ."], ["cardiomegaly . pleural effusion ."])
    reward = make_mccs(0.2)
    assert reward(*texts)[0] == pytest.approx(margin_cosine(hyp, ref, 0.2)[0])
    assert reward(*texts)[0] != pytest.approx(mccs(*texts)[0])
    for bad in (1.0, 1.5, -1.5, float("nan")):
        with pytest.raises(ValueError, match="margin"):
            make_mccs(bad)
    try:
        make_mccs(0.3, register_as="mccs_test_m03")
        assert compute_reward("mccs_test_m03", *texts)[0] == pytest.approx(margin_cosine(hyp, ref, 0.3)[0])
    finally:
        REWARDS.pop("mccs_test_m03", None)


def test_ce_f1_is_example_based_ce_f1():
    cands = ["mild cardiomegaly .", "no pleural effusion .", "", "possible pneumonia .", "edema . cardiomegaly ."]
    refs = ["mild cardiomegaly . small effusion .", "the lungs are clear .", "", "", "edema ."]
    out = ce_f1(cands, refs)
    expected = ce_scores(label_reports(cands), label_reports(refs))["ce_example_f1"]
    assert out.mean() == pytest.approx(expected)
    assert out[0] == pytest.approx(2 / 3) and out[4] == pytest.approx(2 / 3)


def test_ce_f1_differs_from_chexpert_f1_only_without_positives():
    cands = ["", "possible pneumonia .", "cardiomegaly .", "no acute cardiopulmonary process ."]
    refs = ["", "", "cardiomegaly . edema .", "the heart is normal ."]
    a, b = ce_f1(cands, refs), chexpert_f1(cands, refs)
    assert a.tolist() == [0.0, 0.0, pytest.approx(2 / 3), 1.0]
    assert b.tolist() == [1.0, 1.0, pytest.approx(2 / 3), 1.0]


def test_registered_rewards_finite_and_context():
    cands = ["edema .", "", "<think>x</think><report>no effusion</report>"]
    refs = ["edema .", "cardiomegaly .", ""]
    for name in ("mccs", "ce_f1"):
        out = compute_reward(name, cands, refs)
        assert out.shape == (3,) and np.isfinite(out).all()
    ref_labels = np.vstack([labels(Edema=1)] * 3)
    assert compute_reward("mccs", cands, refs, ref_labels=ref_labels)[0] == 1.0
    assert mccs([], []).shape == (0,)


# ---------------------------------------------------------------------------------------------------------
# mccs_normal (issue 42): a correct normal report against a normal reference that lists negatives.

NORMAL = "no acute cardiopulmonary process ."
NORMAL_REF = "the heart size is normal . the lungs are clear . no pleural effusion or pneumothorax ."


def test_the_issues_example_gets_credit_under_mccs_normal_only():
    # By hand: the candidate's labels are No Finding = 1 and nothing else (signed vector 0); the reference's are
    # No Finding = 1 with Cardiomegaly, Lung Opacity, Edema, Consolidation, Pneumonia, Atelectasis, Pneumothorax,
    # Pleural Effusion negative (signed vector: eight -1). CE-F1 = 1 (No Finding positive on both sides).
    hyp, ref = label_reports([NORMAL]), label_reports([NORMAL_REF])
    assert hyp[0, 0] == 1 and np.isnan(hyp[0, 1:]).all()
    assert ref[0, 0] == 1 and (signed_vectors(ref)[0] == -1).sum() == 8 and (signed_vectors(ref)[0] == 1).sum() == 0
    assert ce_f1([NORMAL], [NORMAL_REF])[0] == 1.0
    assert mccs([NORMAL], [NORMAL_REF])[0] == 0.0  # the project's earlier rule: one zero vector -> 0
    assert compute_reward("mccs_normal", [NORMAL], [NORMAL_REF])[0] == 1.0
    # the other way round (a reference that only says "no acute process", a candidate listing negatives)
    assert compute_reward("mccs_normal", [NORMAL_REF], [NORMAL])[0] == 1.0


def test_mccs_normal_by_hand_on_label_rows():
    normal = labels(No_Finding=1)
    negatives = labels(No_Finding=1, Pleural_Effusion=0, Pneumothorax=0)   # (-1, -1)
    f = lambda h, r: margin_cosine(h, r, DEFAULT_MARGIN, normal_agreement=True)[0]  # noqa: E731
    assert f(normal, negatives) == 1.0 and f(negatives, normal) == 1.0
    # the non-zero side names something present or possible: no credit (a missed finding)
    assert f(normal, labels(No_Finding=1, Support_Devices=1, Pneumothorax=0)) == 0.0
    assert f(normal, labels(No_Finding=0, Pleural_Effusion=-1)) == 0.0   # uncertain counts as present
    assert f(normal, labels(No_Finding=0, Cardiomegaly=1)) == 0.0
    # No Finding must be stated on both sides: an empty candidate earns nothing
    assert f(labels(), negatives) == 0.0
    assert f(normal, labels(Pleural_Effusion=0)) == 0.0  # reference without No Finding = 1
    assert f(labels(No_Finding=0), negatives) == 0.0
    # every other pair scores as mccs: two non-zero vectors (hand-computed cosine), two zero vectors
    hyp = labels(Cardiomegaly=1, Pleural_Effusion=1, Pneumothorax=0)   # (1, 1, -1)
    ref = labels(Cardiomegaly=1, Pleural_Effusion=1)                    # (1, 1, 0)
    cos = 2 / (math.sqrt(3) * math.sqrt(2))
    assert f(hyp, ref) == pytest.approx((cos - 0.5) / 0.5) == margin_cosine(hyp, ref)[0]
    assert f(labels(), labels()) == 1.0 and f(normal, normal) == 1.0 and f(labels(), normal) == 0.0


def test_mccs_normal_equals_mccs_except_on_one_zero_vector():
    rng = np.random.default_rng(3)
    values = np.array([1.0, 0.0, -1.0, np.nan])
    hyp = values[rng.integers(0, 4, size=(400, NUM_OBSERVATIONS))]
    ref = values[rng.integers(0, 4, size=(400, NUM_OBSERVATIONS))]
    hyp[::7, 1:] = np.nan  # some rows with a zero vector, saying No Finding
    hyp[::7, 0] = 1.0
    ref[::3, 1:] = np.where(np.isnan(ref[::3, 1:]), np.nan, 0.0)  # some normal references: negatives only
    ref[::3, 0] = 1.0
    old, new = margin_cosine(hyp, ref), margin_cosine(hyp, ref, normal_agreement=True)
    zero_h = (signed_vectors(hyp) == 0).all(axis=1)
    zero_r = (signed_vectors(ref) == 0).all(axis=1)
    assert (old[~(zero_h ^ zero_r)] == new[~(zero_h ^ zero_r)]).all()
    assert ((new != old) == ((zero_h ^ zero_r) & (new == 1.0))).all() and (new != old).any()


def test_mrg_r1_normal_is_the_weighted_sum_with_mccs_normal():
    good = f"<think>nothing abnormal</think><report>{NORMAL}</report>"
    out = compute_reward("mrg_r1_normal", [good, NORMAL], [NORMAL_REF] * 2)
    fmt = compute_reward("format", [good, NORMAL], [NORMAL_REF] * 2)
    assert fmt.tolist() == [1.0, 0.0]
    assert out.tolist() == pytest.approx([0.75 * 1.0 + 0.25 * 1.0, 0.75 * 1.0])
    assert compute_reward("mrg_r1", [good], [NORMAL_REF])[0] == pytest.approx(0.25)  # unchanged: MCCS part 0
