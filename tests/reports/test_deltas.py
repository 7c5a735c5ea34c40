"""reports/deltas.py: Table 3's ΔNLG / ΔCE recomputed from the paper's own numbers."""

from __future__ import annotations

import math

import pytest

from reports.deltas import CE_GROUP, NLG_GROUP, format_delta, group_delta
from reports.published import published_table


def test_published_deltas_recomputed_from_published_numbers():
    rows = published_table("revapo_table3")["rows"]
    s1 = next(r for r in rows if r["label"] == "S1")
    checked = 0
    for row in rows:
        if row["label"] == "S1":
            assert row["delta_nlg"] is None and row["delta_ce"] is None
            continue
        assert format_delta(group_delta(row, s1, NLG_GROUP)) == row["delta_nlg"], row["label"]
        assert format_delta(group_delta(row, s1, CE_GROUP)) == row["delta_ce"], row["label"]
        checked += 1
    assert checked == 4


def test_group_delta_by_hand_and_missing_values():
    # (0.11 + 0.23) / (0.1 + 0.2) - 1 = 0.34 / 0.3 - 1 = 0.1333...
    assert group_delta({"a": 0.11, "b": 0.23}, {"a": 0.1, "b": 0.2}, ["a", "b"]) == pytest.approx(0.04 / 0.3)
    assert format_delta(-0.0449) == "-4.5%"
    assert math.isnan(group_delta({"a": 0.1, "b": None}, {"a": 0.1, "b": 0.2}, ["a", "b"]))
    assert math.isnan(group_delta({"a": 0.1}, {"a": 0.0}, ["a"]))
    assert format_delta(math.nan) == "–"


def _table3_study(root, scores_by_arm: dict) -> None:
    import json

    arms = [{"name": a, "label": lab} for a, lab in (("s1", "S1"), ("s1_s2", "S1+S2"))]
    runs = []
    for arm, scores in scores_by_arm.items():
        ev = root / arm / "eval"
        ev.mkdir(parents=True)
        (ev / "metrics.json").write_text(json.dumps({"split": "test", **scores}))
        runs.append({"arm": arm, "seed": 0, "status": "complete", "metrics": f"{arm}/eval/metrics.json"})
    (root / "index.json").write_text(json.dumps({"format": "regbench.experiment-index/1", "study": "t3",
                                                 "reproduces": "revapo_table3", "baseline_arm": "s1",
                                                 "seeds": [0], "arms": arms, "runs": runs}))


def test_table3_study_prints_our_and_the_papers_deltas(tmp_path):
    from reports.experiment import load_experiment
    from reports.tables import default_spec, results_frame, wide_rows

    nlg = {"BLEU_1": 0.31, "BLEU_2": 0.2, "BLEU_3": 0.13, "BLEU_4": 0.09, "ROUGE_L": 0.27, "METEOR": 0.13}
    ce = {"ce_micro_precision": 0.41, "ce_micro_recall": 0.33, "ce_micro_f1": 0.37}
    s12 = {k: v * 1.1 for k, v in nlg.items()} | {k: v * 0.95 for k, v in ce.items()}
    _table3_study(tmp_path, {"s1": nlg | ce, "s1_s2": s12})
    exp = load_experiment(tmp_path)
    spec = default_spec(exp, B=200)
    header, rows = wide_rows(results_frame(exp, spec), spec)
    assert header[-2:] == ["ΔNLG", "ΔCE"]
    by = {(r[0], r[1].split(":")[0]): r for r in rows}
    assert by[("S1+S2", "ours")][-2:] == ["+10.0%", "-5.0%*"]  # no RadGraph: ΔCE over P, R, F1
    assert by[("S1 (baseline)", "ours")][-2:] == ["+0.0%", "+0.0%*"]
    assert by[("S1+S2", "paper")][-2:] == ["+5.2%", "+13.5%"]
    assert by[("S1", "paper")][-2:] == ["–", "–"]
