"""Tests of the rule-based CheXpert-style labeler (rewards/chexpert.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from harness.constants import NUM_OBSERVATIONS, OBSERVATIONS
from rewards.chexpert import label_report, label_reports, tokenize_for_labeler

_ABBR = {
    "NF": "No Finding", "EC": "Enlarged Cardiomediastinum", "CM": "Cardiomegaly", "OP": "Lung Opacity",
    "LL": "Lung Lesion", "ED": "Edema", "CO": "Consolidation", "PN": "Pneumonia", "AT": "Atelectasis",
    "PT": "Pneumothorax", "PE": "Pleural Effusion", "PO": "Pleural Other", "FR": "Fracture",
    "SD": "Support Devices",
}
_COL = {abbr: OBSERVATIONS.index(name) for abbr, name in _ABBR.items()}

# (sentence, expected labels of the observations it mentions; every other pathology must be nan).
# No Finding is checked separately below unless it is listed.
CASES: list[tuple[str, dict[str, float]]] = [
    # negation, lists and scope
    ("no pleural effusion or pneumothorax .", {"PE": 0, "PT": 0}),
    ("no focal consolidation , effusion or pneumothorax .", {"CO": 0, "PE": 0, "PT": 0}),
    ("no focal consolidation effusion or pneumothorax .", {"CO": 0, "PE": 0, "PT": 0}),
    ("there is no pleural effusion pneumothorax or focal airspace disease .", {"PE": 0, "PT": 0, "OP": 0}),
    ("No evidence of pneumothorax.", {"PT": 0}),
    ("no pneumothorax is seen .", {"PT": 0}),
    ("a pneumothorax is not identified .", {"PT": 0}),
    ("negative for pneumonia .", {"PN": 0}),
    ("without evidence of pulmonary edema .", {"ED": 0}),
    ("there is no pneumothorax but there is a small left pleural effusion .", {"PT": 0, "PE": 1}),
    ("no effusion however the heart is mildly enlarged .", {"PE": 0, "CM": 1}),
    ("no pneumothorax . small right effusion .", {"PT": 0, "PE": 1}),
    ("no new consolidation .", {"CO": 0}),
    ("no definite focal consolidation .", {"CO": 0}),
    ("no change in the moderate right pleural effusion .", {"PE": 1}),
    ("effusion has resolved .", {"PE": 0}),
    ("interval resolution of the left pneumothorax .", {"PT": 0}),
    ("the previously seen right effusion is no longer visualized .", {"PE": 0}),
    ("right pleural effusion is partially resolved .", {"PE": 1}),
    ("no pneumothorax with the right chest tube in place .", {"PT": 0, "SD": 1}),
    ("There is no evidence of pneumothorax, and the left chest tube remains in place.", {"PT": 0, "SD": 1}),
    ("there is no relevant change in the small left pleural effusion .", {"PE": 1}),
    ("no definite consolidation to suggest pneumonia .", {"CO": 0, "PN": 0}),
    ("no focal opacity concerning for pneumonia .", {"OP": 0, "PN": 0}),
    ("no large pleural effusion is seen although small bilateral effusions may be present .", {"PE": -1}),
    # uncertainty
    ("pneumothorax cannot be excluded .", {"PT": -1}),
    ("cannot exclude early pneumonia .", {"PN": -1}),
    ("possible small left pleural effusion .", {"PE": -1}),
    ("bibasilar opacities may represent atelectasis or pneumonia .", {"OP": 1, "AT": -1, "PN": -1}),
    ("left lower lobe opacity likely atelectasis .", {"OP": 1, "AT": -1}),
    ("findings could reflect mild pulmonary edema .", {"ED": -1}),
    ("retrocardiac opacity concerning for pneumonia .", {"OP": 1, "PN": -1}),
    ("right basilar opacity suggestive of aspiration .", {"OP": 1, "PN": -1}),
    ("atelectasis versus consolidation at the left base .", {"AT": -1, "CO": -1}),
    ("a small effusion is possible .", {"PE": -1}),
    ("left basilar opacity may be due to atelectasis though pneumonia is not excluded .",
     {"OP": 1, "AT": -1, "PN": -1}),
    ("the mediastinum may be widened .", {"EC": -1}),
    ("questionable right apical pneumothorax .", {"PT": -1}),
    # look-alikes and fixed statements
    ("small pericardial effusion .", {}),
    ("no acute cardiopulmonary process .", {"NF": 1}),
    ("heart size is normal .", {"CM": 0}),
    ("the heart is normal in size .", {"CM": 0}),
    ("the heart is not enlarged .", {"CM": 0}),
    ("normal cardiomediastinal silhouette .", {"EC": 0, "CM": 0}),
    ("the cardiomediastinal silhouette is within normal limits .", {"EC": 0, "CM": 0}),
    ("the mediastinal and hilar contours are unremarkable .", {"EC": 0}),
    ("the lungs are clear .", {"OP": 0, "CO": 0, "PN": 0, "ED": 0, "AT": 0}),
    ("the costophrenic angles are sharp .", {"PE": 0}),
    ("heart size is borderline .", {"CM": -1}),
    ("subcutaneous edema in the chest wall .", {}),
    ("sclerotic osseous lesion in the humerus .", {}),
    # laterality, severity and synonyms
    ("small left pleural effusion .", {"PE": 1}),
    ("bilateral effusions .", {"PE": 1}),
    ("fluid in the right costophrenic angle .", {"PE": 1}),
    ("mild cardiomegaly .", {"CM": 1}),
    ("the heart size is mildly enlarged .", {"CM": 1}),
    ("enlarged cardiac silhouette .", {"CM": 1}),
    ("right-sided pneumothorax.", {"PT": 1}),
    ("right hydropneumothorax .", {"PT": 1, "PE": 1}),
    ("patchy airspace disease in the right lower lobe .", {"OP": 1}),
    ("left lower lobe collapse .", {"AT": 1}),
    ("bibasilar atelectatic changes .", {"AT": 1}),
    ("mild pulmonary vascular congestion .", {"ED": 1}),
    ("moderate interstitial edema .", {"ED": 1}),
    ("right upper lobe pneumonia .", {"PN": 1}),
    ("dense left lower lobe consolidation .", {"CO": 1}),
    ("a 1 cm nodule in the right upper lobe .", {"LL": 1}),
    ("left apical pleural thickening .", {"PO": 1}),
    ("calcified pleural plaques .", {"PO": 1}),
    ("widened mediastinum .", {"EC": 1}),
    ("old healed right rib fracture .", {"FR": 1}),
    ("no acute fracture .", {"FR": 0}),
    # support devices
    ("endotracheal tube terminates 4 cm above the carina .", {"SD": 1}),
    ("status post sternotomy wires .", {"SD": 1}),
    ("status post median sternotomy .", {}),
    ("right picc line tip in the low svc .", {"SD": 1}),
    ("left chest wall pacemaker with leads in the right atrium .", {"SD": 1}),
    ("interval removal of the left chest tube .", {"SD": 0}),
    ("the visceral pleural line is seen at the apex .", {}),
]


def _expected_row(expected: dict[str, float]) -> dict[int, float]:
    return {_COL[k]: float(v) for k, v in expected.items()}


@pytest.mark.parametrize(("sentence", "expected"), CASES, ids=[c[0][:50] for c in CASES])
def test_sentence_table(sentence: str, expected: dict[str, float]) -> None:
    row = label_report(sentence)
    want = _expected_row(expected)
    for col in range(1, NUM_OBSERVATIONS):  # No Finding is derived; checked only where listed
        got = row[col]
        if col in want:
            assert got == want[col], f"{OBSERVATIONS[col]}: got {got}, want {want[col]}"
        else:
            assert math.isnan(got), f"{OBSERVATIONS[col]} should be blank, got {got}"
    if "NF" in expected:
        assert row[0] == expected["NF"]


def test_table_is_large_enough() -> None:
    assert len(CASES) >= 40


def test_no_finding_rule() -> None:
    rows = label_reports([
        "the lungs are clear . heart size is normal . no pleural effusion or pneumothorax .",
        "no acute cardiopulmonary process .",
        "endotracheal tube in standard position . no pneumothorax .",
        "endotracheal tube in standard position .",
        "small left effusion . otherwise normal .",
        "pneumothorax cannot be excluded .",
        "portable upright view of the chest .",  # nothing labelable
        "the the the .",
    ])
    assert rows[0, 0] == 1
    assert rows[1, 0] == 1
    assert rows[2, 0] == 1  # support devices do not count as a finding
    assert rows[3, 0] == 1
    assert rows[4, 0] == 0  # a positive pathology
    assert rows[5, 0] == 0  # an uncertain pathology
    assert math.isnan(rows[6, 0])
    assert math.isnan(rows[7, 0])


def test_aggregation_positive_beats_uncertain_beats_negative() -> None:
    col = _COL["PE"]
    rows = label_reports([
        "no pleural effusion . small left pleural effusion .",
        "small left pleural effusion . no pleural effusion .",
        "possible right effusion . no left effusion .",
        "no left effusion . possible right effusion .",
        "possible right effusion . definite left effusion .",
        "no effusion . no pleural effusion .",
    ])
    assert rows[:, col].tolist() == [1, 1, -1, -1, 1, 0]
    # "the lungs are clear" (negative) never overrides a positive parenchymal finding
    row = label_report("the lungs are clear except for left basilar atelectasis .")
    assert row[_COL["AT"]] == 1 and row[_COL["OP"]] == 0


def test_empty_and_shape() -> None:
    out = label_reports(["", "   ", " . ", "no effusion ."])
    assert out.shape == (4, NUM_OBSERVATIONS)
    assert out.dtype == np.float64
    assert np.isnan(out[:3]).all()
    assert label_reports([]).shape == (0, NUM_OBSERVATIONS)
    assert set(np.unique(out[~np.isnan(out)])) <= {-1.0, 0.0, 1.0}


def test_raw_and_cleaned_text_agree() -> None:
    raw = ("FINDINGS: The heart is mildly enlarged. There is no pleural effusion or pneumothorax; "
           "a right-sided PICC line terminates in the SVC. IMPRESSION: Possible left lower-lobe pneumonia.")
    cleaned = ("findings the heart is mildly enlarged . there is no pleural effusion or pneumothorax . "
               "a right sided picc line terminates in the svc . "
               "impression possible left lower lobe pneumonia .")
    a, b = label_reports([raw, cleaned])
    np.testing.assert_array_equal(a, b)
    assert a[_COL["CM"]] == 1 and a[_COL["PE"]] == 0 and a[_COL["PN"]] == -1 and a[_COL["SD"]] == 1
    assert tokenize_for_labeler("Size 2.5 cm. Next") == "size 25 cm . next"


def test_multi_sentence_report() -> None:
    report = (
        "pa and lateral views of the chest . the heart size is normal . the lungs are clear . "
        "no pleural effusion or pneumothorax . no acute osseous abnormality ."
    )
    row = label_report(report)
    assert row[0] == 1
    assert row[_COL["CM"]] == 0 and row[_COL["PE"]] == 0 and row[_COL["PT"]] == 0
    assert row[_COL["FR"]] == 0 and math.isnan(row[_COL["SD"]])


def test_phantom_agreement() -> None:
    """The labeler reads the synthetic generator's reports as the generator labels them."""
    from harness.data import phantom

    f1, unc_agree, neg_agree = _phantom_scores(phantom, n=200)
    assert f1 >= 0.98
    assert unc_agree >= 0.95
    assert neg_agree >= 0.95


def _phantom_scores(phantom, n: int):
    """Reports and labels from the generator's own API (cases and text only, no images)."""
    cfg = phantom.PhantomConfig(n=n)
    reports, refs = [], []
    for i in range(n):
        rng = np.random.default_rng([123, i])
        report = phantom.compose_report(phantom.sample_case(rng, cfg), rng, cfg)
        reports.append(report.text)
        refs.append([np.nan if v is None else v for v in report.labels])
    return _agreement(label_reports(reports), np.array(refs, dtype=float))


def _agreement(hyp: np.ndarray, ref: np.ndarray) -> tuple[float, float, float]:
    """Micro-F1 of positives (No Finding excluded), and recall of the reference's -1 and 0 labels."""
    h, r = hyp[:, 1:], ref[:, 1:]
    tp = np.sum((h == 1) & (r == 1))
    fp = np.sum((h == 1) & (r != 1))
    fn = np.sum((h != 1) & (r == 1))
    f1 = 2 * tp / max(2 * tp + fp + fn, 1)
    unc = np.mean(h[r == -1] == -1) if np.any(r == -1) else 1.0
    neg = np.mean(h[r == 0] == 0) if np.any(r == 0) else 1.0
    return float(f1), float(unc), float(neg)
