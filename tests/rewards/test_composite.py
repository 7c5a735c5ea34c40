"""Tests of weighted composite rewards (rewards/composite.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rewards.composite import MRG_R1_WEIGHTS, make_composite
from rewards.mccs import ce_f1, mccs
from rewards.registry import get_reward
from rewards.spec import compute_reward

REF = "small left pleural effusion . no pneumothorax ."


def wrap(report: str, think: str = "reasoning") -> str:
    return f"<think>{think}</think><report>{report}</report>"


def test_mrg_r1_hand_computed():
    cands = [
        wrap(REF),  # format 1, mccs 1
        wrap("no pleural effusion ."),  # format 1, mccs 0 (opposite polarity)
        REF,  # no tags: format 0, mccs 1
        "",  # nothing
        "<think>x</think><report>" + REF,  # unclosed: format 0, scored on tag-stripped text
    ]
    out = compute_reward("mrg_r1", cands, [REF] * len(cands))
    assert out.tolist() == [1.0, 0.25, 0.75, 0.0, 0.75]
    assert MRG_R1_WEIGHTS == {"mccs": 0.75, "format": 0.25}


def test_clinical_part_scores_only_the_report():
    cand = wrap(REF, think="possible right pneumothorax or edema ?")
    assert compute_reward("mrg_r1", [cand], [REF])[0] == 1.0
    raw = make_composite(MRG_R1_WEIGHTS, score_report_part=False)([cand], [REF])[0]
    assert raw == pytest.approx(0.75 * mccs([cand], [REF])[0] + 0.25)
    assert raw < 1.0


def test_aliases_and_ce_f1_format():
    assert get_reward("mccs_format") is get_reward("mrg_r1")
    cands = [wrap("cardiomegaly ."), "cardiomegaly . edema ."]
    refs = ["cardiomegaly . edema ."] * 2
    expected = 0.75 * ce_f1(["cardiomegaly .", "cardiomegaly . edema ."], refs) + 0.25 * np.array([1.0, 0.0])
    assert np.allclose(compute_reward("ce_f1_format", cands, refs), expected)
    assert compute_reward("ce_f1_format", cands, refs)[0] == pytest.approx(0.75 * 2 / 3 + 0.25)


def test_weights_are_used_as_given_and_zero_weights_skip_components():
    fn = make_composite({"format": 2.0, "no_such_reward": 0.0})
    assert fn([wrap("x"), "x"], ["", ""]).tolist() == [2.0, 0.0]
    assert fn.weights == {"format": 2.0, "no_such_reward": 0.0}


@pytest.mark.parametrize(
    "weights",
    [{}, {"mccs": -0.1}, {"mccs": math.nan}, {"mccs": math.inf}, {"mccs": 0.0, "format": 0.0}, {"mccs": "a"},
     {"": 1.0}, [("mccs", 1.0)]],
)
def test_bad_weights_raise(weights):
    with pytest.raises(ValueError, match="composite reward"):
        make_composite(weights)


def test_unknown_component_fails_on_call():
    fn = make_composite({"no_such_reward": 1.0})
    with pytest.raises(ValueError, match="unknown reward 'no_such_reward'"):
        fn(["a"], ["a"])


def test_nested_composite_and_context():
    outer = make_composite({"mrg_r1": 1.0})
    cands = [wrap(REF), REF, wrap("edema .")]
    assert np.array_equal(outer(cands, [REF] * 3), compute_reward("mrg_r1", cands, [REF] * 3))
    ref_labels = np.full((1, 14), np.nan)
    ref_labels[0, 5] = 1.0  # Edema
    assert compute_reward("mrg_r1", [wrap("edema .")], [""], ref_labels=ref_labels)[0] == 1.0


def test_shapes_and_errors():
    fn = make_composite({"mccs": 1.0, "format": 1.0})
    assert fn([], []).shape == (0,)
    with pytest.raises(ValueError, match="candidates"):
        fn(["a"], [])
    out = compute_reward("mrg_r1", ["", "<report>", wrap("")], ["", "", ""])
    assert np.isfinite(out).all() and out.shape == (3,)
