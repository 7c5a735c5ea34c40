"""reports/protocol.py: the checkpoint each arm was tested at, and refused comparisons (issue 11 / issue 9)."""

from __future__ import annotations

import json

import pytest

from reports.experiment import load_experiment
from reports.protocol import arm_tested_at, protocol_issue, selection_score, selection_score_note
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


def test_tables_state_the_validation_score_that_selected_the_checkpoint(root):
    # Issue 24: Eq. 10 and the official code's weighting can pick different checkpoints (and VAPR anchors); every
    # results table says which one each arm selected by.
    for seed in (0, 1, 2):
        for arm, kind in (("ckl", "official"), ("rer_vapr", "paper"), ("no_kl", "paper")):
            _edit(root / "stages" / f"rl-seed{seed}-{arm}" / "manifest.json", lambda d, kind=kind: d["config"][
                "rl"].update(val_score=kind, val_lambda=0.1, val_rg_metric="radgraph"))
    exp = load_experiment(root)
    assert selection_score(exp.runs_of("ckl")[0]) == "official code, mean(M) + 0.1 RG (RG: radgraph)"
    assert selection_score(exp.runs_of("rer_vapr")[0]) == "Eq. 10, (sum(M) + 0.1 RG) / (|M| + 1) (RG: radgraph)"
    md = to_markdown(exp, results_frame(exp, default_spec(exp, B=200)), default_spec(exp, B=200))
    assert "Validation score s_val (rl.val_score) that selected the tested checkpoint" in md
    assert "official code, mean(M) + 0.1 RG (RG: radgraph) for `ckl`" in md
    # rl.select final without VAPR: no validation score chose the tested policy, so none is named for the arm;
    # with VAPR the score still chose the anchor.
    _edit(root / "stages" / "rl-seed0-no_vapr" / "manifest.json", lambda d: d["config"]["rl"].update(
        select="final", val_score="official"))
    for seed in (0, 1, 2):
        _edit(root / "stages" / f"rl-seed{seed}-ckl" / "manifest.json", lambda d: d["config"]["rl"].update(
            select="final"))
    exp = load_experiment(root)
    assert selection_score(exp.runs_of("no_vapr")[0]) is None
    assert selection_score(exp.runs_of("ckl")[0]) == "official code, mean(M) + 0.1 RG (RG: radgraph)"
    note = selection_score_note(exp, ["no_vapr", "rer_vapr", "no_kl"])
    assert note.endswith("Eq. 10, (sum(M) + 0.1 RG) / (|M| + 1) (RG: radgraph), every RL arm that selects by it "
                         "(docs/paper_vs_code.md).")


def test_a_different_rl_computation_is_refused(root):
    """An arm trained with an inexact option (issue 27: the fused sampler, merged LoRA or shared-prompt passes) is
    not compared with one trained without it; records written before the options existed count as the exact
    passes, and every arm with the same options compares."""
    assert protocol_issue(load_experiment(root), "ckl", "rer_vapr") is None
    for seed in (0, 1, 2):
        _edit(root / "stages" / f"rl-seed{seed}-ckl" / "manifest.json", lambda d: d["config"]["rl"].update(
            prompt_pass="shared"))
    exp = load_experiment(root)
    assert protocol_issue(exp, "ckl", "rer_vapr") == "RL computation rl.prompt_pass shared vs per_row"
    _edit(root / "stages" / "rl-seed0-rer_vapr" / "manifest.json", lambda d: d["config"]["rl"].update(
        lora_pass="merged"))
    exp = load_experiment(root)
    assert protocol_issue(exp, "no_kl", "rer_vapr") == "RL computation rl.lora_pass peft vs merged/peft"
    for arm in ("ckl", "rer_vapr"):
        for seed in (0, 1, 2):
            _edit(root / "stages" / f"rl-seed{seed}-{arm}" / "manifest.json", lambda d: d["config"]["rl"].update(
                prompt_pass="shared", lora_pass="merged"))
    assert protocol_issue(load_experiment(root), "ckl", "rer_vapr") is None
