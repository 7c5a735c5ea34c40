"""Tests of the offline clinical-entity F1 (rewards/entity.py)."""

from __future__ import annotations

import numpy as np
import pytest

from rewards.entity import entity_f1, extract_entities
from rewards.spec import compute_reward

PE, PT, OP, NF = "Pleural Effusion", "Pneumothorax", "Lung Opacity", "No Finding"


@pytest.mark.parametrize(
    ("report", "expected"),
    [
        ("small left pleural effusion, no pneumothorax.",
         {(PE, "positive"), (PE, "small"), (PE, "left"), (PT, "negative"), (NF, "negative")}),
        # modifiers attach only to the finding of their clause
        ("right lower lobe opacity , small left effusion .",
         {(OP, "positive"), (OP, "right"), (OP, "lower"), (PE, "positive"), (PE, "small"), (PE, "left"),
          (NF, "negative")}),
        # a terminator ends the clause: "small left" belongs to the effusion only
        ("no pneumothorax but there is a small left pleural effusion .",
         {(PT, "negative"), (PE, "positive"), (PE, "small"), (PE, "left"), (NF, "negative")}),
        # a negated finding takes no modifiers
        ("no large pleural effusion .", {(PE, "negative"), (NF, "positive")}),
        ("possible right pneumothorax .", {(PT, "uncertain"), (PT, "right"), (NF, "negative")}),
        ("bibasilar atelectasis .",
         {("Atelectasis", "positive"), ("Atelectasis", "bilateral"), ("Atelectasis", "lower"),
          ("Atelectasis", "base"), (NF, "negative")}),
        ("old healed left rib fractures .",
         {("Fracture", "positive"), ("Fracture", "left"), ("Fracture", "rib"), (NF, "negative")}),
        ("blunting of the right cp angle .",
         {(PE, "positive"), (PE, "right"), (PE, "costophrenic angle"), (NF, "negative")}),
        ("the heart is mildly enlarged .",
         {("Cardiomegaly", "positive"), ("Cardiomegaly", "mild"), ("Cardiomegaly", "heart"), (NF, "negative")}),
        ("no acute cardiopulmonary process .", {(NF, "positive")}),
        # a decimal point does not end the sentence
        ("a 1.5 cm nodule in the left upper lobe .",
         {("Lung Lesion", "positive"), ("Lung Lesion", "left"), ("Lung Lesion", "upper"), (NF, "negative")}),
        ("", set()),
        ("the patient is here .", set()),
    ],
)
def test_extract_entities(report, expected):
    assert extract_entities(report) == expected


def test_f1_hand_computed():
    a = "small left pleural effusion ."  # NF neg, PE pos, PE small, PE left
    b = "large left pleural effusion ."  # NF neg, PE pos, PE large, PE left
    c = "no pleural effusion ."  # NF pos, PE neg
    out = entity_f1([a, a, a, c], [a, b, c, c])
    assert out.tolist() == [1.0, pytest.approx(2 * 3 / (4 + 4)), 0.0, 1.0]
    d = "small left pleural effusion . no pneumothorax ."  # a + (PT neg)
    assert entity_f1([d], [a])[0] == pytest.approx(2 * 4 / (5 + 4))


def test_empty_conventions():
    assert entity_f1(["", "hello", ""], ["", "", "no pneumothorax ."]).tolist() == [1.0, 1.0, 0.0]
    assert entity_f1(["no pneumothorax ."], [""])[0] == 0.0
    assert entity_f1([], []).shape == (0,)


def test_properties_and_cache_safety():
    texts = ["small left pleural effusion .", "mild cardiomegaly . no edema .", "", "right lower lobe opacity ."]
    hyps = [texts[i % 4] for i in range(12)]
    refs = [texts[(i * 3 + 1) % 4] for i in range(12)]
    forward, backward = entity_f1(hyps, refs), entity_f1(refs, hyps)
    assert np.array_equal(forward, backward)
    assert ((forward >= 0) & (forward <= 1)).all()
    assert (entity_f1(texts, texts) == 1.0).all()
    got = extract_entities(texts[0])
    got.add(("Edema", "positive"))
    assert ("Edema", "positive") not in extract_entities(texts[0])


def test_registered_reward_and_errors():
    out = compute_reward("entity_f1", ["<think>x</think><report>edema</report>", ""], ["edema .", "edema ."])
    assert out.shape == (2,) and np.isfinite(out).all()
    with pytest.raises(ValueError):
        entity_f1(["a"], [])
    with pytest.raises(TypeError):
        extract_entities(None)


def test_a_thousand_distinct_reports_score_as_one_pair_at_a_time():
    # (The speed, >= 1000 distinct reports/s, is measured by benchmarks/bench_entity.py, not asserted here.)
    base = [
        "small left pleural effusion , no pneumothorax .",
        "mild cardiomegaly . bibasilar atelectasis .",
        "the lungs are clear . no acute osseous abnormality .",
        "right lower lobe opacity may represent pneumonia .",
    ]
    reports = [f"{base[i % 4]} {base[(i + 1) % 4]} case {i} ." for i in range(1000)]  # all distinct
    out = entity_f1(reports, reports[::-1])
    assert out.shape == (1000,) and ((out >= 0) & (out <= 1)).all()
    # The batch gives each pair's own score (the cache changes no value), F1 is symmetric, a report matches itself.
    singles = np.array([entity_f1([h], [r])[0] for h, r in zip(reports[:40], reports[::-1][:40], strict=True)])
    np.testing.assert_array_equal(out[:40], singles)
    np.testing.assert_array_equal(entity_f1(reports[::-1], reports), out)
    assert (entity_f1(reports, reports) == 1.0).all()
    # Report i is bases (i, i + 1) mod 4 and report 999 - i bases (3 - i, 4 - i) mod 4: one base in common, never both.
    assert 0.0 < out.min() and out.max() < 1.0
