"""reports/examples.py: Fig. 4 (test reports per stage) and Fig. S6 (reward inversion) from the records."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy.stats import kendalltau

from reports.examples import (
    _ranks,
    _tau,
    fig4_table,
    find_inversion,
    findings_text,
    ground_truth_text,
    inversion_rows,
    pick_examples,
    stage_columns,
)
from reports.experiment import load_experiment
from tests.reports.conftest import EXPERIMENTS, INVERTED, write_study_experiment


def test_findings_marked_against_the_ground_truth():
    ref = [None] * 14
    ref[2], ref[10], ref[9] = 1.0, 1.0, 0.0  # cardiomegaly, effusion positive; pneumothorax negative
    hyp = [0.0] * 14
    hyp[2], hyp[9] = 1.0, 1.0
    assert findings_text(hyp, ref) == "+Cardiomegaly, Pneumothorax (FP); missed: Pleural Effusion"
    assert ground_truth_text(ref) == "Cardiomegaly, Pleural Effusion"
    assert ground_truth_text([None] * 14) == "not known"
    assert findings_text(hyp, [None] * 14) == "Cardiomegaly, Pneumothorax"  # nothing to mark against
    assert findings_text([0.0] * 14, [0.0] * 14) == "no positive finding"


def test_tau_and_ranks():
    rng = np.random.default_rng(3)
    for _ in range(20):
        a, b = rng.random(5).round(1), rng.random(5).round(1)
        if np.ptp(a) > 0 and np.ptp(b) > 0:
            assert _tau(a, b) == pytest.approx(kendalltau(a, b).statistic)
    assert _tau([0.1, 0.2, 0.3], [0.5, 0.5, 0.5]) != _tau([0.1, 0.2, 0.3], [0.5, 0.5, 0.5])  # NaN: F1 flat
    assert _tau(INVERTED["bleu4"], INVERTED["entity_f1"]) == pytest.approx(-1.0)
    assert _ranks([0.3, 0.7, 0.3, 0.1]) == [2, 1, 2, 4]


def test_fig_s6_finds_the_inverted_group(demo_experiment_dir):
    inv = find_inversion(load_experiment(demo_experiment_dir))
    assert (inv.arm, inv.clinical, inv.report_id, inv.kind) == ("rer_vapr", "entity_f1", "v1", "reward-variance")
    assert inv.tau == pytest.approx(-1.0) and inv.bleu == INVERTED["bleu4"] and inv.clin == INVERTED["entity_f1"]
    rows = inversion_rows(inv)
    assert rows[0][0] == "Reference" and rows[0][3] == "mild cardiomegaly ."
    assert [r[1].split()[1] for r in rows[1:]] == ["(#4)", "(#3)", "(#2)", "(#1)"]
    assert [r[2].split()[1] for r in rows[1:]] == ["(#1)", "(#2)", "(#3)", "(#4)"]
    assert rows[1][3] == inv.candidates[0] and len(rows) == 5


def test_fig_s6_prefers_radgraph_and_needs_candidates(tmp_path):
    root = write_study_experiment(tmp_path / "d", EXPERIMENTS / "demo_rl_ablation.yaml")
    path = next(root.glob("stages/rl-seed0-rer_vapr")) / "analysis_reward-variance.json"
    d = json.loads(path.read_text())
    for pol in d["policies"].values():  # a RadGraph record: the paper's reward wins over entity F1
        # v1 (inverted for entity F1) agrees with BLEU-4 here; v2 is exactly inverted
        pol["rewards"]["radgraph_f1"] = [[0.1, 0.2, 0.3, 0.4], [0.1, 0.2, 0.3, 0.4], [0.6, 0.1, 0.4, 0.0]]
    path.write_text(json.dumps(d))
    inv = find_inversion(load_experiment(root))
    assert inv.clinical == "radgraph_f1" and inv.report_id == "v2" and inv.tau == pytest.approx(-1.0)
    for p in root.glob("stages/*/analysis_*.json"):
        d = json.loads(p.read_text())
        for pol in d["policies"].values():
            pol.pop("candidates")
        p.write_text(json.dumps(d))
    assert find_inversion(load_experiment(root)) is None


def test_fig4_columns_of_the_demo(demo_experiment_dir):
    exp = load_experiment(demo_experiment_dir)
    cols = stage_columns(exp)
    assert [c.stage for c in cols] == ["base", "warmup", "sft", "rl"]
    assert cols[-1].label == "Stage 3 (RL): RER + VAPR (REVA-PO)"  # the full method among six RL arms
    assert cols[0].label.startswith("Baseline (no fine-tuning) (eval_stages/base/predictions_final_test.jsonl")
    columns, rows = fig4_table(exp, k=2)
    assert len(rows) == 2 * (1 + len(cols))
    ref = rows[0]
    assert ref[1] == "Reference" and ref[2].startswith("GT: ") and ref[2] != "GT: no positive finding"
    ids = pick_examples(cols, 30)
    first = [i for i in ids if any(v == 1.0 for v in (cols[0].rows[i]["ref_labels"] or []))]
    assert ids[:len(first)] == first  # reports with a positive ground-truth finding come first


def test_fig4_columns_by_the_arms_final_stage(tmp_path):
    """Table 1's arms end at each stage: one column per stage, no extra evaluations needed."""
    exp = load_experiment(write_study_experiment(tmp_path / "t1", EXPERIMENTS / "table1_iu_xray.yaml"))
    cols = stage_columns(exp)
    assert [(c.stage, c.label.split(": ")[1]) for c in cols] == [
        ("base", "base model (no fine-tuning)"), ("warmup", "stage 1 (warm-up)"), ("sft", "stages 1+2 (SFT)"),
        ("rl", "REVA-PO (this harness)")]
    assert {c.seed for c in cols} == {0}


def test_fig4_reads_the_stage_evaluations_of_demo_folders_written_before_stage_evals(tmp_path):
    """Older demo folders hold eval_stages/predictions_<label>_test.jsonl (labels base, warm-up, SFT)."""
    from tests.reports.conftest import _text_predictions

    root = write_study_experiment(tmp_path, EXPERIMENTS / "demo_rl_ablation.yaml")
    assert [c.stage for c in stage_columns(load_experiment(root))] == ["rl"]
    for label in ("base", "warm-up", "SFT"):
        _text_predictions(root / "eval_stages" / f"predictions_{label}_test.jsonl", label, 0, 0.2)
    cols = stage_columns(load_experiment(root))
    assert [c.stage for c in cols] == ["base", "warmup", "sft", "rl"]
    assert cols[1].label == "Stage 1 (warm-up) (eval_stages/predictions_warm-up_test.jsonl)"
