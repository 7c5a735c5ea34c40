"""`experiment run --until-decided`: seeds in rounds until every declared contrast is decided
(harness/experiments/sequential.py), on fake stages whose test scores are set per arm and seed."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from harness.cli import main
from harness.config import ConfigError
from harness.experiments import load_study
from harness.experiments.sequential import SEQUENTIAL_FILE, planned_looks, run_until_decided, seed_list
from tests.harness.test_experiments import ARMS, FAKES, write_study

# Per-seed noise shared by both arms' scores and a per-seed wobble of the difference (not exact in binary).
WOBBLE = [0.0013, -0.0021, 0.0007, 0.0019, -0.0011, -0.0004, 0.0016, -0.0023, 0.0009, 0.0002]


def fake_eval(cfg, model_dir, progress=False):
    """BLEU-4 of arm b (constant KL) = arm a's + EFFECT + a seed wobble; arm c like a."""
    effect = float(os.environ["REGBENCH_TEST_EFFECT"])
    base = 0.25 + 0.01 * (cfg.seed % 3)
    arm_b = Path(cfg.out_dir).parts[-3] == "b"  # the eval runs in <out>/<arm>/seed<k>/eval
    return {"BLEU_4": base + (effect + WOBBLE[cfg.seed % len(WOBBLE)] if arm_b else 0.0), "model": model_dir}


SEQ_FAKES = {**FAKES, "eval": "tests.harness.test_sequential:fake_eval"}


def _study(tmp_path, delta=0.01, looks="[3, 5, 8]", rule="fixed_n"):
    extra = f"contrasts: [{{arm: b, metrics: {{BLEU_4: {delta}}}}}]\ndecide: {{looks: {looks}, rule: {rule}}}\n"
    return load_study(write_study(tmp_path, ARMS, seeds="[0, 1]", extra=extra))


@pytest.mark.parametrize(("effect", "delta", "outcome", "seeds"), [
    (0.05, 0.01, "better", 3),       # a large effect is decided at the first look
    (0.0, 0.05, "equivalent", 3),     # a zero effect inside a wide band: equivalent at the first look
    (0.0, 0.0005, "undecided", 8),    # a band narrower than the wobble: no look decides; all looks run
])
def test_rounds_stop_at_the_first_look_that_decides(tmp_path, monkeypatch, effect, delta, outcome, seeds):
    monkeypatch.setenv("REGBENCH_TEST_EFFECT", str(effect))
    monkeypatch.setenv("REGBENCH_TEST_CALLS", str(tmp_path / "calls.jsonl"))
    out = tmp_path / "out"
    lines = []
    result, decisions = run_until_decided(_study(tmp_path, delta), out, workers=1, functions=SEQ_FAKES,
                                          log=lines.append)
    assert result.ok and [d.outcome for d in decisions] == [outcome]
    assert decisions[0].n == seeds
    record = json.loads((out / SEQUENTIAL_FILE).read_text())
    assert record["looks"] == [3, 5, 8] and record["history"][-1]["seeds"] == list(range(seeds))
    assert [h["look"] for h in record["history"]] == list(range(1, [3, 5, 8].index(seeds) + 2))
    index = json.loads((out / "index.json").read_text())
    assert index["decide"]["looks"] == [3, 5, 8] and sorted({r["seed"] for r in index["runs"]}) == list(range(seeds))
    assert any("every contrast decided" in x for x in lines) == (outcome != "undecided")


def test_a_rerun_resumes_the_runs_already_complete(tmp_path, monkeypatch):
    monkeypatch.setenv("REGBENCH_TEST_EFFECT", "0.0")
    calls = tmp_path / "calls.jsonl"
    monkeypatch.setenv("REGBENCH_TEST_CALLS", str(calls))
    out = tmp_path / "out"
    run_until_decided(_study(tmp_path, 0.0005, "[3, 5]"), out, workers=1, functions=SEQ_FAKES, log=lambda s: None)
    first = len(calls.read_text().splitlines())
    _, decisions = run_until_decided(_study(tmp_path, 0.0005, "[3, 5]"), out, workers=1, functions=SEQ_FAKES,
                                     log=lambda s: None)
    assert len(calls.read_text().splitlines()) == first  # nothing ran again
    assert decisions[0].n == 5


def test_looks_and_seeds(tmp_path):
    study = _study(tmp_path)
    assert planned_looks(study, None) == [3, 5, 8] and planned_looks(study, 6) == [3, 5]
    assert seed_list(study, 5) == [0, 1, 2, 3, 4]
    bare = load_study(write_study(tmp_path, ARMS, extra="contrasts: [{arm: b, metrics: {BLEU_4: 0.01}}]\n"))
    assert planned_looks(bare, 10) == [3, 5, 8, 10]
    with pytest.raises(ConfigError, match="needs planned looks"):
        planned_looks(bare, None)
    with pytest.raises(ConfigError, match="below the study's first look"):
        planned_looks(study, 2)


def test_the_command_refuses_a_study_without_contrasts_and_seeds_given_by_hand(tmp_path, capsys):
    plain = write_study(tmp_path, ARMS)
    assert main(["experiment", "run", str(plain), "--until-decided", "--max-seeds", "4", "--out",
                 str(tmp_path / "o")]) == 2
    assert "needs declared primary contrasts" in capsys.readouterr().err
    assert main(["experiment", "run", str(plain), "--until-decided", "--seeds", "0,1"]) == 2
    assert "drop --seeds" in capsys.readouterr().err
    assert main(["experiment", "run", str(plain), "--max-seeds", "4"]) == 2
    assert "--max-seeds goes with --until-decided" in capsys.readouterr().err


def test_a_fixed_n_plan_is_not_changed_after_looking_and_the_anytime_rule_continues(tmp_path, monkeypatch):
    # issue 48: rerunning --until-decided with more looks after the plan [3, 5] has decided (looked at) a look
    # would spend more than alpha under fixed_n: refused before anything runs. Under the anytime rule the same
    # continuation is valid and runs the new looks.
    monkeypatch.setenv("REGBENCH_TEST_EFFECT", "0.0")
    monkeypatch.setenv("REGBENCH_TEST_CALLS", str(tmp_path / "calls.jsonl"))
    out = tmp_path / "out"
    run_until_decided(_study(tmp_path, 0.0005, "[3, 5]"), out, workers=1, functions=SEQ_FAKES, log=lambda s: None)
    with pytest.raises(ConfigError, match="change the plan after looking"):
        run_until_decided(_study(tmp_path, 0.0005, "[3, 5, 8]"), out, workers=1, functions=SEQ_FAKES,
                          log=lambda s: None)
    record = json.loads((out / SEQUENTIAL_FILE).read_text())
    assert record["looks"] == [3, 5] and record["rule"] == "fixed_n"
    # the same folder under the anytime rule: continued to 8 seeds, every look at the full alpha
    _, decisions = run_until_decided(_study(tmp_path, 0.0005, "[3, 5, 8]", "anytime"), out, workers=1,
                                     functions=SEQ_FAKES, log=lambda s: None)
    record = json.loads((out / SEQUENTIAL_FILE).read_text())
    assert record["rule"] == "anytime" and decisions[0].rule == "anytime" and decisions[0].n == 8
    assert decisions[0].alpha_look == 0.05
