"""Tests of the CheXpert F1 reward (rewards/chexpert_f1.py)."""

from __future__ import annotations

import numpy as np
import pytest

import rewards.chexpert as chexpert
import rewards.chexpert_f1 as cf1
from harness.constants import NUM_OBSERVATIONS, OBSERVATIONS
from harness.scoring.evaluation import ce_scores
from rewards.chexpert_f1 import binary_f1, chexpert_f1
from rewards.spec import compute_reward

CM, PE, PT = (OBSERVATIONS.index(n) for n in ("Cardiomegaly", "Pleural Effusion", "Pneumothorax"))
REF = "mild cardiomegaly . small left pleural effusion ."  # positives: Cardiomegaly, Pleural Effusion
NORMAL = "the heart size is normal . there is no pleural effusion or pneumothorax ."  # positive: No Finding


@pytest.mark.parametrize(
    ("candidate", "expected"),
    [
        (REF, 1.0),
        ("mild cardiomegaly . no pleural effusion .", 2 * 1 / (1 + 2)),  # TP 1, FN 1
        ("cardiomegaly . pneumothorax .", 2 * 1 / (2 + 2)),  # TP 1, FP 1, FN 1
        (NORMAL, 0.0),  # No Finding is a false positive, nothing matches
        ("", 0.0),  # no positive against two positives
    ],
)
def test_hand_computed(candidate, expected):
    assert chexpert_f1([candidate], [REF])[0] == pytest.approx(expected)


def test_normal_reports_match_through_no_finding():
    assert chexpert_f1([NORMAL, "the lungs are clear ."], [NORMAL, NORMAL]).tolist() == [1.0, 1.0]
    assert chexpert_f1([""], [NORMAL])[0] == 0.0  # an empty text has no No Finding label


def test_both_without_positives_is_one_and_one_side_empty_is_zero():
    # "possible pneumonia": uncertain only, so no positive after binarisation; "" has nothing labelable.
    out = chexpert_f1(["", "possible pneumonia .", "", "pneumothorax ."], ["", "", "possible pneumonia .", ""])
    assert out.tolist() == [1.0, 1.0, 1.0, 0.0]


def test_binary_f1_matches_ce_example_f1_where_positives_exist():
    rng = np.random.default_rng(0)
    values = np.array([1.0, 0.0, -1.0, np.nan])
    hyp = values[rng.integers(0, 4, size=(200, NUM_OBSERVATIONS))]
    ref = values[rng.integers(0, 4, size=(200, NUM_OBSERVATIONS))]
    ours = binary_f1(hyp, ref, both_empty=0.0)
    assert ours.mean() == pytest.approx(ce_scores(hyp, ref)["ce_example_f1"], abs=1e-12)
    assert np.all((ours >= 0) & (ours <= 1))


def test_ref_labels_override_the_labeler():
    labels = np.full((1, NUM_OBSERVATIONS), np.nan)
    labels[0, CM] = 1.0
    labels[0, 0] = 0.0
    assert chexpert_f1(["cardiomegaly ."], [""], ref_labels=labels)[0] == 1.0
    assert compute_reward("chexpert_f1", ["cardiomegaly ."], [""], ref_labels=labels)[0] == 1.0
    with pytest.raises(ValueError, match="ref_labels"):
        chexpert_f1(["cardiomegaly ."], [""], ref_labels=labels[:, :5])


def test_references_are_labelled_once_and_cached(monkeypatch):
    seen: list[str] = []
    real = chexpert.label_reports

    def counting(reports):
        seen.extend(reports)
        return real(reports)

    monkeypatch.setattr(chexpert, "label_reports", counting)
    monkeypatch.setattr(cf1, "_REFERENCE_CACHE", cf1.OrderedDict())
    refs = ["a unique reference with cardiomegaly ."] * 4 + [NORMAL] * 4
    cands = ["cardiomegaly .", "", "cardiomegaly .", "edema ."] * 2
    first = chexpert_f1(cands, refs)
    assert sorted(seen) == sorted(set(cands) | set(refs))  # every distinct text once
    seen.clear()
    assert np.array_equal(chexpert_f1(cands, refs), first)
    assert sorted(seen) == sorted(set(cands))  # references come from the cache
    monkeypatch.setattr(cf1, "REFERENCE_CACHE_SIZE", 1)
    chexpert_f1(["x"], ["another reference ."])
    assert list(cf1._REFERENCE_CACHE) == ["another reference ."]


def test_registered_reward_shape_finite_and_errors():
    cands = [REF, "", "no acute cardiopulmonary process .", "<think>hm</think><report>edema</report>"]
    out = compute_reward("chexpert_f1", cands, [REF, "", NORMAL, REF])
    assert out.shape == (4,) and np.isfinite(out).all()
    assert chexpert_f1([], []).shape == (0,)
    with pytest.raises(ValueError, match="candidates"):
        chexpert_f1(["a"], [])
    with pytest.raises(TypeError):
        chexpert_f1([None], ["a"])
