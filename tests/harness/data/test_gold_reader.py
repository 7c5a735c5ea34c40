"""The phantom's gold reader (harness/data/phantom/gold_reader.py): exact on the generator's reports, blind to
anything else, independent of every reward."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from harness.constants import OBSERVATIONS
from harness.data.phantom import Case, PhantomConfig, case_and_report, compose_report
from harness.data.phantom.gold_reader import (
    disagreement,
    gold_scores,
    read_report,
    read_reports,
    reported_present,
    sentences,
    statement_table,
)

ROOT = Path(__file__).resolve().parents[3]
READER = "harness.data.phantom.gold_reader"
READER_V2 = "harness.data.phantom.gold_reader_v2"
NAN = np.nan


def _row(**values) -> np.ndarray:
    out = np.full(len(OBSERVATIONS), np.nan)
    for name, value in values.items():
        out[OBSERVATIONS.index(name.replace("_", " "))] = value
    return out


def test_every_reference_report_of_a_4000_study_set_reads_back_exactly():
    """Reading the reference report reproduces its stored labels value for value (hedged present findings -1,
    unstated NaN), and its reported presence (stated present or hedged) equals what was drawn, on all 14
    observations of all 4,000 studies of the preset's phantom set (reports only, no image drawn)."""
    cfg = PhantomConfig(n=4000, seed=0)
    hedged = 0
    for index in range(cfg.n):
        case, report = case_and_report(cfg, index)
        stored = np.array([np.nan if v is None else v for v in report.labels], dtype=np.float64)
        read = read_report(report.text)
        assert np.array_equal(read, stored, equal_nan=True), (index, report.text)
        assert np.array_equal(reported_present(read), case.present == 1), (index, report.text)
        hedged += bool(case.uncertain)
    assert hedged > 300  # the hedged case is exercised (about a fifth of the studies)


def test_scores_of_the_references_are_exact():
    cfg = PhantomConfig(n=200, seed=3)
    pairs = [case_and_report(cfg, i) for i in range(cfg.n)]
    read = read_reports([r.text for _, r in pairs])
    truth = np.stack([c.present for c, _ in pairs])
    stored = np.array([[np.nan if v is None else v for v in r.labels] for _, r in pairs], dtype=np.float64)
    scores = gold_scores(read, truth, stored)
    assert scores["gold_f1"] == scores["gold_exact"] == scores["gold_report_f1"] == scores["gold_report_exact"] == 1.0


def test_every_statement_of_the_grammar_reads_as_its_labels():
    table = statement_table()
    assert len(table) > 400
    for sentence, meaning in table.items():
        read = read_report(sentence + " .")
        for index, value in meaning:
            assert read[index] == value, sentence
    hedged = compose_report(Case(findings=("Pneumothorax",), laterality={"Pneumothorax": "left"},
                                 uncertain=("Pneumothorax",)), np.random.default_rng(0))
    assert read_report(hedged.text)[OBSERVATIONS.index("Pneumothorax")] == -1


# (report, what the rule labeler gets wrong, the reader's positives). The labeler's reading of each is checked
# below, so a labeler fix that removes a misreading shows here.
MISREAD = [
    # A misplaced sentence mark leaves "pneumothorax" alone: the labeler reads it as present.
    ("the heart size is normal . no pleural effusion or . pneumothorax .", "Pneumothorax", ("No Finding",)),
    ("heart size is within normal limits . no . pneumothorax .", "Pneumothorax", ("No Finding",)),
    # A missing sentence mark lets the negation run on: the labeler negates the cardiomegaly and calls the
    # study normal.
    ("no pulmonary edema mild cardiomegaly .", "No Finding", ()),
    ("no pneumothorax small left pleural effusion .", "No Finding", ()),
    # Degenerate repetition, the reward hacker's text: the labeler counts the word as a finding.
    ("pneumothorax pneumothorax pneumothorax .", "Pneumothorax", ()),
    ("effusion effusion cardiomegaly edema .", "Pleural Effusion", ()),
    # A word glued to a normal statement.
    ("the osseous structures are intact pneumothorax . a left chest tube is in place .", "Pneumothorax",
     ("No Finding", "Support Devices")),
]


@pytest.mark.parametrize(("report", "misread", "reader_positives"), MISREAD)
def test_the_reader_differs_from_the_rule_labeler_where_the_labeler_misreads(report, misread, reader_positives):
    from rewards.chexpert import label_report

    labeler, read = label_report(report), read_report(report)
    index = OBSERVATIONS.index(misread)
    assert labeler[index] == 1 and read[index] != 1  # the labeler's wrong positive; the reader does not state it
    assert [OBSERVATIONS[i] for i in np.flatnonzero(read == 1)] == list(reader_positives)
    assert disagreement(labeler[None], read[None])["labeler_gold_disagree"] == 1.0


def test_text_outside_the_grammar_states_nothing():
    for text in ("", ".", "the heart is big .", "no pneumothorax no effusion .", "mild cardiomegaly no effusion ."):
        assert np.isnan(read_report(text)).all(), text
    # a known sentence still reads beside unknown ones; the normal impression alone makes No Finding 1
    assert np.array_equal(read_report("blah . no pneumothorax ."), _row(No_Finding=1, Pneumothorax=0),
                          equal_nan=True)
    assert np.array_equal(read_report("No acute cardiopulmonary process."), _row(No_Finding=1), equal_nan=True)
    assert sentences("The heart is normal in size. No pneumothorax.") == ["the heart is normal in size",
                                                                            "no pneumothorax"]


def test_conflicting_statements_present_beats_hedged_beats_negated():
    read = read_report("no pneumothorax . possible small left pneumothorax . no pleural effusion . "
                       "small left pleural effusion . possible left pleural thickening . no pleural thickening .")
    assert np.array_equal(read, _row(Pneumothorax=-1, Pleural_Effusion=1, Pleural_Other=-1), equal_nan=True)


def test_gold_scores_by_hand():
    # report 1 states effusion (drawn) and a hedged pneumothorax (not drawn); report 2 misses the drawn edema
    read = np.stack([_row(Pleural_Effusion=1, Pneumothorax=-1), _row(No_Finding=1, Cardiomegaly=0)])
    truth = np.stack([_row(Pleural_Effusion=1, Pneumothorax=0), _row(Edema=1)])
    truth = np.nan_to_num(truth, nan=0.0)
    stored = np.stack([_row(Pleural_Effusion=1, Pneumothorax=-1), _row(Edema=1)])
    scores = gold_scores(read, truth, stored)
    # image: TP 1 (effusion), FP 2 (pneumothorax, No Finding), FN 1 (edema) -> F1 2/(2+2+1)
    assert scores["gold_f1"] == pytest.approx(2 / 5)
    assert scores["gold_precision"] == pytest.approx(1 / 3) and scores["gold_recall"] == pytest.approx(1 / 2)
    assert scores["gold_exact"] == 0.0 and scores["gold_acc"] == pytest.approx(25 / 28)
    # report labels, positives only: TP 1, FP 1 (No Finding), FN 1 (edema) -> 2/4; report 1 matches exactly
    assert scores["gold_report_f1"] == pytest.approx(0.5) and scores["gold_report_exact"] == 0.5
    assert set(gold_scores(read, truth)) == {"gold_f1", "gold_precision", "gold_recall", "gold_exact", "gold_acc"}
    with pytest.raises(ValueError, match="image truth"):
        gold_scores(read, truth[:1])


def test_disagreement_counts_reports_and_pairs():
    a = np.stack([_row(Edema=1), _row(Edema=0), _row(Edema=-1)])
    b = np.stack([_row(Edema=1, Cardiomegaly=1), _row(Edema=0), _row(Edema=1)])
    out = disagreement(a, b)
    assert out["labeler_gold_disagree"] == pytest.approx(2 / 3)
    assert out["labeler_gold_disagree_pairs"] == pytest.approx(2 / 42)


# ------------------------------------------------------------------------------------------- import graph


def _module_path(name: str) -> Path | None:
    base = ROOT.joinpath(*name.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _imported(path: Path) -> set[str]:
    """Every project module a file imports, at any depth of its code (lazy imports included)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
    out = set()
    for name in names:
        parts = name.split(".")
        out.update(".".join(parts[:k]) for k in range(1, len(parts) + 1) if _module_path(".".join(parts[:k])))
    return out


def _reachable(start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        todo += sorted(_imported(_module_path(name)) - seen)
    return seen


def test_no_reward_imports_the_gold_reader():
    """No module of rewards/ reaches a gold reader (v1 or v2), directly or through any chain of imports."""
    rewards = sorted(p for p in (ROOT / "rewards").rglob("*.py"))
    assert rewards
    bad = []
    for path in rewards:
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        reached = _reachable(name)
        bad += [(name, reader) for reader in (READER, READER_V2) if reader in reached]
    assert not bad, f"these reward modules reach a gold reader: {bad}"


def test_the_gold_readers_never_reach_the_rule_labeler():
    """Neither reader reaches the rule labeler (rewards/chexpert*.py) through any chain of imports. (Both reach
    rewards' registry through the package imports of harness.data; no labeler is among them.)"""
    labelers = {".".join(p.relative_to(ROOT).with_suffix("").parts) for p in (ROOT / "rewards").glob("chexpert*.py")}
    assert labelers
    for reader in (READER, READER_V2):
        reached = _reachable(reader)
        assert reader in reached and not reached & labelers, (reader, reached & labelers)


def test_the_import_graph_check_sees_a_lazy_import(tmp_path):
    # the check follows imports inside functions: the evaluation stage reaches the reader lazily or not
    assert READER in _reachable("harness.stages.evaluate") or READER in _reachable("harness.stages.rl")
