"""reports/protocol.py: the checkpoint each arm was tested at, and refused comparisons (issue 11 / issue 9)."""

from __future__ import annotations

import json

import pytest

from reports.experiment import load_experiment
from reports.protocol import arm_tested_at, protocol_issue
from reports.protocol import tested_at as run_tested_at
from reports.tables import default_spec, differences_markdown, results_frame, to_markdown
from tests.reports.conftest import write_experiment


def _edit(path, fn):
    data = json.loads(path.read_text())
    fn(data)
    path.write_text(json.dumps(data))


@pytest.fixture
def root(tmp_path):
    return write_experiment(tmp_path / "exp")


def test_tested_at_per_run_and_arm(root):
    exp = load_experiment(root)
    assert [run_tested_at(r) for r in exp.runs_of("rer_vapr")] == ["rl step 16/24 (best_val)"] * 3
    _edit(root / "stages" / "rl-seed1-ckl" / "metrics.json", lambda d: d.update(selected_step=8))
    exp = load_experiment(root)
    assert arm_tested_at(exp, "ckl") == "rl steps 24/24, 8/24, 24/24 (best_val)"
    assert arm_tested_at(exp, "no_vapr") == "rl step 24/24 (best_val)"


def test_arms_without_rl_say_their_stage(root):
    index = json.loads((root / "index.json").read_text())
    for r in index["runs"]:
        if r["arm"] == "ckl":
            r["stages"].pop("rl")
            r["final_stage"] = "sft"
        if r["arm"] == "no_kl":
            r["stages"] = {}
            r["final_stage"] = None
    (root / "index.json").write_text(json.dumps(index))
    exp = load_experiment(root)
    assert arm_tested_at(exp, "ckl") == "sft: end" and arm_tested_at(exp, "no_kl") == "base model"
    assert protocol_issue(exp, "ckl", "rer_vapr") is None  # no RL stage: no rule to disagree with


def test_different_select_rules_are_refused(root):
    for seed in (0, 1, 2):
        _edit(root / "stages" / f"rl-seed{seed}-ckl" / "manifest.json", lambda d: d["config"]["rl"].update(
            select="final"))
    exp = load_experiment(root)
    assert protocol_issue(exp, "ckl", "rer_vapr") == "rl.select final vs best_val"
    assert protocol_issue(exp, "no_kl", "rer_vapr") is None
    spec = default_spec(exp, B=200)
    df = results_frame(exp, spec)
    ckl = df[df.arm == "ckl"]
    assert ckl.p_value.isna().all() and ckl.within_noise.isna().all()
    assert (ckl.test == "refused: rl.select final vs best_val").all()
    # the refused comparisons do not count in the table's Holm-Bonferroni correction
    assert df[df.arm == "no_kl"].p_value.notna().sum() > 0
    assert "Comparisons refused" in to_markdown(exp, df, spec)
    assert "| w/ CKL, w/o RER | 0 | – | refused |" in differences_markdown(exp, df, spec)


def test_different_decoding_is_refused(root):
    _edit(root / "no_kl" / "seed0" / "eval" / "metrics.json", lambda d: d["decoding"].update(min_new_tokens=40))
    _edit(root / "ckl" / "seed0" / "eval" / "metrics.json", lambda d: d["decoding"].update(batch_size=4,
                                                                                          backend="hf"))
    exp = load_experiment(root)
    assert protocol_issue(exp, "no_kl", "rer_vapr") == "test decoding min_new_tokens 40 vs 0"
    assert protocol_issue(exp, "ckl", "rer_vapr") is None  # batch size and backend do not change the tokens
    # records without `decoding` (older evaluations) are not refused
    _edit(root / "no_kl" / "seed0" / "eval" / "metrics.json", lambda d: d.pop("decoding"))
    _edit(root / "no_kl" / "seed1" / "eval" / "metrics.json", lambda d: d.pop("decoding"))
    _edit(root / "no_kl" / "seed2" / "eval" / "metrics.json", lambda d: d.pop("decoding"))
    assert protocol_issue(load_experiment(root), "no_kl", "rer_vapr") is None
