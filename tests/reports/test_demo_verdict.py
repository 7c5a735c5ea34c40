"""reports/demo_verdict.py: the demo's no-KL vs constant-KL contrast, on hand-counted fake arms."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from harness.scoring.evaluation import BLEU_COUNT_KEYS
from reports.demo_verdict import contrast_text, selected_kl

REF = [1, None, 1, 0, None, None, None, None, None, None, 1, None, None, None]


PRESENT = [int(v == 1) for v in REF]  # the image truth: findings 0, 2 and 10 drawn


def _row(i, hyp, rng, gold=None):
    counts = dict(zip(BLEU_COUNT_KEYS, [12.0 - k + rng.integers(0, 3) for k in range(4)] + [20.0, 19.0, 18.0, 17.0,
                                                                                              20.0, 21.0], strict=True))
    return {"id": f"r{i}", "nlg": counts, "hyp_labels": hyp, "ref_labels": REF,
            "gold_labels": hyp if gold is None else gold, "present": PRESENT}


def _arm(tmp_path, name, hyps, kl_rows, selected, golds=None):
    ev, rl = tmp_path / name / "eval", tmp_path / name / "rl"
    ev.mkdir(parents=True)
    rl.mkdir(parents=True)
    rng = np.random.default_rng(len(name))
    rows = [_row(i, h, rng, None if golds is None else golds[i]) for i, h in enumerate(hyps)]
    (ev / "predictions_final_test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (rl / "metrics.json").write_text(json.dumps({"selected_step": selected}))
    (rl / "evals.jsonl").write_text("".join(json.dumps(r) + "\n" for r in kl_rows))
    return ev, rl


def test_contrast_counts_gold_f1_by_hand(tmp_path):
    # Baseline arm: every report states findings 0 and 2 (2 TP of 3 positives, 0 FP) -> F1 = 4 / 5 per report.
    good = [1, None, 1, None, None, None, None, None, None, None, None, None, None, None]
    # Arm: finding 0 only, plus a false 5 -> per report TP 1, FP 1, FN 2 -> F1 = 2 / 5.
    bad = [1, None, None, None, None, 1, None, None, None, None, None, None, None, None]
    n = 7
    ref_ev, ref_rl = _arm(tmp_path, "ckl", [good] * n, [{"step": 5, "kl_start_seq": 1.25},
                                                         {"step": 10, "kl_start_seq": 2.7}], selected=5)
    # The gold reader reads the arm's reports as the labeler does, except that it finds finding 2 hedged (-1):
    # drawn, so it counts as reported against the image truth.
    bad_gold = [1, None, -1] + bad[3:]
    arm_ev, arm_rl = _arm(tmp_path, "no_kl", [bad] * (n - 1) + [good],
                          [{"step": 5, "kl_start_seq": 9.0}, {"step": 10, "kl_start_seq": 15.3}], selected=10,
                          golds=[bad_gold] * (n - 1) + [good])
    text = contrast_text(arm_ev, ref_ev, arm_rl, ref_rl, "no KL", "constant KL", B=500)
    # Rule labeler vs report labels, arm: TP 6 + 2 = 8, FP 6, FN 12 + 1 = 13 -> F1 = 16 / 35; reference: 28 / 35.
    got = float(re.search(r"rule labeler findings micro-F1 \(vs report labels\): ([+-][0-9.]+)", text).group(1))
    assert got == pytest.approx(16 / 35 - 28 / 35, abs=5e-5)
    # Gold reader vs image truth, arm: TP 12 + 2 = 14, FP 6, FN 6 + 1 = 7 -> F1 = 28 / 41; reference: 28 / 35.
    got = float(re.search(r"gold findings micro-F1 \(gold reader vs image truth\): ([+-][0-9.]+)", text).group(1))
    assert got == pytest.approx(28 / 41 - 28 / 35, abs=5e-5)
    assert "n = 7" in text and "no KL 15.30" in text and "constant KL 1.25" in text
    assert "test-split noise only" in text.split("\n")[1] and "training sd" in text.split("\n")[1]
    # one seed never decides: no decision word anywhere (before: "differ at 0.05" / "not distinguishable")
    assert not re.search(r"\b(differ|distinguishable|better|worse|equivalent)\b", text)


def test_selected_kl_is_the_tested_step_and_absent_when_not_logged(tmp_path):
    _, rl = _arm(tmp_path, "a", [REF], [{"step": 3, "kl_start_seq": 0.7}, {"step": 6, "BLEU_4": 0.2}], selected=6)
    assert selected_kl(rl) is None
    (rl / "metrics.json").write_text(json.dumps({"selected_step": 3}))
    assert selected_kl(rl) == pytest.approx(0.7)


def test_missing_predictions_are_named(tmp_path):
    ev, rl = _arm(tmp_path, "a", [REF], [], selected=1)
    (ev / "predictions_final_test.jsonl").unlink()
    with pytest.raises(FileNotFoundError, match="predictions_final_test.jsonl"):
        contrast_text(ev, ev, rl, rl, "x", "y")


def test_demo_takes_the_no_kl_arm_against_the_baseline(tmp_path):
    from harness.cli.demo import DEMO_STUDY, verdict_arms
    from harness.experiments import load_study
    from reports.demo_verdict import demo_verdict

    study = load_study(DEMO_STUDY)
    row = [1, None, 1, None, None, None, None, None, None, None, None, None, None, None]
    runs = []
    for arm in study.arms:
        kl = 4.5 if arm.name == "no_kl" else 0.5
        _arm(tmp_path, arm.name, [row] * 3, [{"step": 1, "kl_start_seq": kl}], selected=1)
        runs.append({"arm": arm.name, "seed": 0, "eval_dir": f"{arm.name}/eval",
                     "stages": {"rl": {"dir": f"{arm.name}/rl"}}})
    (tmp_path / "index.json").write_text(json.dumps({"runs": runs}))
    assert verdict_arms(study)[0::2] == ("no_kl", "ckl")
    text = demo_verdict(tmp_path, *verdict_arms(study))
    assert text.startswith("no KL - constant KL (static reference), one seed")
    assert "no KL 4.50, constant KL (static reference) 0.50" in text


def test_the_demo_runs_every_arm_on_one_seed_and_its_contrast_on_three():
    """issue 23 item 6: the declared contrast (no KL vs constant KL) runs on 3 RL seeds from one shared SFT model
    (stage_seeds), every other arm on the first seed."""
    from harness.cli.demo import DEMO_STUDY, demo_runs
    from harness.experiments import build_plan, load_study

    study = load_study(DEMO_STUDY)
    runs = demo_runs(study)
    assert sorted(s for a, s in runs if a in ("no_kl", "ckl")) == [0, 0, 1, 1, 2, 2]
    assert sorted(a for a, s in runs if s == 0) == sorted(a.name for a in study.arms)
    assert len(runs) == len(study.arms) + 4
    plan = build_plan(study, "/tmp/unused-demo-plan")
    sft = {plan.runs[r].stages["sft"] for r in runs}
    assert len(sft) == 1  # one SFT model for every RL seed
    assert len({plan.runs[r].stages["rl"] for r in runs}) == len(runs)


def test_the_demo_decision_states_the_outcome_with_n_seeds(tmp_path, monkeypatch):
    from types import SimpleNamespace

    import reports.experiment
    from reports.demo_decision import decision_text

    diffs = {"gold_f1": [0.05, 0.06, 0.055], "BLEU_4": [0.001, -0.002, 0.0005]}
    values = {("no_kl", m): {s: 0.5 + d for s, d in enumerate(v)} for m, v in diffs.items()}
    values.update({("ckl", m): {s: 0.5 for s in range(3)} for m in diffs})
    rl = {}
    for arm, kl in (("no_kl", 4.0), ("ckl", 0.5)):
        rl[arm] = []
        for seed in range(3):
            _, rl_dir = _arm(tmp_path / f"s{seed}", arm, [REF], [{"step": 1, "kl_start_seq": kl + seed}], selected=1)
            rl[arm].append(SimpleNamespace(rl_dir=rl_dir))
    exp = SimpleNamespace(
        contrasts=[{"arm": "no_kl", "baseline": "ckl", "metric": "gold_f1", "delta": 0.02},
                   {"arm": "no_kl", "baseline": "ckl", "metric": "BLEU_4", "delta": 0.01}],
        decide={"rule": "fixed_n"}, values=lambda arm, metric: values[arm, metric], runs_of=lambda arm: rl[arm])
    monkeypatch.setattr(reports.experiment, "load_experiment", lambda out: exp)
    text = decision_text(tmp_path, {"no_kl": "no KL", "ckl": "constant KL"})
    lines = text.splitlines()
    assert lines[0].startswith("no KL - constant KL over n = 3 RL seeds [0, 1, 2] (one shared SFT model")
    assert lines[1].startswith("- gold findings micro-F1 (gold reader vs image truth): +0.0550 [")
    assert lines[1].endswith(": better, n = 3 seeds")
    assert lines[2].startswith("- BLEU-4 (proxy reward): -0.0002 [") and lines[2].endswith(": equivalent, n = 3 seeds")
    assert lines[3].endswith("no KL 5.00, constant KL 1.50")


def test_the_demo_decision_under_the_anytime_rule_says_so(tmp_path, monkeypatch):
    # issue 48: the same three seeds under the studies' default rule: the text names the guarantee, and three seeds
    # decide nothing (the anytime rule needs 7 or more at alpha 0.05)
    from types import SimpleNamespace

    import reports.experiment
    from reports.demo_decision import decision_text

    values = {("no_kl", "gold_f1"): {s: 0.55 + 0.001 * s for s in range(3)}, ("ckl", "gold_f1"): {s: 0.5 for s in
                                                                                                     range(3)}}
    exp = SimpleNamespace(contrasts=[{"arm": "no_kl", "baseline": "ckl", "metric": "gold_f1", "delta": 0.02}],
                          decide={}, values=lambda arm, metric: values[arm, metric], runs_of=lambda arm: [])
    monkeypatch.setattr(reports.experiment, "load_experiment", lambda out: exp)
    lines = decision_text(tmp_path).splitlines()
    assert "anytime-valid confidence sequence over seeds (holds however seeds were added)" in lines[0]
    assert "undecided (about" in lines[1]
