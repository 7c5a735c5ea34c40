"""The phantom's gold reader: a report read with the generator's own grammar, scored against what was drawn.

No reward sees this reader (tests/harness/data/test_gold_reader.py checks the import graph), so a policy that
learns to please a reward's labeler (`rewards/chexpert.py`) cannot please it too: it is the phantom's gold.

Reading. The statement table is built from the generator's phrase tables and its own template filling
(`harness.data.phantom.phrases`, `report.statement_templates` / `severity_words` / `fill_template`): every
sentence the generator can write for a present finding (every side, severity word, zone, rib and hedge), every
normality sentence, device line and normal impression, each with the labels the generator gives it. A report
is cleaned as the phantom's references are (`clean_report`, iu_xray), split into sentences at " . ", and each
sentence is looked up exactly: a sentence not in the table states nothing (a paraphrase, a fragment, a typo).

- A finding stated present is 1, hedged -1, negated 0, never stated NaN (the CheXpert convention of the labels).
- Two statements about one finding (the generator never writes them): present beats hedged beats negated
  (project's choice: a report that says a finding is there has said so, whatever else it says).
- Support Devices is 1 when a device line is read. No Finding is 1 when at least one sentence is read and no
  finding is stated present or hedged (the generator labels No Finding 1 exactly when the case has no finding,
  and always writes a heart statement then); otherwise NaN.

Scoring (`gold_scores`), over the 14 observations as the CE protocol counts them (micro P/R/F1, exact match):
- against the image truth (`present`: what was drawn, stored in the annotation by the generator): a finding
  counts as reported when it is stated present or hedged (a hedged finding is drawn, faintly): `gold_*`;
- against the report's labels (stored; hedged findings are -1 there): positive = 1 on both sides, as the CE
  scores count: `gold_report_*`.
On every reference report of the generator both are exact: reading it reproduces its stored labels value for
value, and its reported presence equals the image truth (tests/harness/data/test_gold_reader.py, 4,000 studies).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from functools import lru_cache

import numpy as np

from harness.constants import NEGATIVE, NO_FINDING, NUM_OBSERVATIONS, OBSERVATIONS, POSITIVE, UNCERTAIN
from harness.data.phantom.case import Case
from harness.data.phantom.gold_reader_v2 import read_reports as read_v2
from harness.data.phantom.phrases import DEVICE_TEXT, IMPRESSION_NORMAL, NORMAL
from harness.data.phantom.report import fill_template, severity_words, statement_templates
from harness.data.phantom.report_sentences import sentences
from harness.data.phantom.vocabulary import FINDINGS, FRACTURE_RIBS, GRADED, LATERAL, SEVERITIES, SIDES, ZONED, ZONES

Meaning = tuple[tuple[int, int], ...]  # (observation index, value) pairs one sentence states
SUPPORT_DEVICES = OBSERVATIONS.index("Support Devices")
_FINDING_INDEX = np.array([OBSERVATIONS.index(name) for name in FINDINGS])
_RANK = {NEGATIVE: 0, UNCERTAIN: 1, POSITIVE: 2}  # which of two statements about one finding wins


def _finding_cases(name: str) -> Iterable[Case]:
    """One case per attribute combination the grammar can fill for `name`, hedged or not."""
    for side, severity, zone, rib, hedged in itertools.product(
        SIDES if name in LATERAL else (None,),
        SEVERITIES if name in GRADED else (None,),
        ZONES if name in ZONED else (None,),
        FRACTURE_RIBS if name == "Fracture" else (None,),
        (False, True),
    ):
        yield Case(
            findings=(name,),
            laterality={name: side} if side else {},
            severity={name: severity} if severity else {},
            zone={name: zone} if zone else {},
            rib=rib,
            uncertain=(name,) if hedged else (),
        )


def _statements() -> Iterable[tuple[str, Meaning]]:
    for name in FINDINGS:
        index = OBSERVATIONS.index(name)
        for case in _finding_cases(name):
            value = UNCERTAIN if case.uncertain else POSITIVE
            for template in statement_templates(case, name):
                for sev in severity_words(case, name):
                    yield fill_template(template, case, name, sev), ((index, value),)
    for group, texts in NORMAL.items():
        for text in texts:
            yield text, tuple((OBSERVATIONS.index(g), NEGATIVE) for g in group)
    for texts in DEVICE_TEXT.values():
        for text in texts:
            yield text, ((SUPPORT_DEVICES, POSITIVE),)
    for text in IMPRESSION_NORMAL:
        yield text, ()


@lru_cache(maxsize=1)
def statement_table() -> dict[str, Meaning]:
    """Every sentence the generator can write -> the labels it states. Raises if the grammar is ambiguous."""
    table: dict[str, Meaning] = {}
    for text, meaning in _statements():
        parts = sentences(text)
        if len(parts) != 1:
            raise RuntimeError(f"phantom grammar: statement {text!r} does not read as one sentence ({parts})")
        key, meaning = parts[0], tuple(sorted(meaning))
        if table.setdefault(key, meaning) != meaning:
            raise RuntimeError(f"phantom grammar is ambiguous: {key!r} states {table[key]} and {meaning}")
    return table


def read_report(report: str) -> np.ndarray:
    """float [14] labels the report states in the generator's grammar (1, 0, -1, NaN; see the module docstring)."""
    table = statement_table()
    labels = np.full(NUM_OBSERVATIONS, np.nan)
    read_any = False
    for sentence in sentences(report):
        meaning = table.get(sentence)
        if meaning is None:
            continue
        read_any = True
        for index, value in meaning:
            if np.isnan(labels[index]) or _RANK[value] > _RANK[int(labels[index])]:
                labels[index] = value
    stated = labels[_FINDING_INDEX]
    if read_any and not np.any((stated == POSITIVE) | (stated == UNCERTAIN)):
        labels[NO_FINDING] = POSITIVE
    return labels


def read_reports(reports: Sequence[str], reader: str = "v1") -> np.ndarray:
    """float [N, 14]: `read_report` of each report; `reader` "v2": gold_reader_v2's (eval.gold_reader)."""
    if reader not in ("v1", "v2"):
        raise ValueError(f"gold reader must be v1 or v2, got {reader!r}")
    if not reports:
        return np.zeros((0, NUM_OBSERVATIONS))
    if reader == "v2":
        return read_v2(reports)
    return np.stack([read_report(r) for r in reports])


def reported_present(labels: np.ndarray) -> np.ndarray:
    """bool: stated present or hedged (what is scored against the image truth)."""
    labels = np.asarray(labels, dtype=np.float64)
    return (labels == POSITIVE) | (labels == UNCERTAIN)


def positive(labels: np.ndarray) -> np.ndarray:
    """bool: label 1 (the CE protocol's positive; hedged, negated and unstated are not)."""
    return np.asarray(labels, dtype=np.float64) == POSITIVE


def _agreement(prefix: str, hyp: np.ndarray, truth: np.ndarray) -> dict[str, float]:
    tp, fp, fn = int((hyp & truth).sum()), int((hyp & ~truth).sum()), int((~hyp & truth).sum())
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * tp / (2 * tp + fp + fn) if tp + fp + fn else 0.0
    return {f"{prefix}_f1": f1, f"{prefix}_precision": precision, f"{prefix}_recall": recall,
            f"{prefix}_exact": float((hyp == truth).all(axis=1).mean()), f"{prefix}_acc": float((hyp == truth).mean())}


def _matrix(values: np.ndarray, name: str) -> np.ndarray:
    array = np.asarray(values, dtype=np.float64)
    if array.ndim != 2 or array.shape[1] != NUM_OBSERVATIONS or array.shape[0] == 0:
        raise ValueError(f"{name} must have shape [N >= 1, {NUM_OBSERVATIONS}], got {tuple(array.shape)}")
    return array


def gold_scores(read: np.ndarray, truth_present: np.ndarray | None = None,
                report_labels: np.ndarray | None = None) -> dict[str, float]:
    """The gold reader's labels of N reports [N, 14] scored against the image truth (`gold_*`: micro F1,
    precision, recall, exact match, accuracy of reported presence vs drawn) and against the stored report labels
    (`gold_report_*`: positives vs positives). Either truth may be None (its keys are then absent)."""
    read = _matrix(read, "read labels")
    out: dict[str, float] = {}
    if truth_present is not None:
        truth = _matrix(truth_present, "image truth") == 1.0
        if truth.shape != read.shape:
            raise ValueError(f"image truth {truth.shape} and read labels {read.shape} differ in shape")
        out.update(_agreement("gold", reported_present(read), truth))
    if report_labels is not None:
        labels = _matrix(report_labels, "report labels")
        if labels.shape != read.shape:
            raise ValueError(f"report labels {labels.shape} and read labels {read.shape} differ in shape")
        out.update(_agreement("gold_report", positive(read), positive(labels)))
    return out


def disagreement(labeler: np.ndarray, read: np.ndarray) -> dict[str, float]:
    """How often a labeler and the gold reader disagree on the same reports' positives (label 1):
    `labeler_gold_disagree` (share of reports with any observation differing) and `labeler_gold_disagree_pairs`
    (share of report x observation pairs)."""
    a, b = positive(_matrix(labeler, "labeler labels")), positive(_matrix(read, "read labels"))
    if a.shape != b.shape:
        raise ValueError(f"labeler labels {a.shape} and read labels {b.shape} differ in shape")
    differ = a != b
    return {"labeler_gold_disagree": float(differ.any(axis=1).mean()),
            "labeler_gold_disagree_pairs": float(differ.mean())}
