"""reports/cli.py (the `report` and `analyze` subcommands) and reports/analysis_cli.py's plumbing.

The analysis test replaces model loading and sampling with a fixed set of candidates; everything else
(manifest -> RunConfig, prompts, reward registry, statistics, the JSON file) is the real code.
"""

from __future__ import annotations

import argparse
import json
from types import SimpleNamespace

import numpy as np
import pytest

from reports.analyses import p_sign, p_top1, within_group_std
from reports.cli import add_subcommands


def _parser():
    parser = argparse.ArgumentParser(prog="regbench")
    add_subcommands(parser.add_subparsers(dest="command", required=True))
    return parser


def test_subcommands_parse():
    ns = _parser().parse_args(["report", "runs/x", "--out", "r", "--bootstrap", "500"])
    assert (ns.experiment_dir, ns.out, ns.bootstrap, ns.seed) == ("runs/x", "r", 500, 0)
    ns = _parser().parse_args(["analyze", "sign-alignment", "runs/x/rl", "--n-prompts", "5"])
    assert (ns.kind, ns.run, ns.n_prompts, ns.group_size, ns.device) == ("sign-alignment", "runs/x/rl", 5, 4, "auto")
    with pytest.raises(SystemExit):
        _parser().parse_args(["analyze", "nonsense", "runs/x"])


def test_report_command(experiment_dir, tmp_path, capsys):
    ns = _parser().parse_args(["report", str(experiment_dir), "--out", str(tmp_path / "rep"), "--bootstrap", "200"])
    assert ns.func(ns) == 0
    assert (tmp_path / "rep" / "index.html").is_file()
    assert "index.html" in capsys.readouterr().out


REPORTS = ["the heart size is normal . no pleural effusion or pneumothorax .",
           "mild cardiomegaly . small left pleural effusion .",
           "the lungs are clear . no acute osseous abnormality .",
           "right lower lobe opacity may represent pneumonia ."]


@pytest.fixture
def fake_rl_run(tmp_path, monkeypatch):
    import harness.stages.common as common
    import harness.stages.rl as rl_stage
    import reports.analysis_cli as ac
    from harness.config import RunConfig, to_dict

    run = tmp_path / "rl"
    (run / "model").mkdir(parents=True)
    (tmp_path / "sft" / "model").mkdir(parents=True)
    cfg = RunConfig(init_from=str(tmp_path / "sft" / "model"), out_dir=str(run))
    (run / "manifest.json").write_text(json.dumps({"stage": "rl", "seed": 0, "config": to_dict(cfg)}))
    samples = [SimpleNamespace(id=f"s{i}", report=REPORTS[i % 4]) for i in range(5)]
    monkeypatch.setattr(common, "load_splits", lambda cfg, progress=True: {"val": samples})
    monkeypatch.setattr(rl_stage, "prompt_set", lambda cfg, s, spec: SimpleNamespace(
        ids=[x.id for x in s], images=[[None]] * len(s), instructions=["describe"] * len(s),
        references=[x.report for x in s]))
    loaded = []
    monkeypatch.setattr(ac, "_load_policy", lambda path, cfg, device: loaded.append(str(path)) or (path, None, {}))

    def fake_sample(model, processor, prompts, cfg, group_size, seed, batch_prompts):
        rng = np.random.default_rng(seed + (1 if str(model).endswith("model") and "rl" in str(model) else 0))
        return [REPORTS[int(k)] for k in rng.integers(0, 4, size=len(prompts.ids) * group_size)]

    monkeypatch.setattr(ac, "_sample", fake_sample)
    monkeypatch.setattr(ac, "analysis_rewards", lambda kind: ["bleu4", "chexpert_f1"] + (
        ["entity_f1"] if kind == "reward-variance" else []))
    return run, loaded


def test_run_analysis_sign_alignment(fake_rl_run):
    from reports.analysis_cli import run_analysis, summary_lines

    run, loaded = fake_rl_run
    path = run_analysis("sign-alignment", run, n_prompts=4, group_size=3, seed=0)
    assert path == run / "analysis_sign-alignment.json"
    assert loaded == [str(run.parent / "sft" / "model"), str(run / "model")]  # before RL, after RL
    d = json.loads(path.read_text())
    assert (d["n_prompts"], d["group_size"], d["rewards_used"]) == (4, 3, ["bleu4", "chexpert_f1"])
    for pol in ("before", "after"):
        res = d["policies"][pol]
        assert len(res["candidates"]) == 4 and all(len(g) == 3 for g in res["candidates"])
        b, f = np.array(res["rewards"]["bleu4"]), np.array(res["rewards"]["chexpert_f1"])
        assert b.shape == (4, 3)
        # a candidate identical to its reference gets BLEU-4 = 1 and CheXpert F1 = 1
        refs = [REPORTS[i % 4] for i in range(4)]
        for i, group in enumerate(res["candidates"]):
            for j, cand in enumerate(group):
                if cand == refs[i]:
                    assert b[i, j] == pytest.approx(1.0) and f[i, j] == pytest.approx(1.0)
        assert res["stats"]["p_sign"]["value"] == pytest.approx(p_sign(b, f)["value"], nan_ok=True)
        assert res["stats"]["p_top1"]["value"] == pytest.approx(p_top1(b, f)["value"], nan_ok=True)
    assert any("P_sign" in line for line in summary_lines(path))


def test_run_analysis_reward_variance(fake_rl_run):
    from reports.analysis_cli import run_analysis

    run, _ = fake_rl_run
    d = json.loads(run_analysis("reward-variance", run, group_size=4, seed=1).read_text())
    assert d["n_prompts"] == 5 and d["rewards_used"] == ["bleu4", "chexpert_f1", "entity_f1"]
    res = d["policies"]["after"]
    assert res["stats"]["bleu4"]["mean"] == pytest.approx(within_group_std(res["rewards"]["bleu4"]).mean())


def test_relative_init_from_is_found(fake_rl_run, monkeypatch, tmp_path):
    """init_from relative to the folder the experiment ran in is looked up from the run's parents."""
    from reports.analysis_cli import run_analysis

    run, loaded = fake_rl_run
    man = json.loads((run / "manifest.json").read_text())
    man["config"]["init_from"] = "sft/model"
    (run / "manifest.json").write_text(json.dumps(man))
    monkeypatch.chdir(run / "model")
    run_analysis("sign-alignment", run, n_prompts=2, group_size=2)
    assert loaded[0] == str(tmp_path.resolve() / "sft" / "model")
    man["config"]["init_from"] = "elsewhere/model"
    (run / "manifest.json").write_text(json.dumps(man))
    with pytest.raises(FileNotFoundError, match="elsewhere"):
        run_analysis("sign-alignment", run)


def test_run_analysis_errors(tmp_path):
    from reports.analysis_cli import run_analysis

    with pytest.raises(ValueError, match="unknown analysis"):
        run_analysis("entropy", tmp_path)
    with pytest.raises(FileNotFoundError):
        run_analysis("sign-alignment", tmp_path / "missing")
